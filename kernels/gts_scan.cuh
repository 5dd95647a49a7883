// gts_scan.cuh -- warp and block inclusive scans.
//
// Operators: wrapping u64 addition (delta and delta-of-delta reconstruction,
// modulo 2^64 as the spec requires), u32 addition (ranks, counts) and u64 XOR
// (encoding 5's prefix-XOR).  A block scan covers GTS_BLOCK threads, one value
// each, returns the inclusive prefix and the block total, and may be called
// back to back: its scratch is released by a barrier before it returns.  Every
// thread of the block must call it (it contains __syncthreads).
#pragma once
#include "gts_types.cuh"

namespace gts {

// Both operators have identity zero.
struct AddOp {
  template <typename T>
  __device__ __forceinline__ T operator()(T a, T b) const { return a + b; }  // unsigned: wraps
};

struct XorOp {
  template <typename T>
  __device__ __forceinline__ T operator()(T a, T b) const { return a ^ b; }
};

// Inclusive scan across the 32 lanes of a full warp (Kogge-Stone, shuffles).
template <typename T, typename Op>
__device__ __forceinline__ T warp_inclusive_scan(T v, Op op) {
  const u32 lane = threadIdx.x & 31u;
#pragma unroll
  for (u32 d = 1; d < 32; d <<= 1) {
    T o = __shfl_up_sync(GTS_FULL_MASK, v, d);
    if (lane >= d) v = op(v, o);
  }
  return v;
}

// A scan that runs on across a warp's successive groups of 32 items: this group's
// inclusive scan of v, after `carry` (the total of every earlier group); `carry`
// becomes the total through this group (lane 31's result).
template <typename T, typename Op>
__device__ __forceinline__ T warp_carried_scan(T v, T& carry, Op op) {
  const T s = op(carry, warp_inclusive_scan(v, op));
  carry = __shfl_sync(GTS_FULL_MASK, s, 31);
  return s;
}

// Inclusive scan across the GTS_BLOCK threads of the block; *total receives
// the combination of all values.  Shared scratch is per instantiation.
template <typename T, typename Op>
__device__ __forceinline__ T block_inclusive_scan(T v, Op op, T* total) {
  __shared__ T warp_sums[GTS_WARPS];
  const u32 lane = threadIdx.x & 31u;
  const u32 warp = threadIdx.x >> 5;
  v = warp_inclusive_scan(v, op);
  if (lane == 31u) warp_sums[warp] = v;
  __syncthreads();
  if (warp == 0) {
    T s = lane < GTS_WARPS ? warp_sums[lane] : T(0);
    s = warp_inclusive_scan(s, op);
    if (lane < GTS_WARPS) warp_sums[lane] = s;
  }
  __syncthreads();
  if (warp > 0) v = op(warp_sums[warp - 1], v);
  *total = warp_sums[GTS_WARPS - 1];
  __syncthreads();  // scratch free for the next call
  return v;
}

__device__ __forceinline__ u64 block_scan_add_u64(u64 v, u64* total) {
  return block_inclusive_scan<u64, AddOp>(v, AddOp(), total);
}
__device__ __forceinline__ u32 block_scan_add_u32(u32 v, u32* total) {
  return block_inclusive_scan<u32, AddOp>(v, AddOp(), total);
}
__device__ __forceinline__ u64 block_scan_xor_u64(u64 v, u64* total) {
  return block_inclusive_scan<u64, XorOp>(v, XorOp(), total);
}

// OR of a per-thread flag word over the block (all threads get the result).
__device__ __forceinline__ u32 block_or_u32(u32 v) {
  __shared__ u32 acc;
  if (threadIdx.x == 0) acc = 0;
  __syncthreads();
  if (v) atomicOr(&acc, v);
  __syncthreads();
  u32 r = acc;
  __syncthreads();
  return r;
}

// Minimum of a per-thread u32 over the block (all threads get the result).
__device__ __forceinline__ u32 block_min_u32(u32 v) {
  __shared__ u32 acc;
  if (threadIdx.x == 0) acc = 0xffffffffu;
  __syncthreads();
  if (v != 0xffffffffu) atomicMin(&acc, v);
  __syncthreads();
  u32 r = acc;
  __syncthreads();
  return r;
}

}  // namespace gts
