// Entry point: sequence chunks (encodings 3, 4).  grid = number of sequence
// chunks in the batch, block = GTS_BLOCK.  See gts_sequence.cuh.
#include "gts_sequence.cuh"

extern "C" __global__ void __launch_bounds__(GTS_BLOCK, GTS_MIN_BLOCKS)
gts_decode_sequences(const gts::GtsChunk* __restrict__ chunks, gts::u32* status, gts::u64* summary) {
  gts::decode_sequence_chunk(chunks, status, summary);
}
