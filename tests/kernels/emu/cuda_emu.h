// cuda_emu.h -- just enough of CUDA to run gtsamples' kernels on the host,
// for tests on machines without a GPU.  Every CUDA thread of a block is a
// std::thread; __syncthreads is a std::barrier over the block, warp
// intrinsics exchange values through a per-warp buffer between two barriers.
// Blocks run one after another (static "__shared__" variables are per block).
// It checks the kernels' logic (indices, scans, flags, bounds), not timing or
// memory-model subtleties.
#pragma once
#include <barrier>
#include <cstdint>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#define __device__
#define __global__
#define __forceinline__ inline
#define __restrict__ __restrict
#define __shared__ static
#define __launch_bounds__(...)

struct emu_dim3 { unsigned x = 1, y = 1, z = 1; };
inline thread_local emu_dim3 threadIdx, blockIdx;
inline emu_dim3 blockDim, gridDim;

struct EmuWarp {
  std::barrier<> bar{32};
  unsigned long long buf[32];
};
struct EmuBlock {
  explicit EmuBlock(unsigned n) : bar(n), warps(n / 32) {
    for (auto& w : warps) w = std::make_unique<EmuWarp>();
  }
  std::barrier<> bar;
  std::vector<std::unique_ptr<EmuWarp>> warps;
};
inline EmuBlock* emu_block = nullptr;

inline void __syncthreads() { emu_block->bar.arrive_and_wait(); }

inline unsigned long long emu_exchange(unsigned long long v, unsigned src) {
  EmuWarp& w = *emu_block->warps[threadIdx.x >> 5];
  w.buf[threadIdx.x & 31u] = v;
  w.bar.arrive_and_wait();
  unsigned long long r = w.buf[src];
  w.bar.arrive_and_wait();
  return r;
}
template <typename T> inline T __shfl_sync(unsigned, T v, unsigned src) {
  return (T)emu_exchange((unsigned long long)v, src & 31u);
}
template <typename T> inline T __shfl_up_sync(unsigned, T v, unsigned d) {
  unsigned lane = threadIdx.x & 31u;
  return (T)emu_exchange((unsigned long long)v, lane >= d ? lane - d : lane);
}
template <typename T> inline T __shfl_down_sync(unsigned, T v, unsigned d) {
  unsigned lane = threadIdx.x & 31u;
  return (T)emu_exchange((unsigned long long)v, lane + d < 32u ? lane + d : lane);
}
inline unsigned __ballot_sync(unsigned, bool pred) {
  EmuWarp& w = *emu_block->warps[threadIdx.x >> 5];
  w.buf[threadIdx.x & 31u] = pred ? 1 : 0;
  w.bar.arrive_and_wait();
  unsigned m = 0;
  for (unsigned i = 0; i < 32; ++i) m |= (unsigned)w.buf[i] << i;
  w.bar.arrive_and_wait();
  return m;
}

inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __ffs(unsigned x) { return __builtin_ffs((int)x); }
inline unsigned atomicOr(unsigned* p, unsigned v) { return __atomic_fetch_or(p, v, __ATOMIC_SEQ_CST); }
inline unsigned long long atomicOr(unsigned long long* p, unsigned long long v) {
  return __atomic_fetch_or(p, v, __ATOMIC_SEQ_CST);
}
inline unsigned atomicMin(unsigned* p, unsigned v) {
  unsigned cur = __atomic_load_n(p, __ATOMIC_SEQ_CST);
  while (v < cur && !__atomic_compare_exchange_n(p, &cur, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {}
  return cur;
}
inline unsigned long long atomicAdd(unsigned long long* p, unsigned long long v) {
  return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST);
}

// Runs body() as every thread of every block of a (gx, gy) grid of bx threads.
inline void emu_run(unsigned gx, unsigned gy, unsigned bx, const std::function<void()>& body) {
  gridDim.x = gx; gridDim.y = gy; blockDim.x = bx;
  EmuBlock block(bx);
  emu_block = &block;
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < bx; ++t) {
    threads.emplace_back([&, t] {
      threadIdx.x = t;
      for (unsigned y = 0; y < gy; ++y)
        for (unsigned x = 0; x < gx; ++x) {
          blockIdx.x = x; blockIdx.y = y;
          body();
          block.bar.arrive_and_wait();  // the next block starts with fresh shared state
        }
    });
  }
  for (auto& th : threads) th.join();
  emu_block = nullptr;
}
