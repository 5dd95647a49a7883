// gts_sequence.cuh -- sequence column, encodings 3 and 4.
//
// Spec ("Sequence encodings 3 and 4"): encoding 3 contains one u64, repeated
// for all rows (exactly 8 bytes).  Encoding 4 contains the first u64 (fixed 8
// bytes LE, docs/format.md "Our readings") followed by each wrapping u64
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
// One warp per short chunk (decode_sequence_chunk_warp, gts_warp.cuh): 32 rows
// per step, each lane one varint, the same scan across the warp.
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
#include "gts_warp.cuh"

namespace gts {

// Rows t0, t0 + stride, ... are this thread's (a block's threads, or a warp's lanes).
__device__ __forceinline__ u32 seq_constant(const GtsChunk& c, const u8* __restrict__ p, u64* __restrict__ out,
                                            u32 t0, u32 stride) {
  if (c.len != 8u) return GTS_FLAG_BAD_LENGTH;
  const u64 v = load_u64_le(p);
  for (u32 r = t0; r < c.rows; r += stride) out[r] = v;
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
  else if (c.encoding == GTS_ENC_SEQ_CONSTANT) flags = seq_constant(c, p, out, threadIdx.x, GTS_BLOCK);
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

// --- one warp per chunk (gts_warp.cuh) -----------------------------------------------

__device__ __forceinline__ u32 seq_delta_warp(const GtsChunk& c, const u8* __restrict__ p, u64* __restrict__ out) {
  const u32 R = c.rows;
  if (c.len < 8u) return GTS_FLAG_BAD_LENGTH;
  const u64 first = load_u64_le(p);
  if (lane_id() == 0u) out[0] = first;
  WarpVarints vs;
  vs.init(p, 8u, c.len, R - 1u);
  u64 carry = first;
  for (;;) {
    u64 v;
    u32 i;
    bool mine;
    if (vs.next_group(v, i, mine) == 0u) break;
    const u64 s = warp_carried_scan(mine ? zigzag_decode_u(v) : 0ull, carry, AddOp());  // sequence[i + 1]
    if (mine) out[i + 1u] = s;
  }
  for (u32 r = vs.found + 1u + lane_id(); r < R; r += 32u) out[r] = 0;  // rows a bad stream did not reach
  return vs.flags();
}

// Sequence chunks of at most GTS_WARP_MAX_ROWS rows, one per warp (the driver's routing).
__device__ __forceinline__ void decode_sequence_chunk_warp(const GtsChunk* __restrict__ chunks, u32 n_chunks,
                                                           u32* status, u64* summary) {
  run_warp_chunk(chunks, n_chunks, status, summary, [](const GtsChunk& c) -> u32 {
    const u8* p = (const u8*)c.src;
    u64* out = (u64*)c.dst + c.out_row;
    if (c.encoding == GTS_ENC_SEQ_CONSTANT) return seq_constant(c, p, out, lane_id(), 32u);
    if (c.encoding == GTS_ENC_SEQ_DELTA) return seq_delta_warp(c, p, out);
    return GTS_FLAG_UNSUPPORTED_ENCODING;
  });
}

}  // namespace gts
