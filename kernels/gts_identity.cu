// Entry point: __table_id / __tsid broadcast.  grid = min(blocks, cap)
// (grid-stride), block = GTS_BLOCK.  new_out / keep_n are null before
// trimming.  See gts_identity.cuh.
#include "gts_identity.cuh"

extern "C" __global__ void __launch_bounds__(GTS_BLOCK)
gts_broadcast_identity(const gts::GtsBlock* __restrict__ blocks, gts::u32 nblocks, const gts::u64* new_out,
                       const gts::u64* keep_n, gts::u32* table_id, gts::u64* tsid) {
  gts::broadcast_identity(blocks, nblocks, new_out, keep_n, table_id, tsid);
}
