// gts_sequence.cuh -- sequence column, encodings 3 and 4.
//
// Spec ("Sequence encodings 3 and 4"): encoding 3 contains one u64, repeated
// for all rows (exactly 8 bytes).  Encoding 4 contains the first u64 (fixed 8
// bytes LE, DESIGN.md "Spec readings") followed by each wrapping u64
// difference from its predecessor, reinterpreted as i64 and written as a
// ZigZag varint.  Decode with wrapping addition; preserve all u64 bit
// patterns.
//
// Order ("Column payloads and row semantics"): sequences are nonincreasing
// within equal timestamps, including across blocks and parts.  The separate
// launch gts_check_sequence_order (after every sequence chunk is decoded, so
// no block reads rows another block is still writing) checks, per block, each
// row against the previous one -- row 0 against the previous block's last row
// when the block continues that block's series -- wherever the timestamps are
// equal: a greater sequence (u64) sets SEQUENCE_ORDER on the block's sequence
// chunk.  Only chunks that decoded cleanly are compared (SEQUENCE_ORDER bits,
// which this launch sets concurrently, aside), exactly as the CPU backend.
//
// Parallel decoding of encoding 4: thread r decodes varint r-1; one inclusive
// scan (wrapping add, row 0 contributing the first value) gives the column.
//
// Flags (as the CPU backend's reader, each alone): enc 3: len != 8 ->
// BAD_LENGTH.  enc 4: len < 8 -> BAD_LENGTH; then the varint stream:
// VARINT_OVERFLOW, VARINT_TRUNCATED, TRAILING_BYTES.  other:
// UNSUPPORTED_ENCODING.
#pragma once
#include "gts_types.cuh"
#include "gts_errors.cuh"
#include "gts_scan.cuh"
#include "gts_varint.cuh"

namespace gts {

__device__ __forceinline__ u32 seq_constant(const GtsChunk& c, const u8* __restrict__ p, u64* __restrict__ out) {
  if (c.len != 8u) return GTS_FLAG_BAD_LENGTH;
  const u64 v = load_u64_le(p);
  for (u32 r = threadIdx.x; r < c.rows; r += GTS_BLOCK) out[r] = v;
  return 0u;
}

__device__ __forceinline__ u32 seq_delta(const GtsChunk& c, const u8* __restrict__ p, u64* __restrict__ out,
                                         u32* __restrict__ ends) {
  __shared__ u32 s_bad;
  const u32 R = c.rows;
  const u32 len = c.len;
  if (len < 8u) return GTS_FLAG_BAD_LENGTH;
  const u64 first = load_u64_le(p);
  const u32 K = R - 1u;
  if (threadIdx.x == 0) s_bad = 0xffffffffu;
  __syncthreads();
  const u32 found = find_terminators(p, 8u, len, K, ends);
  __syncthreads();
  u64 carry = 0;
  for (u32 base = 0; base < R; base += GTS_BLOCK) {
    const u32 r = base + threadIdx.x;
    u64 x = 0;
    if (r == 0u) {
      x = first;
    } else if (r < R && r - 1u < found) {
      bool bad;
      const u64 v = varint_at(p, ends, 8u, r - 1u, bad);
      if (bad) atomicMin(&s_bad, r - 1u);
      x = zigzag_decode_u(v);
    }
    u64 tot;
    const u64 s = carry + block_scan_add_u64(x, &tot);
    carry += tot;
    if (r < R) out[r] = s;
  }
  __syncthreads();
  return varint_stream_flags(ends, 8u, len, K, found, s_bad);
}

__device__ __forceinline__ void decode_sequence_chunk(const GtsChunk* __restrict__ chunks, u32* status,
                                                      u64* summary) {
  __shared__ u32 s_ends[GTS_MAX_BLOCK_ROWS];
  const GtsChunk c = chunks[blockIdx.x];
  if (already_failed(status, c.chunk)) return;
  const u8* p = (const u8*)c.src;
  u64* out = (u64*)c.dst + c.out_row;
  u32 flags;
  if (c.rows == 0u || c.rows > GTS_MAX_BLOCK_ROWS) flags = GTS_FLAG_BAD_LENGTH;  // planner guarantees
  else if (c.encoding == GTS_ENC_SEQ_CONSTANT) flags = seq_constant(c, p, out);
  else if (c.encoding == GTS_ENC_SEQ_DELTA) flags = seq_delta(c, p, out, s_ends);
  else flags = GTS_FLAG_UNSUPPORTED_ENCODING;
  if (threadIdx.x == 0) report_flags(status, summary, c.chunk, flags);
}

__device__ __forceinline__ void check_sequence_order(const GtsSeqOrder& q, const i64* __restrict__ ts,
                                                     const u64* __restrict__ seq, u32* status, u64* summary) {
  const u32 other = ~GTS_FLAG_SEQUENCE_ORDER;
  // uniform over the CUDA block: the early returns keep barriers uniform
  if ((load_status(status, q.seq_chunk) & other) != 0u || (load_status(status, q.ts_chunk) & other) != 0u) return;
  const bool with_prev = q.prev_seq != GTS_NO_CHUNK && q.out_row > 0u &&
                         (load_status(status, q.prev_seq) & other) == 0u &&
                         (load_status(status, q.prev_ts) & other) == 0u;
  const i64* t = ts + q.out_row;
  const u64* s = seq + q.out_row;
  bool bad = false;
  for (u32 r = threadIdx.x; r < q.rows; r += GTS_BLOCK) {
    if (r > 0u) bad |= t[r] == t[r - 1] && s[r] > s[r - 1];
    else if (with_prev) bad |= t[0] == t[-1] && s[0] > s[-1];
  }
  if (bad) report_flags(status, summary, q.seq_chunk, GTS_FLAG_SEQUENCE_ORDER);
}

}  // namespace gts
