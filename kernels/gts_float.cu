// Entry point: Float64 field chunks (encoding 5) and synthesized all-null
// chunks, every projected field of the batch in one launch.  grid = number of
// field descriptors, block = GTS_BLOCK.  See gts_float.cuh.
#include "gts_float.cuh"

extern "C" __global__ void __launch_bounds__(GTS_BLOCK, GTS_MIN_BLOCKS)
gts_decode_floats(const gts::GtsChunk* __restrict__ chunks, gts::u32* status, gts::u64* summary) {
  gts::decode_float_chunk(chunks, status, summary);
}

// The field chunks of at most GTS_WARP_MAX_ROWS rows, one per warp: grid =
// ceil(n_chunks / GTS_WARPS), block = GTS_BLOCK.  See gts_warp.cuh.
extern "C" __global__ void __launch_bounds__(GTS_BLOCK, GTS_MIN_BLOCKS)
gts_decode_floats_warp(const gts::GtsChunk* __restrict__ chunks, gts::u32 n_chunks, gts::u32* status,
                       gts::u64* summary) {
  gts::decode_float_chunk_warp(chunks, n_chunks, status, summary);
}
