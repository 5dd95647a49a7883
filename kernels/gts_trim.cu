// Entry points: exact [start, end) trimming.  See gts_trim.cuh.
//   gts_trim_ranges     one thread per block (grid-stride)
//   gts_scan_blocks     one CUDA block of GTS_BLOCK threads
//   gts_compact_columns grid = (min(blocks, cap), fixed-width columns)
//   gts_compact_masks   grid = (min(blocks, cap), validity masks)
#include "gts_trim.cuh"

extern "C" __global__ void gts_trim_ranges(const gts::GtsBlock* __restrict__ blocks, gts::u32 nblocks,
                                           const gts::i64* __restrict__ ts, gts::u32 has_start, gts::i64 start,
                                           gts::u32 has_end, gts::i64 end, gts::u32* keep_lo, gts::u64* keep_n) {
  gts::trim_ranges(blocks, nblocks, ts, has_start, start, has_end, end, keep_lo, keep_n);
}

extern "C" __global__ void __launch_bounds__(GTS_BLOCK)
gts_scan_blocks(const gts::u64* __restrict__ keep_n, gts::u32 nblocks, gts::u64* new_out, gts::u64* summary) {
  gts::scan_blocks(keep_n, nblocks, new_out, summary);
}

extern "C" __global__ void __launch_bounds__(GTS_BLOCK)
gts_compact_columns(const gts::GtsBlock* __restrict__ blocks, gts::u32 nblocks, const gts::u32* keep_lo,
                    const gts::u64* keep_n, const gts::u64* new_out, const gts::GtsCopyCol* cols) {
  gts::compact_columns(blocks, nblocks, keep_lo, keep_n, new_out, cols);
}

extern "C" __global__ void __launch_bounds__(GTS_BLOCK)
gts_compact_masks(const gts::GtsBlock* __restrict__ blocks, gts::u32 nblocks, const gts::u32* keep_lo,
                  const gts::u64* keep_n, const gts::u64* new_out, const gts::GtsMaskCol* masks,
                  gts::u64* valid_counts) {
  gts::compact_masks(blocks, nblocks, keep_lo, keep_n, new_out, masks, valid_counts);
}
