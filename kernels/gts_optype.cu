// Entry point: operation type chunks (encodings 6, 7).  grid = number of
// operation chunks in the batch, block = GTS_BLOCK.  See gts_optype.cuh.
#include "gts_optype.cuh"

extern "C" __global__ void __launch_bounds__(GTS_BLOCK)
gts_decode_optypes(const gts::GtsChunk* __restrict__ chunks, gts::u32* status, gts::u64* summary) {
  gts::decode_optype_chunk(chunks, status, summary);
}

// The operation type chunks of at most GTS_WARP_MAX_ROWS rows, one per warp: grid =
// ceil(n_chunks / GTS_WARPS), block = GTS_BLOCK.  See gts_warp.cuh.
extern "C" __global__ void __launch_bounds__(GTS_BLOCK, GTS_MIN_BLOCKS)
gts_decode_optypes_warp(const gts::GtsChunk* __restrict__ chunks, gts::u32 n_chunks, gts::u32* status,
                        gts::u64* summary) {
  gts::decode_optype_chunk_warp(chunks, n_chunks, status, summary);
}
