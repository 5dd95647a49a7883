// Host build of every kernel in kernels/*.cu over cuda_emu.h, with one C entry
// point taking cuLaunchKernel-style parameter pointers.
#include <cstring>
#include "cuda_emu.h"
#include "gts_timestamp.cu"
#include "gts_sequence.cu"
#include "gts_optype.cu"
#include "gts_float.cu"
#include "gts_identity.cu"
#include "gts_status.cu"
#include "gts_trim.cu"
#include "gts_xxh64.cu"

using namespace gts;
template <typename T> static T A(void** a, int i) { return *static_cast<T*>(a[i]); }

extern "C" int emu_launch(const char* name, unsigned gx, unsigned gy, unsigned bx, void** a) {
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
  else
    return 1;
  emu_run(gx, gy, bx, f);
  return 0;
}
