// gts_optype.cuh -- operation type column, encodings 6 and 7.
//
// Spec ("Operation encodings 6 and 7"): operation values are u8, 0 delete and
// 1 put; unknown values fail decoding.  Encoding 6 stores one byte repeated
// for the whole block (exactly 1 byte); encoding 7 stores exactly one byte per
// row.  Neither filters delete rows.
//
// Flags: BAD_LENGTH (len != 1, resp. len != rows) | OP_TYPE_INVALID (a value
// greater than 1).  other: UNSUPPORTED_ENCODING.
#pragma once
#include "gts_types.cuh"
#include "gts_errors.cuh"
#include "gts_scan.cuh"

namespace gts {

__device__ __forceinline__ void decode_optype_chunk(const GtsChunk* __restrict__ chunks, u32* status,
                                                    u64* summary) {
  const GtsChunk c = chunks[blockIdx.x];
  if (already_failed(status, c.chunk)) return;
  const u8* p = (const u8*)c.src;
  u8* out = (u8*)c.dst + c.out_row;
  const u32 R = c.rows;
  u32 flags = 0;
  if (R == 0u || R > GTS_MAX_BLOCK_ROWS) {
    flags = GTS_FLAG_BAD_LENGTH;  // planner guarantees
  } else if (c.encoding == GTS_ENC_OP_CONSTANT) {
    if (c.len != 1u) {
      flags = GTS_FLAG_BAD_LENGTH;
    } else {
      const u8 v = p[0];
      for (u32 r = threadIdx.x; r < R; r += GTS_BLOCK) out[r] = v;
      flags = v > GTS_OP_MAX ? GTS_FLAG_OP_TYPE_INVALID : 0u;
    }
  } else if (c.encoding == GTS_ENC_OP_RAW) {
    if (c.len != R) {
      flags = GTS_FLAG_BAD_LENGTH;
    } else {
      u32 local = 0;
      for (u32 r = threadIdx.x; r < R; r += GTS_BLOCK) {
        const u8 v = p[r];
        out[r] = v;
        if (v > GTS_OP_MAX) local = GTS_FLAG_OP_TYPE_INVALID;
      }
      flags = block_or_u32(local);
    }
  } else {
    flags = GTS_FLAG_UNSUPPORTED_ENCODING;
  }
  if (threadIdx.x == 0) report_flags(status, summary, c.chunk, flags);
}

}  // namespace gts
