// gts_identity.cuh -- __table_id and __tsid, broadcast from block descriptors.
//
// Spec ("Column payloads and row semantics"): each block contains exactly one
// (table_id, tsid); identity is stored once in its descriptor, never as a
// chunk.  Every output row of a block gets the block's identity.
//
// One CUDA block per selected block.  After trimming the kernel is run with
// the compacted placement (new_out, keep_n); otherwise with the descriptor's.
#pragma once
#include "gts_types.cuh"

namespace gts {

__device__ __forceinline__ void broadcast_identity(const GtsBlock* __restrict__ blocks, u32 nblocks,
                                                   const u64* __restrict__ new_out,
                                                   const u64* __restrict__ keep_n, u32* __restrict__ table_id,
                                                   u64* __restrict__ tsid) {
  for (u32 b = blockIdx.x; b < nblocks; b += gridDim.x) {
    const GtsBlock blk = blocks[b];
    const u64 o = new_out ? new_out[b] : blk.out_row;
    const u64 n = keep_n ? keep_n[b] : (u64)blk.rows;
    for (u64 r = threadIdx.x; r < n; r += blockDim.x) {
      table_id[o + r] = blk.table_id;
      tsid[o + r] = blk.tsid;
    }
  }
}

}  // namespace gts
