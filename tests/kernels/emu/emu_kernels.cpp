// Host build of every kernel in kernels/*.cu (and of the test-only kernels in
// emu_test_kernels.cuh) over cuda_emu.h, with one C entry point taking
// cuLaunchKernel-style parameter pointers.
#include <cstring>
#include "cuda_emu.h"

// An unnamed namespace: every kernel function and its __shared__ statics get
// internal linkage, so an ASan build puts redzones around the shared arrays
// (see cuda_emu.h).  The kernel headers include no standard header.
namespace {
#include "gts_timestamp.cu"
#include "gts_sequence.cu"
#include "gts_optype.cu"
#include "gts_float.cu"
#include "gts_identity.cu"
#include "gts_status.cu"
#include "gts_trim.cu"
#include "gts_xxh64.cu"
#include "emu_test_kernels.cuh"

using namespace gts;
using namespace emu_test;
template <typename T> T A(void** a, int i) { return *static_cast<T*>(a[i]); }

std::mutex launch_mu;
std::string last_fault;
}  // namespace

#define EMU_API extern "C" __attribute__((visibility("default")))

EMU_API int emu_launch(const char* name, unsigned gx, unsigned gy, unsigned bx, void** a) {
  std::function<void()> f;
  if (!strcmp(name, "gts_decode_timestamps"))
    f = [&] { gts_decode_timestamps(A<const GtsChunk*>(a, 0), A<u32*>(a, 1), A<u64*>(a, 2)); };
  else if (!strcmp(name, "gts_decode_sequences"))
    f = [&] { gts_decode_sequences(A<const GtsChunk*>(a, 0), A<u32*>(a, 1), A<u64*>(a, 2)); };
  else if (!strcmp(name, "gts_check_sequence_order"))
    f = [&] { gts_check_sequence_order(A<const GtsSeqOrder*>(a, 0), A<u32>(a, 1), A<const i64*>(a, 2),
                                       A<const u64*>(a, 3), A<u32*>(a, 4), A<u64*>(a, 5)); };
  else if (!strcmp(name, "gts_decode_optypes"))
    f = [&] { gts_decode_optypes(A<const GtsChunk*>(a, 0), A<u32*>(a, 1), A<u64*>(a, 2)); };
  else if (!strcmp(name, "gts_decode_floats"))
    f = [&] { gts_decode_floats(A<const GtsChunk*>(a, 0), A<u32*>(a, 1), A<u64*>(a, 2)); };
  else if (!strcmp(name, "gts_decode_timestamps_warp"))
    f = [&] { gts_decode_timestamps_warp(A<const GtsChunk*>(a, 0), A<u32>(a, 1), A<u32*>(a, 2), A<u64*>(a, 3)); };
  else if (!strcmp(name, "gts_decode_sequences_warp"))
    f = [&] { gts_decode_sequences_warp(A<const GtsChunk*>(a, 0), A<u32>(a, 1), A<u32*>(a, 2), A<u64*>(a, 3)); };
  else if (!strcmp(name, "gts_decode_optypes_warp"))
    f = [&] { gts_decode_optypes_warp(A<const GtsChunk*>(a, 0), A<u32>(a, 1), A<u32*>(a, 2), A<u64*>(a, 3)); };
  else if (!strcmp(name, "gts_decode_floats_warp"))
    f = [&] { gts_decode_floats_warp(A<const GtsChunk*>(a, 0), A<u32>(a, 1), A<u32*>(a, 2), A<u64*>(a, 3)); };
  else if (!strcmp(name, "gts_broadcast_identity"))
    f = [&] { gts_broadcast_identity(A<const GtsBlock*>(a, 0), A<u32>(a, 1), A<const u64*>(a, 2), A<const u64*>(a, 3),
                                     A<u32*>(a, 4), A<u64*>(a, 5)); };
  else if (!strcmp(name, "gts_fold_nvcomp_status"))
    f = [&] { gts_fold_nvcomp_status(A<const u64*>(a, 0), A<const u64*>(a, 1), A<const u64*>(a, 2),
                                     A<const i32*>(a, 3), A<u32>(a, 4), A<u32*>(a, 5), A<u64*>(a, 6)); };
  else if (!strcmp(name, "gts_trim_ranges"))
    f = [&] { gts_trim_ranges(A<const GtsBlock*>(a, 0), A<u32>(a, 1), A<const i64*>(a, 2), A<u32>(a, 3),
                              A<i64>(a, 4), A<u32>(a, 5), A<i64>(a, 6), A<u32*>(a, 7), A<u64*>(a, 8)); };
  else if (!strcmp(name, "gts_scan_blocks"))
    f = [&] { gts_scan_blocks(A<const u64*>(a, 0), A<u32>(a, 1), A<u64*>(a, 2), A<u64*>(a, 3)); };
  else if (!strcmp(name, "gts_compact_columns"))
    f = [&] { gts_compact_columns(A<const GtsBlock*>(a, 0), A<u32>(a, 1), A<const u32*>(a, 2), A<const u64*>(a, 3),
                                  A<const u64*>(a, 4), A<const GtsCopyCol*>(a, 5)); };
  else if (!strcmp(name, "gts_compact_masks"))
    f = [&] { gts_compact_masks(A<const GtsBlock*>(a, 0), A<u32>(a, 1), A<const u32*>(a, 2), A<const u64*>(a, 3),
                                A<const u64*>(a, 4), A<const GtsMaskCol*>(a, 5), A<u64*>(a, 6)); };
  else if (!strcmp(name, "gts_xxh64"))
    f = [&] { gts_xxh64(A<const GtsHashJob*>(a, 0), A<u32>(a, 1), A<u32*>(a, 2), A<u64*>(a, 3)); };
  // test-only kernels
  else if (!strcmp(name, "emu_test_access"))
    f = [&] { emu_test_access(A<const u8*>(a, 0), A<u8*>(a, 1), A<u32>(a, 2), A<u32>(a, 3), A<u32>(a, 4),
                              A<u64*>(a, 5)); };
  else if (!strcmp(name, "emu_test_atomic"))
    f = [&] { emu_test_atomic(A<u8*>(a, 0), A<u32>(a, 1)); };
  else if (!strcmp(name, "emu_test_partial_barrier"))
    f = [&] { emu_test_partial_barrier(A<u32*>(a, 0), A<u32>(a, 1)); };
  else if (!strcmp(name, "emu_test_divergent_barrier"))
    f = [&] { emu_test_divergent_barrier(A<u32*>(a, 0), A<u32>(a, 1)); };
  else if (!strcmp(name, "emu_test_warp"))
    f = [&] { emu_test_warp(A<u32*>(a, 0), A<u32>(a, 1), A<u32>(a, 2), A<u32>(a, 3), A<u32>(a, 4)); };
  else if (!strcmp(name, "emu_test_read_past"))
    f = [&] { emu_test_read_past(A<const u32*>(a, 0), A<u32>(a, 1), A<u32*>(a, 2)); };
  else if (!strcmp(name, "emu_test_shared_overflow"))
    f = [&] { emu_test_shared_overflow(A<u32*>(a, 0)); };
  else if (!strcmp(name, "emu_test_shared_uninit"))
    f = [&] { emu_test_shared_uninit(A<u32*>(a, 0), A<u32>(a, 1)); };
  else if (!strcmp(name, "emu_test_race"))
    f = [&] { emu_test_race(A<u32*>(a, 0), A<u32>(a, 1)); };
  else
    return 1;
  std::lock_guard<std::mutex> lk(launch_mu);  // one launch at a time, as on one stream
  last_fault.clear();
  const bool ok = emu_run(name, gx, gy, bx, f, &last_fault);
#if EMU_INITCHECK
  emu::ic::owned_store.clear();  // ownership is given per launch
  emu::ic::owned = nullptr;
  emu::ic::n_owned = 0;
  emu::ic::fence_store.clear();
  emu::ic::fences = nullptr;
  emu::ic::n_fences = 0;
  emu::ic::own_warps = 0;
#endif
  return ok ? 0 : 2;
}

// ---- the initcheck build's shadow of `empty` global memory (no-ops elsewhere) ----

#if EMU_INITCHECK
namespace {
void publish_regions() {
  emu::ic::regions = emu::ic::region_store.data();
  emu::ic::n_regions = emu::ic::region_store.size();
}
}  // namespace
#endif

// [p, p + n) is an `empty` allocation: unwritten until a kernel or the host writes it.
EMU_API void emu_ic_track(unsigned long long p, unsigned long long n) {
#if EMU_INITCHECK
  std::lock_guard<std::mutex> lk(launch_mu);
  auto& v = emu::ic::region_store;
  auto* shadow = static_cast<unsigned char*>(calloc(n ? n : 1, 1));
  emu::ic::Region r{(uintptr_t)p, (uintptr_t)(p + n), shadow};
  auto it = std::lower_bound(v.begin(), v.end(), r, [](const auto& a, const auto& b) { return a.lo < b.lo; });
  v.insert(it, r);
  publish_regions();
#else
  (void)p, (void)n;
#endif
}

// The allocation at p was freed.
EMU_API void emu_ic_forget(unsigned long long p) {
#if EMU_INITCHECK
  std::lock_guard<std::mutex> lk(launch_mu);
  auto& v = emu::ic::region_store;
  for (auto it = v.begin(); it != v.end(); ++it)
    if (it->lo == (uintptr_t)p) {
      free(it->shadow);
      v.erase(it);
      break;
    }
  publish_regions();
#else
  (void)p;
#endif
}

// The host wrote [p, p + n) (an upload, a copy that arrived, nvCOMP's output).
EMU_API void emu_ic_mark(unsigned long long p, unsigned long long n) {
#if EMU_INITCHECK
  std::lock_guard<std::mutex> lk(launch_mu);
  for (auto& r : emu::ic::region_store) {
    const uintptr_t lo = std::max<uintptr_t>(r.lo, p), hi = std::min<uintptr_t>(r.hi, p + n);
    if (lo < hi) memset(r.shadow + (lo - r.lo), 1, hi - lo);
  }
#else
  (void)p, (void)n;
#endif
}

// Ownership for the next launch only: output bytes [lo[i], hi[i]) belong to
// owner[i] (a block index, or with warps > 0 the warp blockIdx * warps + warp);
// in the allocations [flo[j], fhi[j]) holding them no other byte may be stored to.
EMU_API void emu_ic_own(unsigned n, const unsigned long long* lo, const unsigned long long* hi, const unsigned* owner,
                        unsigned warps, unsigned nf, const unsigned long long* flo, const unsigned long long* fhi) {
#if EMU_INITCHECK
  std::lock_guard<std::mutex> lk(launch_mu);
  auto& v = emu::ic::owned_store;
  v.clear();
  for (unsigned i = 0; i < n; ++i)
    if (lo[i] < hi[i]) v.push_back({(uintptr_t)lo[i], (uintptr_t)hi[i], owner[i]});
  std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.lo < b.lo; });
  emu::ic::owned = v.data();
  emu::ic::n_owned = v.size();
  emu::ic::own_warps = warps;
  auto& fv = emu::ic::fence_store;
  fv.clear();
  for (unsigned j = 0; j < nf; ++j) fv.push_back({(uintptr_t)flo[j], (uintptr_t)fhi[j], 0xffffffffu});
  emu::ic::fences = fv.data();
  emu::ic::n_fences = fv.size();
#else
  (void)n, (void)lo, (void)hi, (void)owner, (void)warps, (void)nf, (void)flo, (void)fhi;
#endif
}

// The last launch's fault message ("" when it ran clean).
EMU_API const char* emu_last_fault() { return last_fault.c_str(); }

// Which build this is: "plain", "address" (ASan + UBSan), "thread" (TSan + UBSan) or "initcheck"
// (shadow of written memory + UBSan; emu_initcheck.h).
EMU_API const char* emu_build() {
  return EMU_ASAN ? "address" : EMU_TSAN ? "thread" : EMU_INITCHECK ? "initcheck" : "plain";
}

// Sanitizer reports so far (in the ASan build, ASan's; everywhere, UBSan findings outside a kernel).
EMU_API unsigned long long emu_sanitizer_reports() { return emu::sanitizer_reports.load(); }

// Worker threads per launch (0: the hardware's concurrency, at least 2; the
// ASan build always runs blocks one after another, the TSan build one thread per block).
EMU_API void emu_set_workers(unsigned n) { emu::worker_limit.store(n); }
