// Entry point: timestamp chunks (encodings 1, 2).  grid = number of timestamp
// chunks in the batch, block = GTS_BLOCK.  See gts_timestamp.cuh.
#include "gts_timestamp.cuh"

extern "C" __global__ void __launch_bounds__(GTS_BLOCK, GTS_MIN_BLOCKS)
gts_decode_timestamps(const gts::GtsChunk* __restrict__ chunks, gts::u32* status, gts::u64* summary) {
  gts::decode_timestamp_chunk(chunks, status, summary);
}
