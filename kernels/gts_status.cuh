// gts_status.cuh -- folds nvCOMP's per-chunk results into the status words.
//
// Spec ("Payload reference"): require exactly the declared decoded length,
// with bounded output even if a codec frame claims more.  nvCOMP writes a
// status (nvcompStatus_t, int32) and the actual decompressed size (size_t) per
// chunk; the output capacity given to it is the declared length.
//   status != nvcompSuccess             -> ZSTD_DECOMPRESS_FAILED
//   status == 0, actual != declared     -> DECODED_LENGTH_MISMATCH
// Mirrors gtsamples.decode.gpu.nvcomp.result_flags (host, numpy), which a test
// checks for equality on a GPU.
#pragma once
#include "gts_types.cuh"
#include "gts_errors.cuh"

namespace gts {

__device__ __forceinline__ void fold_nvcomp_status(const u64* __restrict__ chunk_idx,
                                                   const u64* __restrict__ declared,
                                                   const u64* __restrict__ actual, const i32* __restrict__ st,
                                                   u32 n, u32* status, u64* summary) {
  for (u32 i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    u32 f = 0;
    if (st[i] != 0) f = GTS_FLAG_ZSTD_DECOMPRESS_FAILED;
    else if (actual[i] != declared[i]) f = GTS_FLAG_DECODED_LENGTH_MISMATCH;
    report_flags(status, summary, (u32)chunk_idx[i], f);
  }
}

}  // namespace gts
