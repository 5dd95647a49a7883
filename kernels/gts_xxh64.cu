// Entry point: XXH64 (seed 0) of stored chunks.  Four lanes per chunk:
// grid = ceil(4 * jobs / GTS_BLOCK), block = GTS_BLOCK.  See gts_xxh64.cuh.
#include "gts_xxh64.cuh"

extern "C" __global__ void __launch_bounds__(GTS_BLOCK)
gts_xxh64(const gts::GtsHashJob* __restrict__ jobs, gts::u32 njobs, gts::u32* status, gts::u64* summary) {
  gts::xxh64_jobs(jobs, njobs, status, summary);
}
