// cuda_emu.h -- just enough of CUDA to run gtsamples' kernels on the host, and
// to check them as a GPU and compute-sanitizer would, on machines without one.
//
// Execution.  A launch runs its blocks on worker threads, one block at a time
// per worker.  Every CUDA thread of a block is a fiber (its own stack, switched
// by a few lines of assembly) on that worker.  A scheduler runs each runnable
// fiber until it blocks (__syncthreads, a warp intrinsic), exits or faults;
// when none can run it completes the warp intrinsics whose lanes have all
// arrived, else releases the barrier if every live thread waits at it, else
// reports what is stuck.  So at every synchronization point the emulator knows
// which threads arrived, which exited and which wait elsewhere.
//
// Shared memory.  `__shared__` is `static thread_local`: one instance per
// worker thread, i.e. per block in flight, so blocks run concurrently with
// per-block shared memory and no kernel needs rewriting.  (Loading one copy
// of the library per block in flight would give per-block statics too, but
// each block still needs a thread of its own: thread_local gives both at
// once.)  Worker w of W runs blocks w,
// w + W, ...; workers synchronize only with the launching thread, so for TSan
// blocks on different workers -- neighbours always -- are unordered but for
// the kernel's own atomics.  The TSan build uses 2 workers (every fiber is a
// TSan context: milliseconds and most of a megabyte each, so they are kept).
// The AddressSanitizer build makes `__shared__` plain `static` and runs
// blocks one after another on one worker: ASan puts redzones around statics
// but neither around thread_local nor vague-linkage ones, hence
// emu_kernels.cpp compiles the kernels inside an unnamed namespace.
//
// Faults, as a GPU raises them: the launch stops and emu_launch returns 2 with
// the message (emu_last_fault); tests/kernels/emu_device.py raises EmuFault.
//  * misaligned, null or out-of-object typed accesses, and every other UBSan
//    finding: the library is compiled with -fsanitize=undefined and this file
//    defines the __ubsan_handle_* callbacks itself (no libubsan);
//  * misaligned atomics (checked here);
//  * __syncthreads() that some threads of the block reach while others exited
//    (CUDA: undefined; the emulator used to count exited threads as arrived);
//  * a barrier that live threads reach at different calls: __syncthreads()
//    (or a warp intrinsic) is identified by its call site and call path (the
//    return addresses on the fiber's stack; the library is built at -O0, so
//    no call is inlined or duplicated), and all waiters must agree, whatever
//    the counts (CUDA: undefined; compute-sanitizer's synccheck);
//  * a warp intrinsic whose mask lacks the calling lane, names a lane that
//    exited, does not exist or waits elsewhere (__syncthreads, another
//    intrinsic or mask), or that reads a lane outside its mask.  CUDA only
//    calls reading an exited lane undefined; the emulator rejects any mask
//    naming one, as the kernels never need it;
//  * a block in which no thread can proceed (deadlock);
//  * in the ASan build, any ASan report raised while a kernel runs.
//  * in the initcheck build (emu_initcheck.h), loads of shared memory no
//    thread of the block wrote, of `empty` global memory nobody wrote, and
//    stores into another chunk's output rows.
//
// Memory model.  Atomics are relaxed, as CUDA's atomicOr & co.; warp
// intrinsics exchange values but order no memory; __syncthreads and
// __syncwarp order their threads.  The ThreadSanitizer build tells TSan just
// that (fibers switch without synchronizing, barriers release and acquire),
// so a missing barrier, or a plain access racing an atomic, is reported
// whatever the schedule.
#pragma once
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>
#include <sys/mman.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define EMU_ASAN 1
#else
#define EMU_ASAN 0
#endif
#ifndef EMU_INITCHECK
#define EMU_INITCHECK 0
#endif
#if defined(__SANITIZE_THREAD__) && !EMU_INITCHECK
#include <sanitizer/tsan_interface.h>
#define EMU_TSAN 1
#else
#define EMU_TSAN 0
#endif

#define __device__
#define __global__
#define __forceinline__ inline
#define __restrict__ __restrict
#define __launch_bounds__(...)
#if EMU_ASAN
#define __shared__ static
#else
#define __shared__ static thread_local
#endif

// CUDA's 16-byte vector type (only test kernels use it).
struct alignas(16) uint4 { unsigned x, y, z, w; };
constexpr int warpSize = 32;

namespace emu {

struct Dim3 { unsigned x = 1, y = 1, z = 1; };

// Emulator state that a block's fibers and its scheduler both touch: relaxed
// atomics, so that TSan neither reports it nor derives ordering from it.
template <typename T>
struct Rel {
  std::atomic<T> v{};
  T get() const { return v.load(std::memory_order_relaxed); }
  void set(T x) { v.store(x, std::memory_order_relaxed); }
};

enum State : int { kFresh, kRunnable, kAtBarrier, kAtWarp, kExited, kFaulted, kCancelled };
enum WarpOp : int { kShfl, kShflUp, kShflDown, kShflXor, kBallot, kAny, kAll, kSyncWarp };
inline const char* const kOpName[] = {"__shfl_sync",   "__shfl_up_sync", "__shfl_down_sync", "__shfl_xor_sync",
                                      "__ballot_sync", "__any_sync",     "__all_sync",       "__syncwarp"};

struct Context {
  void* sp = nullptr;
  const void* stack_lo = nullptr;  // for ASan's fiber switch annotations
  size_t stack_size = 0;
  void* tsan = nullptr;
};

struct Launch;
struct Block;

struct Fiber {
  Context ctx;
  Dim3 idx;  // threadIdx, fixed before the fiber starts
  Block* block = nullptr;
  Rel<int> state;
  Rel<int> op;  // the warp intrinsic it waits at
  Rel<unsigned> mask, arg, width;
  Rel<unsigned long long> value, result;
  Rel<const char*> file;  // where it waits
  Rel<unsigned> line;
  Rel<unsigned long long> path;  // ... and by which call path (call_path())
};

struct Block {
  Launch* launch = nullptr;
  Dim3 idx;
  unsigned n = 0;
  Fiber* fibers = nullptr;
  Context sched;
  Rel<int> faulted;
  Rel<int> cancel;  // the launch stopped: a resumed fiber leaves at once
  char start_sync = 0, end_sync = 0;  // TSan sync objects: worker -> block's fibers -> worker
  char bar_sync = 0;  // TSan sync object of __syncthreads
  char warp_sync[32] = {};  // ... and of __syncwarp, per warp
};

struct Launch {
  const char* kernel = "";
  const std::function<void()>* body = nullptr;
  Dim3 grid, block;
  std::atomic<bool> stop{false};
  std::mutex mu;
  std::string fault;
  unsigned faults = 0;
};

inline thread_local std::atomic<Fiber*> tls_fiber{nullptr};
inline thread_local Dim3 tls_block_idx, tls_block_dim, tls_grid_dim;
inline std::atomic<unsigned long long> sanitizer_reports{0};  // ASan / UBSan reports outside a kernel, too
inline std::atomic<unsigned> worker_limit{0};                 // 0: the hardware's concurrency

inline Fiber* current_fiber() { return tls_fiber.load(std::memory_order_relaxed); }

inline void tsan_release(void* a) {
#if EMU_TSAN
  __tsan_release(a);
#else
  (void)a;
#endif
}
inline void tsan_acquire(void* a) {
#if EMU_TSAN
  __tsan_acquire(a);
#else
  (void)a;
#endif
}

inline std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
inline std::string format(const char* fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  return buf;
}

inline const char* base_name(const char* path) {
  if (!path) return "?";
  const char* s = strrchr(path, '/');
  return s ? s + 1 : path;
}

}  // namespace emu

// ---- context switch (x86-64 System V; elsewhere, or with EMU_UCONTEXT, ucontext) --
#if defined(__x86_64__) && !defined(EMU_UCONTEXT)
#define EMU_ASM_SWITCH 1
#else
#define EMU_ASM_SWITCH 0
#endif
#if EMU_ASM_SWITCH
extern "C" void emu_switch_context(void** save_sp, void* load_sp);
extern "C" void emu_fiber_trampoline();
// Saves the callee-saved registers, MXCSR and the x87 control word on the old
// stack, stores its pointer, loads the new one and restores the same.  A new
// fiber's frame "returns" into emu_fiber_trampoline, which calls r13(r12).
asm(R"(
  .text
  .p2align 4
  .globl emu_switch_context
  .hidden emu_switch_context
  .type emu_switch_context, @function
emu_switch_context:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size emu_switch_context, .-emu_switch_context
  .globl emu_fiber_trampoline
  .hidden emu_fiber_trampoline
  .type emu_fiber_trampoline, @function
emu_fiber_trampoline:
  movq %r12, %rdi
  callq *%r13
  ud2
  .size emu_fiber_trampoline, .-emu_fiber_trampoline
)");
#else
#include <ucontext.h>
#endif

namespace emu {

[[noreturn]] __attribute__((no_sanitize("thread"))) void fiber_main(Fiber* f);

#if !EMU_ASM_SWITCH
struct UContextFrame { ucontext_t uc; };
inline void ucontext_entry(unsigned lo, unsigned hi) {
  fiber_main(reinterpret_cast<Fiber*>(((uintptr_t)hi << 32) | lo));
}
#endif

// Prepares `f` to start at fiber_main on its stack [lo, lo + size).
inline void make_context(Fiber* f, char* lo, size_t size) {
  f->ctx.stack_lo = lo;
  f->ctx.stack_size = size;
#if EMU_ASM_SWITCH
  uintptr_t top = ((uintptr_t)(lo + size) & ~(uintptr_t)15) - 16;
  uint64_t* sp = reinterpret_cast<uint64_t*>(top - 64);  // 16-aligned: the trampoline calls with rsp % 16 == 0
  sp[0] = 0x037F00001F80ull;                              // x87 control word 0x37F, MXCSR 0x1F80
  sp[1] = 0;                                              // r15
  sp[2] = 0;                                              // r14
  sp[3] = (uint64_t)(uintptr_t)&fiber_main;               // r13
  sp[4] = (uint64_t)(uintptr_t)f;                         // r12
  sp[5] = 0;                                              // rbx
  sp[6] = 0;                                              // rbp
  sp[7] = (uint64_t)(uintptr_t)&emu_fiber_trampoline;     // return address
  f->ctx.sp = sp;
#else
  auto* u = new UContextFrame;
  getcontext(&u->uc);
  u->uc.uc_stack.ss_sp = lo;
  u->uc.uc_stack.ss_size = size;
  u->uc.uc_link = nullptr;
  uintptr_t p = (uintptr_t)f;
  makecontext(&u->uc, (void (*)())ucontext_entry, 2, (unsigned)(p & 0xffffffffu), (unsigned)(p >> 32));
  f->ctx.sp = u;
#endif
}

// Switches from the running context `from` to `to`; returns when something
// switches back.  `leaving`: `from` never runs again.  For TSan no switch
// synchronizes (else the scheduler would hand one fiber's history to the
// next); a fiber's start acquires what its worker did before the block
// (Block::start_sync) and its end releases all it did to the worker
// (Block::end_sync), whether it exits, faults or is cancelled.
// Not TSan-instrumented: a leaving fiber's call never returns, and its entry
// on the (reused) TSan context's shadow stack would never be popped.
__attribute__((no_sanitize("thread"))) inline void switch_to(Context& from, Context& to, bool leaving = false) {
#if !EMU_ASM_SWITCH
  if (!from.sp) from.sp = new UContextFrame;
#endif
  void** const save = &from.sp;
  void* const load = to.sp;  // read before TSan's switch: after it, accesses count as `to`'s
#if EMU_ASAN
  void* fake = nullptr;
  __sanitizer_start_switch_fiber(leaving ? nullptr : &fake, to.stack_lo, to.stack_size);
#endif
#if EMU_TSAN
  __tsan_switch_to_fiber(to.tsan, __tsan_switch_to_fiber_no_sync);
#endif
#if EMU_ASM_SWITCH
  emu_switch_context(save, load);
#else
  swapcontext(&static_cast<UContextFrame*>(*save)->uc, &static_cast<UContextFrame*>(load)->uc);
#endif
#if EMU_ASAN
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
  (void)leaving;
}

// ---- faults ---------------------------------------------------------------------

// Records the launch's fault (the first one's message is kept) and stops it.
inline void record_fault(Block* b, const Fiber* f, const std::string& what) {
  Launch* L = b->launch;
  std::string msg = format("%s, block (%u, %u), thread %u: ", L->kernel, b->idx.x, b->idx.y, f ? f->idx.x : 0u) + what;
  {
    std::lock_guard<std::mutex> lk(L->mu);
    if (L->faults++ == 0) L->fault = msg;
  }
  b->faulted.set(1);
  L->stop.store(true, std::memory_order_relaxed);
}

// A fault raised by the running CUDA thread: it stops there for good.  Outside
// a kernel (scheduler or host code) the report is printed and counted.
inline void fault_here(const std::string& what, bool fatal_outside) {
  Fiber* f = current_fiber();
  if (!f) {
    sanitizer_reports.fetch_add(1);
    fprintf(stderr, "cuda_emu: runtime error outside a kernel: %s\n", what.c_str());
    if (fatal_outside) abort();
    return;
  }
  Block* b = f->block;  // read before the release: the worker rewrites it for its next block
  record_fault(b, f, what);
  f->state.set(kFaulted);
  tsan_release(&b->end_sync);
  switch_to(f->ctx, b->sched, true);
  __builtin_unreachable();
}

template <typename T>
inline void check_atomic(T* p, const char* fn, const char* file, unsigned line) {
  if (p == nullptr || (uintptr_t)p % sizeof(T) != 0)
    fault_here(format("%s: %s of %zu bytes at %p [%s:%u]", p ? "misaligned address" : "null pointer", fn, sizeof(T),
                      (void*)p, base_name(file), line),
               true);
}

}  // namespace emu
#if EMU_INITCHECK
#include "emu_initcheck.h"
#endif
namespace emu {

// The CUDA thread the calling worker runs now (nullptr: the scheduler).
inline void set_fiber(Fiber* f) {
  tls_fiber.store(f, std::memory_order_relaxed);
#if EMU_INITCHECK
  ic::tls.fiber = f;
#endif
}

// ---- blocking points (called on a fiber) -----------------------------------------

// The call path of the calling fiber: a hash of the return addresses on its
// stack (the library keeps frame pointers), so one __syncthreads() in a helper
// reached from two call sites is two barriers, as it is on a GPU; the same
// site in another loop iteration is the same barrier.
__attribute__((noinline, no_sanitize("address", "thread", "undefined"))) inline unsigned long long call_path(
    const Fiber* f) {
  unsigned long long h = 1469598103934665603ull;
  const uintptr_t lo = (uintptr_t)f->ctx.stack_lo, hi = lo + f->ctx.stack_size;
  void* const* fp = static_cast<void* const*>(__builtin_frame_address(0));
  for (int d = 0; d < 64 && (uintptr_t)fp >= lo && (uintptr_t)fp + 16 <= hi; ++d) {
    h = (h ^ (unsigned long long)(uintptr_t)fp[1]) * 1099511628211ull;
    void* const* up = static_cast<void* const*>(fp[0]);
    if (up <= fp) break;  // frames only go up the stack
    fp = up;
  }
  return h;
}

inline void wait_here(Fiber* f, int state, const char* file, unsigned line) {
  f->file.set(file);
  f->line.set(line);
  f->path.set(call_path(f));
  f->state.set(state);
  Block* b = f->block;
  switch_to(f->ctx, b->sched);
  if (b->cancel.get()) {  // the launch faulted: leave, handing TSan this fiber's history
    f->state.set(kCancelled);
    tsan_release(&b->end_sync);
    switch_to(f->ctx, b->sched, true);
    __builtin_unreachable();
  }
}

inline unsigned long long warp_op(int op, unsigned mask, unsigned arg, unsigned width, unsigned long long v,
                                  const char* file, unsigned line) {
  Fiber* f = current_fiber();
  f->op.set(op);
  f->mask.set(mask);
  f->arg.set(arg);
  f->width.set(width);
  f->value.set(v);
  wait_here(f, kAtWarp, file, line);
  return f->result.get();
}

template <typename T>
inline unsigned long long to_bits(T v) {
  static_assert(sizeof(T) <= 8, "warp intrinsics exchange at most 8 bytes");
  unsigned long long b = 0;
  memcpy(&b, &v, sizeof(T));
  return b;
}
template <typename T>
inline T from_bits(unsigned long long b) {
  T v;
  memcpy(&v, &b, sizeof(T));
  return v;
}

// ---- the scheduler ---------------------------------------------------------------

inline std::string lanes(unsigned bits) {
  std::string s;
  for (unsigned k = 0; k < 32; ++k)
    if (bits >> k & 1u) {
      unsigned e = k;
      while (e + 1 < 32 && (bits >> (e + 1) & 1u)) ++e;
      if (!s.empty()) s += ",";
      s += e == k ? format("%u", k) : format("%u-%u", k, e);
      k = e;
    }
  return s.empty() ? "none" : s;
}

inline std::string site(const Fiber& f) { return format("%s:%u", base_name(f.file.get()), f.line.get()); }

inline std::string op_desc(const Fiber& f) {
  return format("%s(mask 0x%08x) at %s", kOpName[f.op.get()], f.mask.get(), site(f).c_str());
}

// The source lane a shuffle of lane `l` reads (CUDA's rules for `width`).
inline unsigned shfl_source(int op, unsigned l, unsigned arg, unsigned w) {
  const unsigned seg = l & ~(w - 1), in = l & (w - 1);
  switch (op) {
    case kShfl: return seg | (arg & (w - 1));
    case kShflUp: return in >= arg ? l - arg : l;
    case kShflDown: return in + arg < w ? l + arg : l;
    default: {  // xor: a later segment yields the lane's own value
      const unsigned s = l ^ (arg & 31u);
      return (s & ~(w - 1)) > seg ? l : s;
    }
  }
}

// What lane `f` is doing, for messages.
inline std::string doing(const Fiber& f) {
  switch (f.state.get()) {
    case kAtBarrier: return "waits at __syncthreads() at " + site(f);
    case kAtWarp: return "waits at " + op_desc(f);
    case kExited: return "exited";
    default: return "is running";
  }
}

// Completes the warp intrinsic lane `l` waits at if every lane its mask names
// waits at the same intrinsic with the same mask.  Returns 1 (completed), 0
// (not yet; *why says for whom it waits) or -1 (fault recorded).  A named lane
// at another intrinsic or at __syncthreads may still come (independent thread
// scheduling); an exited one never will.
inline int try_warp(Block& b, unsigned w, unsigned l, std::string* why) {
  Fiber* F = b.fibers + 32u * w;
  const unsigned nl = b.n - 32u * w < 32u ? b.n - 32u * w : 32u;
  Fiber& me = F[l];
  const unsigned M = me.mask.get();
  const int op = me.op.get();
  if (!(M >> l & 1u)) {
    record_fault(&b, &me, format("%s: the mask does not name the calling lane %u", op_desc(me).c_str(), l));
    return -1;
  }
  if (nl < 32u && (M >> nl) != 0u) {
    record_fault(&b, &me, format("%s: the mask names lanes %s, which do not exist (a block of %u threads)",
                                 op_desc(me).c_str(), lanes(M & ~((1u << nl) - 1u)).c_str(), b.n));
    return -1;
  }
  unsigned gone = 0, missing = 0;
  for (unsigned k = 0; k < nl; ++k) {
    if (!(M >> k & 1u)) continue;
    const int st = F[k].state.get();
    if (st == kExited) gone |= 1u << k;
    else if (st != kAtWarp || F[k].mask.get() != M || F[k].op.get() != op) missing |= 1u << k;
  }
  if (gone) {
    record_fault(&b, &me,
                 format("%s: the mask names lanes %s, which exited", op_desc(me).c_str(), lanes(gone).c_str()));
    return -1;
  }
  if (missing) {
    const Fiber& other = F[__builtin_ctz(missing)];
    *why = format("lane %u's %s waits for lanes %s; lane %u %s", l, op_desc(me).c_str(), lanes(missing).c_str(),
                  (unsigned)__builtin_ctz(missing), doing(other).c_str());
    return 0;
  }
  // Barrier identity: every lane of the mask must wait at the same call (site
  // and call path), not merely at the same intrinsic with the same mask.
  unsigned other = 0;
  for (unsigned k = 0; k < nl; ++k)
    if ((M >> k & 1u) && F[k].path.get() != me.path.get()) other |= 1u << k;
  if (other) {
    const Fiber& o = F[__builtin_ctz(other)];
    record_fault(&b, &me, format("divergent %s: lanes %s wait at %s, lanes %s at %s (another call site or call path)",
                                 kOpName[op], lanes(M & ~other).c_str(), site(me).c_str(), lanes(other).c_str(),
                                 site(o).c_str()));
    return -1;
  }
  unsigned pred = 0;
  for (unsigned k = 0; k < nl; ++k)
    if (M >> k & 1u) pred |= (F[k].value.get() != 0 ? 1u : 0u) << k;
  for (unsigned k = 0; k < nl; ++k) {
    if (!(M >> k & 1u)) continue;
    Fiber& f = F[k];
    unsigned long long r = 0;
    switch (op) {
      case kBallot: r = pred; break;
      case kAny: r = pred != 0; break;
      case kAll: r = pred == M; break;
      case kSyncWarp: break;
      default: {
        const unsigned width = f.width.get();
        if (width == 0 || width > 32 || (width & (width - 1))) {
          record_fault(&b, &f, format("%s: width %u is not a power of two in [1, 32]", op_desc(f).c_str(), width));
          return -1;
        }
        const unsigned src = shfl_source(op, k, f.arg.get(), width);
        if (!(M >> src & 1u)) {
          record_fault(&b, &f,
                       format("%s: lane %u reads lane %u, which is not in the mask", op_desc(f).c_str(), k, src));
          return -1;
        }
        r = F[src].value.get();
      }
    }
    f.result.set(r);
  }
  for (unsigned k = 0; k < nl; ++k)
    if (M >> k & 1u) F[k].state.set(kRunnable);
  return 1;
}

// Called when no fiber of the block can run.  Returns 1 (progress), 0 (every
// thread exited) or -1 (fault recorded).
inline int resolve(Block& b) {
  unsigned exited = 0, at_bar = 0, at_warp = 0;
  for (unsigned t = 0; t < b.n; ++t) {
    const int st = b.fibers[t].state.get();
    exited += st == kExited;
    at_bar += st == kAtBarrier;
    at_warp += st == kAtWarp;
  }
  if (exited == b.n) return 0;
  bool progress = false;
  std::string stuck;
  for (unsigned w = 0; at_warp && w * 32u < b.n; ++w)
    for (unsigned l = 0; l < 32u && 32u * w + l < b.n; ++l) {
      if (b.fibers[32u * w + l].state.get() != kAtWarp) continue;
      std::string why;
      const int r = try_warp(b, w, l, &why);
      if (r < 0) return -1;
      if (r > 0) progress = true;
      else if (stuck.empty()) stuck = why;
    }
  if (progress) return 1;
  if (at_bar && at_bar + exited == b.n) {
    const Fiber* first_at = nullptr;
    for (unsigned t = 0; t < b.n && !first_at; ++t)
      if (b.fibers[t].state.get() == kAtBarrier) first_at = b.fibers + t;
    if (exited) {
      std::string gone;
      unsigned shown = 0;
      for (unsigned t = 0; t < b.n; ++t) {
        if (b.fibers[t].state.get() != kExited) continue;
        unsigned e = t;
        while (e + 1 < b.n && b.fibers[e + 1].state.get() == kExited) ++e;
        if (shown++ < 8) gone += (gone.empty() ? "" : ",") + (e == t ? format("%u", t) : format("%u-%u", t, e));
        t = e;
      }
      record_fault(&b, first_at, format("__syncthreads() at %s reached by %u of %u threads; threads %s exited "
                                        "without reaching it", site(*first_at).c_str(), at_bar, b.n, gone.c_str()));
      return -1;
    }
    // Barrier identity: every thread waits at the same __syncthreads() call
    // (site and call path).  Releasing a barrier when threads wait at
    // different ones (an if/else with a barrier in each arm) is what CUDA
    // leaves undefined and compute-sanitizer's synccheck reports.
    for (unsigned t = 0; t < b.n; ++t) {
      const Fiber& o = b.fibers[t];
      if (o.path.get() == first_at->path.get()) continue;
      unsigned same = 0;
      for (unsigned k = 0; k < b.n; ++k) same += b.fibers[k].path.get() == first_at->path.get();
      record_fault(&b, &o, format("divergent __syncthreads(): thread %u (and %u more) waits at %s, thread %u at %s "
                                  "(another call site or call path)", first_at->idx.x, same - 1u,
                                  site(*first_at).c_str(), o.idx.x, site(o).c_str()));
      return -1;
    }
    for (unsigned t = 0; t < b.n; ++t) b.fibers[t].state.set(kRunnable);
    return 1;
  }
  const Fiber* some = nullptr;
  for (unsigned t = 0; t < b.n && !some; ++t)
    if (b.fibers[t].state.get() == kAtWarp) some = b.fibers + t;
  record_fault(&b, some, "deadlock: " + (stuck.empty() ? std::string("no thread can proceed") : stuck));
  return -1;
}

// Ends a stopped block: every fiber suspended at a blocking point is resumed
// only to leave (see wait_here).
inline void cancel_block(Block& b) {
  b.cancel.set(1);
  for (unsigned t = 0; t < b.n; ++t) {
    Fiber& f = b.fibers[t];
    const int st = f.state.get();
    if (st != kRunnable && st != kAtBarrier && st != kAtWarp) continue;
    set_fiber(&f);
    switch_to(b.sched, f.ctx);
    set_fiber(nullptr);
  }
  b.cancel.set(0);
}

inline void run_block(Block& b) {
  for (;;) {
    for (unsigned t = 0; t < b.n; ++t) {
      Fiber& f = b.fibers[t];
      const int st = f.state.get();
      if (st != kRunnable && st != kFresh) continue;
      if (st == kFresh) f.state.set(kRunnable);
      set_fiber(&f);
      switch_to(b.sched, f.ctx);
      set_fiber(nullptr);
      if (b.faulted.get()) return cancel_block(b);
    }
    if (b.launch->stop.load(std::memory_order_relaxed)) return cancel_block(b);  // another block faulted
    const int r = resolve(b);
    if (r < 0) return cancel_block(b);
    if (r == 0) return;
  }
}

// Not TSan-instrumented, like switch_to: it never returns.
[[noreturn]] __attribute__((no_sanitize("thread"))) inline void fiber_main(Fiber* f) {
#if EMU_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &f->block->sched.stack_lo, &f->block->sched.stack_size);
#endif
  tsan_acquire(&f->block->start_sync);
  (*f->block->launch->body)();
  f->state.set(kExited);
  tsan_release(&f->block->end_sync);
  switch_to(f->ctx, f->block->sched, true);
  __builtin_unreachable();
}

// The fibers of one worker: a stack each (a guard page below it) and, in the
// TSan build, a TSan context each.  Both are kept for the worker's lifetime:
// TSan takes milliseconds and most of a megabyte per context.
struct FiberPool {
  static constexpr size_t kStack = 128 * 1024, kGuard = 4096;
  unsigned n = 0;
  char* mem = nullptr;
  std::vector<Fiber> fibers;
  bool dirty = false;  // the last block faulted: stacks hold abandoned frames

  void reserve(unsigned threads) {
    if (threads <= n) return;
    release();
    n = threads;
    fibers = std::vector<Fiber>(n);
    mem = static_cast<char*>(mmap(nullptr, bytes(), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                                  -1, 0));
    if (mem == MAP_FAILED) {
      fprintf(stderr, "cuda_emu: cannot map %zu bytes of fiber stacks\n", bytes());
      abort();
    }
    for (unsigned t = 0; t < n; ++t) {
      mprotect(mem + t * (kStack + kGuard), kGuard, PROT_NONE);
#if EMU_TSAN
      fibers[t].ctx.tsan = __tsan_create_fiber(0);
#endif
    }
  }
  void release() {
    if (!mem) return;
#if EMU_TSAN
    for (auto& f : fibers) __tsan_destroy_fiber(f.ctx.tsan);
#endif
#if EMU_ASAN
    __asan_unpoison_memory_region(mem, bytes());
#endif
    munmap(mem, bytes());
    mem = nullptr;
  }
  size_t bytes() const { return (size_t)n * (kStack + kGuard); }
  char* stack(unsigned t) const { return mem + t * (kStack + kGuard) + kGuard; }

  // Readies fibers [0, b.n) to run the block from the start.
  void start(Block& b) {
#if EMU_ASAN
    if (dirty) __asan_unpoison_memory_region(mem, bytes());  // frames the faulted block's fibers left
#endif
    dirty = false;
    for (unsigned t = 0; t < b.n; ++t) {
      Fiber& f = fibers[t];
#if EMU_TSAN
      const int last = f.state.get();
      if (last == kFaulted || last == kCancelled) {  // left mid-kernel: its shadow stack is stale
        __tsan_destroy_fiber(f.ctx.tsan);
        f.ctx.tsan = __tsan_create_fiber(0);
      }
#endif
      f.idx = Dim3{t, 0, 0};
      f.block = &b;
      f.state.set(kFresh);
#if !EMU_ASM_SWITCH
      delete static_cast<UContextFrame*>(f.ctx.sp);
#endif
      make_context(&f, stack(t), kStack);
    }
    b.fibers = fibers.data();
  }
};


// Persistent worker threads (started on first use, parked between launches).
// Worker w runs blocks w, w + W, w + 2W, ... of a launch on W workers:
// neighbouring blocks never share a worker; blocks on different workers are
// unordered (for TSan), those on one worker ordered.  Hence each worker has
// its own two channels, so that workers synchronize only with the launching
// thread and never with each other, whatever the timing: a launch is posted
// on `post` (which the launcher touches only before it has collected any
// worker's results) and collected on `done` (which a worker touches only
// after its blocks ran).
struct Worker {
  std::mutex post_mu, done_mu;
  std::condition_variable post_cv, done_cv;
  Launch* launch = nullptr;  // posted, not yet taken
  unsigned W = 0;
  bool done = true;
};

struct Pool {
  std::vector<Worker*> workers;  // touched by the launching thread only (launches are serialized)
  pid_t pid = getpid();

  static void loop(Worker* w, unsigned id) {
    FiberPool fibers;
    Block b;
#if EMU_TSAN
    b.sched.tsan = __tsan_get_current_fiber();
#endif
    for (;;) {
      Launch* L;
      unsigned W;
      {
        std::unique_lock<std::mutex> lk(w->post_mu);
        w->post_cv.wait(lk, [&] { return w->launch != nullptr; });
        L = w->launch;
        W = w->W;
        w->launch = nullptr;
      }
      run(*L, id, W, fibers, b);
      {
        std::lock_guard<std::mutex> lk(w->done_mu);
        w->done = true;
      }
      w->done_cv.notify_all();
    }
  }

  static void run(Launch& L, unsigned id, unsigned W, FiberPool& fibers, Block& b) {
    const unsigned nblocks = L.grid.x * L.grid.y;
    fibers.reserve(L.block.x);
    b.launch = &L;
    b.n = L.block.x;
    tls_block_dim = L.block;
    tls_grid_dim = L.grid;
    for (unsigned i = id; i < nblocks && !L.stop.load(std::memory_order_relaxed); i += W) {
      b.idx = Dim3{i % L.grid.x, i / L.grid.x, 0};
      tls_block_idx = b.idx;
      b.faulted.set(0);
      fibers.start(b);
#if EMU_INITCHECK
      ic::block_start();
#endif
      tsan_release(&b.start_sync);
      run_block(b);
      tsan_acquire(&b.end_sync);
      fibers.dirty = b.faulted.get() || L.stop.load(std::memory_order_relaxed);
    }
  }

  // Runs L on W workers; returns when every block is done.
  void run(Launch& L, unsigned W) {
    while (workers.size() < W) {
      Worker* w = new Worker;  // never freed: its thread lives as long as the process
      workers.push_back(w);
      std::thread(loop, w, (unsigned)workers.size() - 1).detach();
    }
    for (unsigned i = 0; i < W; ++i) {
      std::lock_guard<std::mutex> lk(workers[i]->done_mu);
      workers[i]->done = false;
    }
    for (unsigned i = 0; i < W; ++i) {
      {
        std::lock_guard<std::mutex> lk(workers[i]->post_mu);
        workers[i]->launch = &L;
        workers[i]->W = W;
      }
      workers[i]->post_cv.notify_all();
    }
    for (unsigned i = 0; i < W; ++i) {
      std::unique_lock<std::mutex> lk(workers[i]->done_mu);
      workers[i]->done_cv.wait(lk, [&] { return workers[i]->done; });
    }
  }
};

inline Pool& pool() {
  static Pool* p = new Pool;  // never destroyed: its threads outlive static destruction
  if (p->pid != getpid()) p = new Pool;  // a forked child has none of the parent's threads
  return *p;
}

}  // namespace emu

// ---- CUDA's built-in variables and functions --------------------------------------

#define threadIdx (::emu::current_fiber()->idx)
#define blockIdx (::emu::tls_block_idx)
#define blockDim (::emu::tls_block_dim)
#define gridDim (::emu::tls_grid_dim)

inline void __syncthreads(const char* file = __builtin_FILE(), unsigned line = __builtin_LINE()) {
  emu::Fiber* f = emu::current_fiber();
  emu::tsan_release(&f->block->bar_sync);
  emu::wait_here(f, emu::kAtBarrier, file, line);
  emu::tsan_acquire(&f->block->bar_sync);
}

inline void __syncwarp(unsigned mask = 0xffffffffu, const char* file = __builtin_FILE(),
                       unsigned line = __builtin_LINE()) {
  emu::Fiber* f = emu::current_fiber();
  char* sync = &f->block->warp_sync[(f->idx.x >> 5) & 31u];
  emu::tsan_release(sync);
  emu::warp_op(emu::kSyncWarp, mask, 0, 32, 0, file, line);
  emu::tsan_acquire(sync);
}

template <typename T>
inline T __shfl_sync(unsigned mask, T v, int src, int width = warpSize, const char* file = __builtin_FILE(),
                     unsigned line = __builtin_LINE()) {
  return emu::from_bits<T>(emu::warp_op(emu::kShfl, mask, (unsigned)src, (unsigned)width, emu::to_bits(v), file, line));
}
template <typename T>
inline T __shfl_up_sync(unsigned mask, T v, unsigned d, int width = warpSize, const char* file = __builtin_FILE(),
                        unsigned line = __builtin_LINE()) {
  return emu::from_bits<T>(emu::warp_op(emu::kShflUp, mask, d, (unsigned)width, emu::to_bits(v), file, line));
}
template <typename T>
inline T __shfl_down_sync(unsigned mask, T v, unsigned d, int width = warpSize, const char* file = __builtin_FILE(),
                          unsigned line = __builtin_LINE()) {
  return emu::from_bits<T>(emu::warp_op(emu::kShflDown, mask, d, (unsigned)width, emu::to_bits(v), file, line));
}
template <typename T>
inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = warpSize, const char* file = __builtin_FILE(),
                         unsigned line = __builtin_LINE()) {
  return emu::from_bits<T>(emu::warp_op(emu::kShflXor, mask, (unsigned)lane_mask, (unsigned)width, emu::to_bits(v),
                                        file, line));
}
inline unsigned __ballot_sync(unsigned mask, int pred, const char* file = __builtin_FILE(),
                              unsigned line = __builtin_LINE()) {
  return (unsigned)emu::warp_op(emu::kBallot, mask, 0, 32, pred != 0, file, line);
}
inline int __any_sync(unsigned mask, int pred, const char* file = __builtin_FILE(), unsigned line = __builtin_LINE()) {
  return (int)emu::warp_op(emu::kAny, mask, 0, 32, pred != 0, file, line);
}
inline int __all_sync(unsigned mask, int pred, const char* file = __builtin_FILE(), unsigned line = __builtin_LINE()) {
  return (int)emu::warp_op(emu::kAll, mask, 0, 32, pred != 0, file, line);
}

// CUDA 12.4+'s atomic load builtin (relaxed only: all the kernels use).
#define __NV_ATOMIC_RELAXED 0
#define __NV_THREAD_SCOPE_DEVICE 1
template <typename T>
inline T __nv_atomic_load_n(T* p, int order, int scope, const char* file = __builtin_FILE(),
                            unsigned line = __builtin_LINE()) {
  emu::check_atomic(p, "__nv_atomic_load_n", file, line);
  if (order != __NV_ATOMIC_RELAXED)
    emu::fault_here(emu::format("__nv_atomic_load_n: order %d is not emulated [%s:%u]", order, emu::base_name(file),
                                line), true);
  (void)scope;
  return __atomic_load_n(p, __ATOMIC_RELAXED);
}

inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __ffs(unsigned x) { return __builtin_ffs((int)x); }

#define EMU_SITE const char *file = __builtin_FILE(), unsigned line = __builtin_LINE()
// atomicOr / atomicAdd for CUDA's integer types, atomicMin for unsigned: relaxed, as on a GPU.
template <typename T>
inline T atomicOr(T* p, std::type_identity_t<T> v, EMU_SITE) {
  emu::check_atomic(p, "atomicOr", file, line);
  return __atomic_fetch_or(p, v, __ATOMIC_RELAXED);
}
template <typename T>
inline T atomicAdd(T* p, std::type_identity_t<T> v, EMU_SITE) {
  emu::check_atomic(p, "atomicAdd", file, line);
  return __atomic_fetch_add(p, v, __ATOMIC_RELAXED);
}
inline unsigned atomicMin(unsigned* p, unsigned v, EMU_SITE) {
  emu::check_atomic(p, "atomicMin", file, line);
  unsigned cur = __atomic_load_n(p, __ATOMIC_RELAXED);
  while (v < cur && !__atomic_compare_exchange_n(p, &cur, v, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
  }
  return cur;
}
#undef EMU_SITE

// ---- UBSan's callbacks: every finding in a kernel is a fault -----------------------
namespace emu::ub {
struct Loc {
  const char* file;
  unsigned line, column;
};
struct Type {
  unsigned short kind, info;
  char name[1];
};
struct TypeMismatch {
  Loc loc;
  const Type* type;
  unsigned char log_alignment, check_kind;
};
inline std::string where(const void* data) {
  const Loc* l = static_cast<const Loc*>(data);
  return format("[%s:%u:%u]", base_name(l->file), l->line, l->column);
}
inline void report(const void* data, const char* what, bool fatal) {
  fault_here(std::string(what) + " " + where(data), fatal);
}
inline void type_mismatch(void* data, void* ptr, bool fatal) {
  static const char* const kinds[] = {"load of",          "store to",          "reference binding to",
                                      "member access within", "member call on", "constructor call on",
                                      "downcast of",      "downcast of",       "upcast of",
                                      "cast to virtual base of", "_Nonnull binding to", "dynamic operation on"};
  const auto* d = static_cast<const TypeMismatch*>(data);
  const char* kind = d->check_kind < 12 ? kinds[d->check_kind] : "access to";
  const uintptr_t p = (uintptr_t)ptr, align = (uintptr_t)1 << d->log_alignment;
  std::string what;
  if (p == 0)
    what = format("null pointer: %s a null pointer of type %s", kind, d->type->name);
  else if (p & (align - 1))
    what = format("misaligned address: %s %p, type %s needs %u-byte alignment", kind, ptr, d->type->name,
                  (unsigned)align);
  else
    what = format("out of bounds: %s %p, too little space for type %s", kind, ptr, d->type->name);
  fault_here(what + " " + where(data), fatal);
}
}  // namespace emu::ub

#define EMU_UBSAN extern "C" __attribute__((visibility("default"), used))
#define EMU_UBSAN_PAIR(name, what, ...)                                                \
  EMU_UBSAN void __ubsan_handle_##name(void* d, ##__VA_ARGS__) { emu::ub::report(d, what, false); } \
  EMU_UBSAN void __ubsan_handle_##name##_abort(void* d, ##__VA_ARGS__) { emu::ub::report(d, what, true); }
EMU_UBSAN void __ubsan_handle_type_mismatch_v1(void* d, void* p) { emu::ub::type_mismatch(d, p, false); }
EMU_UBSAN void __ubsan_handle_type_mismatch_v1_abort(void* d, void* p) { emu::ub::type_mismatch(d, p, true); }
EMU_UBSAN_PAIR(add_overflow, "signed integer overflow in +", void*, void*)
EMU_UBSAN_PAIR(sub_overflow, "signed integer overflow in -", void*, void*)
EMU_UBSAN_PAIR(mul_overflow, "signed integer overflow in *", void*, void*)
EMU_UBSAN_PAIR(negate_overflow, "signed integer overflow in unary -", void*)
EMU_UBSAN_PAIR(divrem_overflow, "division by zero or overflow", void*, void*)
EMU_UBSAN_PAIR(shift_out_of_bounds, "shift exponent or operand out of bounds", void*, void*)
EMU_UBSAN_PAIR(out_of_bounds, "array index out of bounds", void*)
EMU_UBSAN_PAIR(load_invalid_value, "load of an invalid bool or enum value", void*)
EMU_UBSAN_PAIR(vla_bound_not_positive, "variable-length array bound not positive", void*)
EMU_UBSAN_PAIR(nonnull_arg, "null passed as a nonnull argument")
EMU_UBSAN_PAIR(nonnull_return_v1, "null returned from a returns_nonnull function", void*)
EMU_UBSAN_PAIR(pointer_overflow, "pointer arithmetic overflow", void*, void*)
EMU_UBSAN_PAIR(invalid_builtin, "invalid argument to a builtin (ctz/clz of zero)")
EMU_UBSAN_PAIR(float_cast_overflow, "float-to-integer conversion overflow", void*)
EMU_UBSAN void __ubsan_handle_builtin_unreachable(void* d) {
  emu::ub::report(d, "__builtin_unreachable() reached", true);
  abort();
}
EMU_UBSAN void __ubsan_handle_missing_return(void* d) {
  emu::ub::report(d, "end of a value-returning function reached", true);
  abort();
}
#undef EMU_UBSAN_PAIR
#undef EMU_UBSAN

#if EMU_ASAN
// An ASan report while a kernel runs becomes that launch's fault.  (The fiber
// goes on, ASan holds its report lock here; the scheduler stops the block at
// the fiber's next blocking point.)
inline void emu_asan_report(const char* text) {
  emu::sanitizer_reports.fetch_add(1);
  emu::Fiber* f = emu::current_fiber();
  if (!f) return;
  const char* e = strstr(text, "ERROR: AddressSanitizer: ");
  std::string line = e ? std::string(e + 7, strcspn(e + 7, "\n")) : std::string("AddressSanitizer report");
  emu::record_fault(f->block, f, line);
}
__attribute__((constructor)) inline void emu_install_asan_report() {
  __asan_set_error_report_callback(emu_asan_report);
}
#endif

// Runs `body` as every thread of every block of a (gx, gy) grid of bx
// threads.  Returns false with *fault set when the launch faulted.
inline bool emu_run(const char* kernel, unsigned gx, unsigned gy, unsigned bx, const std::function<void()>& body,
                    std::string* fault) {
  if (gx == 0 || gy == 0 || bx == 0 || bx > 1024) {
    *fault = emu::format("%s: invalid launch configuration grid (%u, %u), block %u", kernel, gx, gy, bx);
    return false;
  }
  emu::Launch L;
  L.kernel = kernel;
  L.body = &body;
  L.grid = emu::Dim3{gx, gy, 1};
  L.block = emu::Dim3{bx, 1, 1};
  // ASan: one worker (`__shared__` is a plain static).  TSan: 2 by default
  // (every worker holds blockDim TSan contexts).  Else the hardware's concurrency.
  unsigned workers = emu::worker_limit.load();
  if (EMU_ASAN) workers = 1;
  else if (workers == 0) workers = EMU_TSAN ? 2u : std::max(2u, std::min(8u, std::thread::hardware_concurrency()));
#if EMU_INITCHECK
  __atomic_store_n(&emu::ic::active, true, __ATOMIC_RELAXED);
#endif
  emu::pool().run(L, std::min(workers, gx * gy));
#if EMU_INITCHECK
  __atomic_store_n(&emu::ic::active, false, __ATOMIC_RELAXED);
#endif
  std::lock_guard<std::mutex> lk(L.mu);  // a fiber's fault: ordered by the lock, not by the pool
  if (L.faults == 0) return true;
  *fault = L.fault + (L.faults > 1 ? emu::format(" (and %u more faults)", L.faults - 1) : "");
  return false;
}
