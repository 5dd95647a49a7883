// Entry point: Float64 field chunks (encoding 5) and synthesized all-null
// chunks, every projected field of the batch in one launch.  grid = number of
// field descriptors, block = GTS_BLOCK.  See gts_float.cuh.
#include "gts_float.cuh"

extern "C" __global__ void __launch_bounds__(GTS_BLOCK, GTS_MIN_BLOCKS)
gts_decode_floats(const gts::GtsChunk* __restrict__ chunks, gts::u32* status, gts::u64* summary) {
  gts::decode_float_chunk(chunks, status, summary);
}
