// Entry points: sequence chunks (encodings 3, 4), grid = number of sequence
// chunks in the batch, block = GTS_BLOCK; then the order check, one CUDA block
// per GtsSeqOrder row (grid-stride).  See gts_sequence.cuh.
#include "gts_sequence.cuh"

extern "C" __global__ void __launch_bounds__(GTS_BLOCK, GTS_MIN_BLOCKS)
gts_decode_sequences(const gts::GtsChunk* __restrict__ chunks, gts::u32* status, gts::u64* summary) {
  gts::decode_sequence_chunk(chunks, status, summary);
}

extern "C" __global__ void __launch_bounds__(GTS_BLOCK)
gts_check_sequence_order(const gts::GtsSeqOrder* __restrict__ jobs, gts::u32 n_jobs, const gts::i64* __restrict__ ts,
                         const gts::u64* __restrict__ seq, gts::u32* status, gts::u64* summary) {
  for (gts::u32 j = blockIdx.x; j < n_jobs; j += gridDim.x) gts::check_sequence_order(jobs[j], ts, seq, status, summary);
}

// The sequence chunks of at most GTS_WARP_MAX_ROWS rows, one per warp: grid =
// ceil(n_chunks / GTS_WARPS), block = GTS_BLOCK.  See gts_warp.cuh.
extern "C" __global__ void __launch_bounds__(GTS_BLOCK, GTS_MIN_BLOCKS)
gts_decode_sequences_warp(const gts::GtsChunk* __restrict__ chunks, gts::u32 n_chunks, gts::u32* status,
                          gts::u64* summary) {
  gts::decode_sequence_chunk_warp(chunks, n_chunks, status, summary);
}
