// gts_optype.cuh -- operation type column, encodings 6 and 7.
//
// Spec ("Operation encodings 6 and 7"): operation values are u8, 0 delete and
// 1 put; unknown values fail decoding.  Encoding 6 stores one byte repeated
// for the whole block (exactly 1 byte); encoding 7 stores exactly one byte per
// row.  Neither filters delete rows.
//
// Flags: BAD_LENGTH (len != 1, resp. len != rows) | OP_TYPE_INVALID (a value
// greater than 1).  other: UNSUPPORTED_ENCODING.  Chunks of at most
// GTS_WARP_MAX_ROWS rows go one per warp (decode_optype_chunk_warp, gts_warp.cuh).
#pragma once
#include "gts_types.cuh"
#include "gts_errors.cuh"
#include "gts_scan.cuh"
#include "gts_warp.cuh"

namespace gts {

// This thread's share of a chunk (rows t0, t0 + stride, ...: a block's threads, or a
// warp's lanes) and its flags; OP_TYPE_INVALID of encoding 7 only for its own rows
// (the caller ORs the threads' flags).
__device__ __forceinline__ u32 decode_optype_rows(const GtsChunk& c, const u8* __restrict__ p, u8* __restrict__ out,
                                                  u32 t0, u32 stride) {
  const u32 R = c.rows;
  if (c.encoding == GTS_ENC_OP_CONSTANT) {
    if (c.len != 1u) return GTS_FLAG_BAD_LENGTH;
    const u8 v = p[0];
    for (u32 r = t0; r < R; r += stride) out[r] = v;
    return v > GTS_OP_MAX ? GTS_FLAG_OP_TYPE_INVALID : 0u;
  }
  if (c.encoding == GTS_ENC_OP_RAW) {
    if (c.len != R) return GTS_FLAG_BAD_LENGTH;
    u32 local = 0;
    for (u32 r = t0; r < R; r += stride) {
      const u8 v = p[r];
      out[r] = v;
      if (v > GTS_OP_MAX) local = GTS_FLAG_OP_TYPE_INVALID;
    }
    return local;
  }
  return GTS_FLAG_UNSUPPORTED_ENCODING;
}

__device__ __forceinline__ void decode_optype_chunk(const GtsChunk* __restrict__ chunks, u32* status,
                                                    u64* summary) {
  const GtsChunk c = chunks[blockIdx.x];
  if (already_failed(status, c.chunk)) return;
  u32 flags;
  if (c.rows == 0u || c.rows > GTS_MAX_BLOCK_ROWS) {
    flags = GTS_FLAG_BAD_LENGTH;  // planner guarantees
  } else {
    flags = decode_optype_rows(c, (const u8*)c.src, (u8*)c.dst + c.out_row, threadIdx.x, GTS_BLOCK);
    if (c.encoding == GTS_ENC_OP_RAW && c.len == c.rows) flags = block_or_u32(flags);  // uniform: all threads
  }
  if (threadIdx.x == 0) report_flags(status, summary, c.chunk, flags);
}

// Operation chunks of at most GTS_WARP_MAX_ROWS rows, one per warp (the driver's routing).
__device__ __forceinline__ void decode_optype_chunk_warp(const GtsChunk* __restrict__ chunks, u32 n_chunks,
                                                         u32* status, u64* summary) {
  run_warp_chunk(chunks, n_chunks, status, summary, [](const GtsChunk& c) -> u32 {
    return warp_or_u32(decode_optype_rows(c, (const u8*)c.src, (u8*)c.dst + c.out_row, lane_id(), 32u));
  });
}

}  // namespace gts
