// emu_initcheck.h -- the "initcheck" build of the emulator: every load and
// store of the kernels (and of the emulator) is seen, and checked against a
// shadow of written bytes, as compute-sanitizer's initcheck does for global
// memory and as no real tool does for shared memory.
//
// How accesses are seen.  The library is compiled with -fsanitize=thread, but
// no TSan runtime is linked: GCC's instrumentation calls __tsan_read4(addr),
// __tsan_write8(addr), __tsan_atomic32_fetch_or(addr, v, order), ... for every
// access, and this file defines those entry points itself (as cuda_emu.h
// defines UBSan's).  An access outside a CUDA thread, or to memory nobody
// tracks, costs one call and a few compares.
//
// What is tracked.
//  * Shared memory: `__shared__` is `static thread_local`, so the shared
//    arrays of a block are this library's TLS block on the worker running it.
//    At every block's start its shadow says "unwritten" (the emulator's own
//    thread-locals excepted): shared memory is poisoned per block, hence per
//    launch; stale values from an earlier block or launch can no longer pass.
//  * Global memory made by `empty` (EmuDevice registers it, emu_ic_track):
//    unwritten until a kernel stores to it or the host fills it (upload,
//    copy_in, a staged copy that arrived, nvCOMP's output: emu_ic_mark).
//  A load or an atomic read-modify-write of an unwritten byte is a fault.
//  * Ownership (emu_ic_own): for the decode kernels, the rows of each chunk's
//    output belong to the block (or warp) that decodes it; a store into the
//    rows of another chunk is a fault, even inside the same allocation.
#pragma once
#include <dlfcn.h>
#include <link.h>

namespace emu::ic {

struct Region {
  uintptr_t lo, hi;
  unsigned char* shadow;  // 1 byte per byte: 1 = written
};
struct Owned {
  uintptr_t lo, hi;
  unsigned owner;  // block index (x + y * gx) or, per warp, block * warps + warp
};

// Replaced only while no launch runs (emu_kernels.cpp's launch lock).  Plain
// arrays: the hooks call no instrumented function (std::vector's members are,
// and would call the hooks back).
inline std::vector<Region> region_store;  // sorted by lo, disjoint
inline std::vector<Owned> owned_store;    // sorted by lo, disjoint
inline const Region* regions = nullptr;
inline size_t n_regions = 0;
inline const Owned* owned = nullptr;
inline size_t n_owned = 0;
inline std::vector<Owned> fence_store;  // the allocations holding the owned rows: every store there must be owned
inline const Owned* fences = nullptr;
inline size_t n_fences = 0;
inline unsigned own_warps = 0;       // 0: owners are blocks; else warps of 32 lanes
inline bool active = false;          // a launch runs

struct Worker {
  Fiber* fiber = nullptr;  // the CUDA thread running on this worker (a plain copy of tls_fiber)
  uintptr_t lo = 0, hi = 0;  // this library's TLS block on this worker
  unsigned char* shadow = nullptr;
  unsigned char* keep = nullptr;  // the emulator's own thread-locals: always written
};
inline thread_local Worker tls;

#define EMU_IC_NOSAN __attribute__((no_sanitize("thread", "undefined", "address"), noinline))

struct TlsFind {
  uintptr_t base;
  uintptr_t lo, hi;
};

EMU_IC_NOSAN inline int find_tls(dl_phdr_info* info, size_t, void* data) {
  auto* t = static_cast<TlsFind*>(data);
  if (info->dlpi_addr != t->base) return 0;
  for (int i = 0; i < info->dlpi_phnum; ++i)
    if (info->dlpi_phdr[i].p_type == PT_TLS && info->dlpi_tls_data) {
      t->lo = (uintptr_t)info->dlpi_tls_data;
      t->hi = t->lo + info->dlpi_phdr[i].p_memsz;
      return 1;
    }
  return 0;
}

EMU_IC_NOSAN inline void keep_range(const void* p, size_t n) {
  const uintptr_t a = (uintptr_t)p;
  for (size_t k = 0; k < n; ++k)
    if (a + k >= tls.lo && a + k < tls.hi) tls.keep[a + k - tls.lo] = 1;
}

// Called by the worker before each block: its shared memory reads as unwritten.
EMU_IC_NOSAN inline void block_start() {
  if (!tls.shadow) {
    Dl_info di;
    dladdr((void*)&block_start, &di);
    TlsFind t{(uintptr_t)di.dli_fbase, 0, 0};
    (void)tls_fiber.load(std::memory_order_relaxed);  // the TLS block exists now
    dl_iterate_phdr(find_tls, &t);
    if (!t.lo) {
      fprintf(stderr, "cuda_emu: initcheck: cannot find the library's TLS block\n");
      abort();
    }
    tls.lo = t.lo;
    tls.hi = t.hi;
    tls.shadow = static_cast<unsigned char*>(calloc(t.hi - t.lo, 1));
    tls.keep = static_cast<unsigned char*>(calloc(t.hi - t.lo, 1));
    keep_range(&tls, sizeof tls);
    keep_range(&tls_fiber, sizeof tls_fiber);
    keep_range(&tls_block_idx, sizeof tls_block_idx);
    keep_range(&tls_block_dim, sizeof tls_block_dim);
    keep_range(&tls_grid_dim, sizeof tls_grid_dim);
  }
  memcpy(tls.shadow, tls.keep, tls.hi - tls.lo);
}

EMU_IC_NOSAN inline const Region* find_region(uintptr_t a) {
  size_t lo = 0, hi = n_regions;
  while (lo < hi) {
    const size_t mid = (lo + hi) / 2;
    if (regions[mid].hi <= a) lo = mid + 1;
    else hi = mid;
  }
  return lo < n_regions && regions[lo].lo <= a ? &regions[lo] : nullptr;
}

EMU_IC_NOSAN inline const Owned* find_owned(uintptr_t a) {
  size_t lo = 0, hi = n_owned;
  while (lo < hi) {
    const size_t mid = (lo + hi) / 2;
    if (owned[mid].hi <= a) lo = mid + 1;
    else hi = mid;
  }
  return lo < n_owned && owned[lo].lo <= a ? &owned[lo] : nullptr;
}

// "[pc <module offset>]": emu_device.py turns it into file:line with addr2line.
EMU_IC_NOSAN inline std::string pc_text(const void* pc) {
  Dl_info di;
  if (pc && dladdr(pc, &di) && di.dli_fbase)
    return format("[pc +0x%zx]", (size_t)((uintptr_t)pc - (uintptr_t)di.dli_fbase - 1));
  return "[pc ?]";
}

EMU_IC_NOSAN inline unsigned my_owner(const Fiber* f) {
  const unsigned blk = tls_block_idx.x + tls_block_idx.y * tls_grid_dim.x;
  if (!own_warps) return blk;
  return blk * own_warps + (f->idx.x >> 5);
}

EMU_IC_NOSAN inline void access(const void* p, size_t n, bool read, bool write, const void* pc) {
  if (!__atomic_load_n(&active, __ATOMIC_RELAXED)) return;
  Fiber* f = tls.fiber;
  if (!f) return;
  const uintptr_t a = (uintptr_t)p;
  if (a >= tls.lo && a < tls.hi) {  // shared memory
    unsigned char* s = tls.shadow + (a - tls.lo);
    const size_t m = n < tls.hi - a ? n : tls.hi - a;
    if (read)
      for (size_t k = 0; k < m; ++k)
        if (!s[k]) {
          fault_here(format("uninitialised shared memory: %s of %zu bytes at %p reads byte %zu, which no thread of "
                            "this block wrote %s", write ? "read-modify-write" : "load", n, p, k, pc_text(pc).c_str()),
                     true);
        }
    if (write) memset(s, 1, m);
    return;
  }
  if (write && n_fences) {
    const Owned* o = n_owned ? find_owned(a) : nullptr;
    const unsigned me = my_owner(f);
    if (o && o->owner != me)
      fault_here(format("ownership: store of %zu bytes at %p into output rows of chunk %u, which %s %u does not own %s",
                        n, p, o->owner, own_warps ? "warp" : "block", me, pc_text(pc).c_str()),
                 true);
    if (!o)
      for (size_t i = 0; i < n_fences; ++i)
        if (a >= fences[i].lo && a < fences[i].hi)
          fault_here(format("ownership: store of %zu bytes at %p (offset %zu of an output allocation) into rows that "
                            "no chunk of this launch owns (%s %u) %s", n, p, (size_t)(a - fences[i].lo),
                            own_warps ? "warp" : "block", me, pc_text(pc).c_str()),
                     true);
  }
  if (!n_regions || a < regions[0].lo || a >= regions[n_regions - 1].hi) return;
  const Region* r = find_region(a);
  if (!r) return;
  unsigned char* s = r->shadow + (a - r->lo);
  const size_t m = n < r->hi - a ? n : r->hi - a;
  if (read)
    for (size_t k = 0; k < m; ++k)
      if (!__atomic_load_n(s + k, __ATOMIC_RELAXED))
        fault_here(format("uninitialised global memory: %s of %zu bytes at %p reads byte %zu of an `empty` buffer "
                          "[%#zx, +%zu) that neither the host nor a kernel wrote (offset %zu) %s",
                          write ? "read-modify-write" : "load", n, p, k, (size_t)r->lo, (size_t)(r->hi - r->lo),
                          (size_t)(a - r->lo + k), pc_text(pc).c_str()),
                   true);
  if (write)
    for (size_t k = 0; k < m; ++k) __atomic_store_n(s + k, (unsigned char)1, __ATOMIC_RELAXED);
}

}  // namespace emu::ic

// ---- the instrumentation's entry points -------------------------------------------
#define EMU_IC_FN extern "C" __attribute__((visibility("hidden"), used, no_sanitize("thread", "undefined", "address")))
#define EMU_IC_PC __builtin_return_address(0)
EMU_IC_FN void __tsan_init() {}
EMU_IC_FN void __tsan_func_entry(void*) {}
EMU_IC_FN void __tsan_func_exit() {}
EMU_IC_FN void __tsan_vptr_update(void**, void*) {}
EMU_IC_FN void __tsan_vptr_read(void**) {}
EMU_IC_FN void __tsan_read_range(void* p, unsigned long n) { emu::ic::access(p, n, true, false, EMU_IC_PC); }
EMU_IC_FN void __tsan_write_range(void* p, unsigned long n) { emu::ic::access(p, n, false, true, EMU_IC_PC); }
#define EMU_IC_RW(N)                                                                                            \
  EMU_IC_FN void __tsan_read##N(void* p) { emu::ic::access(p, N, true, false, EMU_IC_PC); }                    \
  EMU_IC_FN void __tsan_write##N(void* p) { emu::ic::access(p, N, false, true, EMU_IC_PC); }                   \
  EMU_IC_FN void __tsan_unaligned_read##N(void* p) { emu::ic::access(p, N, true, false, EMU_IC_PC); }          \
  EMU_IC_FN void __tsan_unaligned_write##N(void* p) { emu::ic::access(p, N, false, true, EMU_IC_PC); }         \
  EMU_IC_FN void __tsan_volatile_read##N(void* p) { emu::ic::access(p, N, true, false, EMU_IC_PC); }           \
  EMU_IC_FN void __tsan_volatile_write##N(void* p) { emu::ic::access(p, N, false, true, EMU_IC_PC); }
EMU_IC_RW(1)
EMU_IC_RW(2)
EMU_IC_RW(4)
EMU_IC_RW(8)
EMU_IC_RW(16)
#undef EMU_IC_RW
// Atomics: checked as a load (and a store), then done (sequentially consistent: the orders are never weaker).
#define EMU_IC_ATOMIC(N, T)                                                                                       \
  EMU_IC_FN T __tsan_atomic##N##_load(const volatile T* p, int) {                                                  \
    emu::ic::access((const void*)p, sizeof(T), true, false, EMU_IC_PC);                                            \
    return __atomic_load_n(p, __ATOMIC_SEQ_CST);                                                                   \
  }                                                                                                                \
  EMU_IC_FN void __tsan_atomic##N##_store(volatile T* p, T v, int) {                                               \
    emu::ic::access((const void*)p, sizeof(T), false, true, EMU_IC_PC);                                            \
    __atomic_store_n(p, v, __ATOMIC_SEQ_CST);                                                                      \
  }                                                                                                                \
  EMU_IC_FN T __tsan_atomic##N##_exchange(volatile T* p, T v, int) {                                               \
    emu::ic::access((const void*)p, sizeof(T), false, true, EMU_IC_PC);                                            \
    return __atomic_exchange_n(p, v, __ATOMIC_SEQ_CST);                                                            \
  }                                                                                                                \
  EMU_IC_FN T __tsan_atomic##N##_fetch_add(volatile T* p, T v, int) {                                              \
    emu::ic::access((const void*)p, sizeof(T), true, true, EMU_IC_PC);                                             \
    return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST);                                                             \
  }                                                                                                                \
  EMU_IC_FN T __tsan_atomic##N##_fetch_sub(volatile T* p, T v, int) {                                              \
    emu::ic::access((const void*)p, sizeof(T), true, true, EMU_IC_PC);                                             \
    return __atomic_fetch_sub(p, v, __ATOMIC_SEQ_CST);                                                             \
  }                                                                                                                \
  EMU_IC_FN T __tsan_atomic##N##_fetch_and(volatile T* p, T v, int) {                                              \
    emu::ic::access((const void*)p, sizeof(T), true, true, EMU_IC_PC);                                             \
    return __atomic_fetch_and(p, v, __ATOMIC_SEQ_CST);                                                             \
  }                                                                                                                \
  EMU_IC_FN T __tsan_atomic##N##_fetch_or(volatile T* p, T v, int) {                                               \
    emu::ic::access((const void*)p, sizeof(T), true, true, EMU_IC_PC);                                             \
    return __atomic_fetch_or(p, v, __ATOMIC_SEQ_CST);                                                              \
  }                                                                                                                \
  EMU_IC_FN T __tsan_atomic##N##_fetch_xor(volatile T* p, T v, int) {                                              \
    emu::ic::access((const void*)p, sizeof(T), true, true, EMU_IC_PC);                                             \
    return __atomic_fetch_xor(p, v, __ATOMIC_SEQ_CST);                                                             \
  }                                                                                                                \
  EMU_IC_FN T __tsan_atomic##N##_fetch_nand(volatile T* p, T v, int) {                                             \
    emu::ic::access((const void*)p, sizeof(T), true, true, EMU_IC_PC);                                             \
    return __atomic_fetch_nand(p, v, __ATOMIC_SEQ_CST);                                                            \
  }                                                                                                                \
  EMU_IC_FN int __tsan_atomic##N##_compare_exchange_strong(volatile T* p, T* c, T v, int, int) {                   \
    emu::ic::access((const void*)p, sizeof(T), true, true, EMU_IC_PC);                                             \
    return __atomic_compare_exchange_n(p, c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);                        \
  }                                                                                                                \
  EMU_IC_FN int __tsan_atomic##N##_compare_exchange_weak(volatile T* p, T* c, T v, int, int) {                     \
    emu::ic::access((const void*)p, sizeof(T), true, true, EMU_IC_PC);                                             \
    return __atomic_compare_exchange_n(p, c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);                        \
  }                                                                                                                \
  EMU_IC_FN T __tsan_atomic##N##_compare_exchange_val(volatile T* p, T c, T v, int, int) {                         \
    emu::ic::access((const void*)p, sizeof(T), true, true, EMU_IC_PC);                                             \
    __atomic_compare_exchange_n(p, &c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);                              \
    return c;                                                                                                      \
  }
EMU_IC_ATOMIC(8, unsigned char)
EMU_IC_ATOMIC(16, unsigned short)
EMU_IC_ATOMIC(32, unsigned int)
EMU_IC_ATOMIC(64, unsigned long long)
#undef EMU_IC_ATOMIC
EMU_IC_FN void __tsan_atomic_thread_fence(int) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
EMU_IC_FN void __tsan_atomic_signal_fence(int) { __atomic_signal_fence(__ATOMIC_SEQ_CST); }
#undef EMU_IC_FN
#undef EMU_IC_PC
