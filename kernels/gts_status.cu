// Entry point: nvCOMP per-chunk results -> status words.  One thread per
// decompressed chunk (grid-stride).  See gts_status.cuh.
#include "gts_status.cuh"

extern "C" __global__ void gts_fold_nvcomp_status(const gts::u64* chunk_idx, const gts::u64* declared,
                                                  const gts::u64* actual, const gts::i32* st, gts::u32 n,
                                                  gts::u32* status, gts::u64* summary) {
  gts::fold_nvcomp_status(chunk_idx, declared, actual, st, n, status, summary);
}
