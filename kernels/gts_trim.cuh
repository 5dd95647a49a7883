// gts_trim.cuh -- exact [start, end) filtering (stream compaction).
//
// Spec ("Navigation and equal-timestamp example"): metadata bounds are
// conservative candidates; decoded timestamps are then filtered exactly to the
// half-open interval [start, end).
//
// Timestamps are nondecreasing inside a block (checked by the timestamp
// kernel before any of this is used), so the rows a block keeps form one
// contiguous range [lo, lo + n): two binary searches per block find it
// (trim_ranges), an exclusive scan over blocks places the kept ranges end to
// end (scan_blocks, one CUDA block, also writing the kept total to
// summary[1]), then every fixed-width column is copied range by range
// (compact_columns) and every validity mask is re-packed bit by bit
// (compact_masks, counting the present rows for the null counts).  Identity
// columns are broadcast again at their new places (gts_identity.cuh).
// The batch's flags and the kept total come back to the host in one copy.
#pragma once
#include "gts_types.cuh"
#include "gts_scan.cuh"

namespace gts {

// First index in ts[0, n) whose value is >= x (n if none).
__device__ __forceinline__ u32 lower_bound_i64(const i64* __restrict__ ts, u32 n, i64 x) {
  u32 lo = 0, hi = n;
  while (lo < hi) {
    const u32 mid = lo + (hi - lo) / 2u;
    if (ts[mid] < x) lo = mid + 1u; else hi = mid;
  }
  return lo;
}

__device__ __forceinline__ void trim_ranges(const GtsBlock* __restrict__ blocks, u32 nblocks,
                                            const i64* __restrict__ ts, u32 has_start, i64 start, u32 has_end,
                                            i64 end, u32* __restrict__ keep_lo, u64* __restrict__ keep_n) {
  for (u32 b = blockIdx.x * blockDim.x + threadIdx.x; b < nblocks; b += gridDim.x * blockDim.x) {
    const GtsBlock blk = blocks[b];
    const i64* t = ts + blk.out_row;
    const u32 lo = has_start ? lower_bound_i64(t, blk.rows, start) : 0u;
    const u32 hi = has_end ? lower_bound_i64(t, blk.rows, end) : blk.rows;
    keep_lo[b] = lo;
    keep_n[b] = hi > lo ? (u64)(hi - lo) : 0ull;
  }
}

// Exclusive scan of keep_n into new_out; summary[1] = total.  One CUDA block
// of GTS_BLOCK threads.
__device__ __forceinline__ void scan_blocks(const u64* __restrict__ keep_n, u32 nblocks,
                                            u64* __restrict__ new_out, u64* summary) {
  u64 carry = 0;
  for (u32 base = 0; base < nblocks; base += GTS_BLOCK) {
    const u32 b = base + threadIdx.x;
    const u64 v = b < nblocks ? keep_n[b] : 0ull;
    u64 tot;
    const u64 incl = block_scan_add_u64(v, &tot);
    if (b < nblocks) new_out[b] = carry + incl - v;
    carry += tot;
  }
  if (threadIdx.x == 0) summary[1] = carry;
}

// grid = (blocks, columns).
__device__ __forceinline__ void compact_columns(const GtsBlock* __restrict__ blocks, u32 nblocks,
                                                const u32* __restrict__ keep_lo, const u64* __restrict__ keep_n,
                                                const u64* __restrict__ new_out,
                                                const GtsCopyCol* __restrict__ cols) {
  const GtsCopyCol col = cols[blockIdx.y];
  for (u32 b = blockIdx.x; b < nblocks; b += gridDim.x) {
    const u64 n = keep_n[b];
    const u64 s = blocks[b].out_row + keep_lo[b];
    const u64 d = new_out[b];
    if (col.elem_size == 8u) {
      const u64* src = (const u64*)col.src + s;
      u64* dst = (u64*)col.dst + d;
      for (u64 i = threadIdx.x; i < n; i += blockDim.x) dst[i] = src[i];
    } else if (col.elem_size == 4u) {
      const u32* src = (const u32*)col.src + s;
      u32* dst = (u32*)col.dst + d;
      for (u64 i = threadIdx.x; i < n; i += blockDim.x) dst[i] = src[i];
    } else {
      const u8* src = (const u8*)col.src + s;
      u8* dst = (u8*)col.dst + d;
      for (u64 i = threadIdx.x; i < n; i += blockDim.x) dst[i] = src[i];
    }
  }
}

// grid = (blocks, masks).  valid_counts[m] += present rows kept.
__device__ __forceinline__ void compact_masks(const GtsBlock* __restrict__ blocks, u32 nblocks,
                                              const u32* __restrict__ keep_lo, const u64* __restrict__ keep_n,
                                              const u64* __restrict__ new_out, const GtsMaskCol* __restrict__ masks,
                                              u64* __restrict__ valid_counts) {
  const GtsMaskCol m = masks[blockIdx.y];
  const u32* src = (const u32*)m.src;
  u32* dst = (u32*)m.dst;
  u64 count = 0;
  for (u32 b = blockIdx.x; b < nblocks; b += gridDim.x) {
    const u64 n = keep_n[b];
    if (n == 0) continue;
    const u64 d0 = new_out[b];
    const u64 d1 = d0 + n;
    const u64 delta = blocks[b].out_row + keep_lo[b] - d0;  // rows only move down
    const u64 src_end = d1 + delta;                           // one past the last source row
    for (u64 w = (d0 >> 5) + threadIdx.x; w <= ((d1 - 1) >> 5); w += blockDim.x) {
      const u64 q0 = 32u * w;
      const u64 lo = q0 > d0 ? q0 : d0;
      const u64 hi = q0 + 32u < d1 ? q0 + 32u : d1;
      const u64 sbit = q0 + delta;  // source row of destination bit 0 of word w
      const u64 sw = sbit >> 5;
      const u32 sh = (u32)(sbit & 31u);
      u32 v = src[sw] >> sh;
      if (sh != 0u && ((sw + 1u) << 5) < src_end) v |= src[sw + 1] << (32u - sh);
      const u32 nbits = (u32)(hi - lo);
      const u32 first = (u32)(lo - q0);
      const u32 keep = (nbits == 32u ? 0xffffffffu : ((1u << nbits) - 1u)) << first;
      v &= keep;
      if (keep == 0xffffffffu) dst[w] = v; else if (v) atomicOr(dst + w, v);
      count += __popc(v);
    }
  }
  // warp-reduce then one atomic per warp
  for (u32 o = 16; o > 0; o >>= 1) count += __shfl_down_sync(GTS_FULL_MASK, count, o);
  if ((threadIdx.x & 31u) == 0 && count) atomicAdd(valid_counts + blockIdx.y, count);
}

}  // namespace gts
