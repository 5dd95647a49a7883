// emu_test_kernels.cuh -- test-only kernels, each committing (or, as a
// control, carefully avoiding) one fault a GPU or compute-sanitizer reports.
// They prove that the emulator catches it (tests/kernels/test_emu_faults.py)
// and that each sanitizer build reports what it should (the canaries of
// tests/kernels/emu/sanitize.py).  Valid CUDA; never part of kernels/.
#pragma once

namespace emu_test {
typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;
}  // namespace emu_test

// Thread 0 loads (store == 0) or stores `width` bytes (2, 4, 8, 16) through a
// typed pointer at src + offset / dst + offset; out[0] receives the low word.
extern "C" __global__ void emu_test_access(const emu_test::u8* src, emu_test::u8* dst, emu_test::u32 width,
                                           emu_test::u32 store, emu_test::u32 offset, emu_test::u64* out) {
  using namespace emu_test;
  if (threadIdx.x != 0) return;
  u64 v = 0;
  if (store == 0) {
    if (width == 2) v = *(const u16*)(src + offset);
    else if (width == 4) v = *(const u32*)(src + offset);
    else if (width == 8) v = *(const u64*)(src + offset);
    else v = (*(const uint4*)(src + offset)).x;
  } else {
    if (width == 2) *(u16*)(dst + offset) = 0x1234u;
    else if (width == 4) *(u32*)(dst + offset) = 0x12345678u;
    else if (width == 8) *(u64*)(dst + offset) = 0x1234567890abcdefull;
    else *(uint4*)(dst + offset) = uint4{1u, 2u, 3u, 4u};
  }
  out[0] = v;
}

// atomicOr on a u32 at p + offset (misaligned unless offset % 4 == 0).
extern "C" __global__ void emu_test_atomic(emu_test::u8* p, emu_test::u32 offset) {
  atomicOr((emu_test::u32*)(p + offset), 1u);
}

// Threads >= live return; the others meet at __syncthreads and count
// themselves.  live == blockDim.x is the correct control.
extern "C" __global__ void emu_test_partial_barrier(emu_test::u32* out, emu_test::u32 live) {
  if (threadIdx.x >= live) return;
  __syncthreads();
  atomicAdd(out, 1u);
}

// Barrier identity.  mode 0: an if/else with a __syncthreads() in each arm
// (equal counts); 1: one helper's barrier reached from two call sites; 2: a
// shuffle with the full mask from two call sites; 3 (control): one barrier
// and one shuffle in a loop whose trip count differs by nothing but the
// iteration.  out[0] counts the threads that got through.
namespace emu_test {
inline void barrier_helper() { __syncthreads(); }
}  // namespace emu_test
extern "C" __global__ void emu_test_divergent_barrier(emu_test::u32* out, emu_test::u32 mode) {
  using namespace emu_test;
  const bool odd = threadIdx.x & 1u;
  if (mode == 0) {
    if (odd) __syncthreads();
    else __syncthreads();
  } else if (mode == 1) {
    if (odd) barrier_helper();
    else barrier_helper();
  } else if (mode == 2) {
    u32 v = threadIdx.x;
    if (odd) v = __shfl_xor_sync(0xffffffffu, v, 1);
    else v = __shfl_xor_sync(0xffffffffu, v, 1);
    (void)v;
  } else {
    for (u32 i = 0; i < 3; ++i) {
      barrier_helper();
      u32 v = __shfl_xor_sync(0xffffffffu, i, 1);
      (void)v;
    }
  }
  atomicAdd(out, 1u);
}

// Warp 0 of the block: lanes >= split leave (mode 0: return; mode 1: wait at
// __syncthreads, i.e. inactive), the others call warp intrinsic `op` with
// `mask`: 0 __shfl_sync (from lane 0), 1 __shfl_up_sync, 2 __shfl_down_sync
// (by 1), 3 __shfl_xor_sync (lane mask 1), 4 __ballot_sync, 5 __any_sync,
// 6 __all_sync, 7 __syncwarp.  out[global thread index] receives the result.
extern "C" __global__ void emu_test_warp(emu_test::u32* out, emu_test::u32 op, emu_test::u32 mask,
                                         emu_test::u32 split, emu_test::u32 mode) {
  using namespace emu_test;
  const u32 lane = threadIdx.x & 31u;
  if (lane >= split) {
    if (mode == 0) return;
    __syncthreads();
    return;
  }
  const u32 v = 100u + lane;
  u32 r = 0;
  switch (op) {
    case 0: r = __shfl_sync(mask, v, 0); break;
    case 1: r = __shfl_up_sync(mask, v, 1u); break;
    case 2: r = __shfl_down_sync(mask, v, 1u); break;
    case 3: r = __shfl_xor_sync(mask, v, 1); break;
    case 4: r = __ballot_sync(mask, lane & 1u); break;
    case 5: r = (u32)__any_sync(mask, lane == 1u); break;
    case 6: r = (u32)__all_sync(mask, lane < 32u); break;
    default: __syncwarp(mask); r = 1u; break;
  }
  out[blockIdx.x * blockDim.x + threadIdx.x] = r;
  if (mode == 1) __syncthreads();
}

// Reads one u32 past n (an out-of-range read no GPU faults on; the ASan build
// reports it in the allocation's guard zone).
extern "C" __global__ void emu_test_read_past(const emu_test::u32* p, emu_test::u32 n, emu_test::u32* out) {
  if (threadIdx.x == 0) out[0] = p[n];
}

// Shared-memory overflow: thread t writes word t of a 64-word array, through
// a pointer UBSan cannot follow to the array (the ASan build reports it).
extern "C" __global__ void emu_test_shared_overflow(emu_test::u32* out) {
  __shared__ emu_test::u32 s[64];
  emu_test::u32* volatile words = s;
  words[threadIdx.x] = threadIdx.x;
  __syncthreads();
  if (threadIdx.x == 0) out[0] = s[0];
}

// Shared memory read before written (initcheck build): every thread writes
// its word of s, except thread `skip` (>= blockDim.x: none), then every thread
// reads its word into out[global thread index].
extern "C" __global__ void emu_test_shared_uninit(emu_test::u32* out, emu_test::u32 skip) {
  __shared__ emu_test::u32 s[1024];
  if (threadIdx.x != skip) s[threadIdx.x] = threadIdx.x + 1u;
  __syncthreads();
  out[blockIdx.x * blockDim.x + threadIdx.x] = s[threadIdx.x];
}

// Races (ThreadSanitizer build).  mode 0: thread 0 writes shared memory that
// thread 32 reads with no barrier between (a missing __syncthreads); mode 1:
// every block writes out[0] (blocks race); mode 2: the control, mode 0 with
// the barrier.
extern "C" __global__ void emu_test_race(emu_test::u32* out, emu_test::u32 mode) {
  __shared__ emu_test::u32 cell;
  if (mode == 1) {
    if (threadIdx.x == 0) out[0] = blockIdx.x;
    return;
  }
  if (threadIdx.x == 0) cell = 7u;
  if (mode == 2) __syncthreads();
  if (threadIdx.x == 32) out[blockIdx.x] = cell;
  if (mode != 2) __syncthreads();  // uniform barriers either way
}
