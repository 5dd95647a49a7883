// Entry point: operation type chunks (encodings 6, 7).  grid = number of
// operation chunks in the batch, block = GTS_BLOCK.  See gts_optype.cuh.
#include "gts_optype.cuh"

extern "C" __global__ void __launch_bounds__(GTS_BLOCK)
gts_decode_optypes(const gts::GtsChunk* __restrict__ chunks, gts::u32* status, gts::u64* summary) {
  gts::decode_optype_chunk(chunks, status, summary);
}
