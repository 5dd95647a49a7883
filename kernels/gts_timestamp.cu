// Entry point: timestamp chunks (encodings 1, 2).  grid = number of timestamp
// chunks in the batch, block = GTS_BLOCK.  See gts_timestamp.cuh.
#include "gts_timestamp.cuh"

extern "C" __global__ void __launch_bounds__(GTS_BLOCK, GTS_MIN_BLOCKS)
gts_decode_timestamps(const gts::GtsChunk* __restrict__ chunks, gts::u32* status, gts::u64* summary) {
  gts::decode_timestamp_chunk(chunks, status, summary);
}

// The timestamp chunks of at most GTS_WARP_MAX_ROWS rows, one per warp: grid =
// ceil(n_chunks / GTS_WARPS), block = GTS_BLOCK.  See gts_warp.cuh.
extern "C" __global__ void __launch_bounds__(GTS_BLOCK, GTS_MIN_BLOCKS)
gts_decode_timestamps_warp(const gts::GtsChunk* __restrict__ chunks, gts::u32 n_chunks, gts::u32* status,
                           gts::u64* summary) {
  gts::decode_timestamp_chunk_warp(chunks, n_chunks, status, summary);
}
