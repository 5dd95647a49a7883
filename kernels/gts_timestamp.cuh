// gts_timestamp.cuh -- timestamp column, encodings 1 and 2.
//
// Spec ("Timestamp encodings 1 and 2"):
//   Encoding 1 contains first: i64 and step: i64, exactly 16 bytes.  A
//   singleton uses step zero.  Reconstruct by checked addition; reject
//   overflow.  Zero step is valid for repeated timestamps.  (A negative step is
//   rejected: encoding 1 is only used for a nonnegative step.)
//   Encoding 2 contains the first i64 (fixed 8 bytes LE, docs/format.md "Our
//   readings"), followed for two or more rows by the first delta as a ZigZag
//   varint, then ZigZag varints of differences between deltas.  Deltas and
//   delta differences use wrapping arithmetic; reconstruct in the same way.
//   After either decoding, require nondecreasing signed timestamps and exact
//   agreement of first/last values with the descriptor.  Consume exactly the
//   recorded row count.
//
// Parallel decoding of encoding 2 (one CUDA block per chunk, rows in tiles of
// GTS_BLOCK): thread r decodes varint r-1 (boundaries from gts_varint.cuh),
// scan 1 (wrapping add) turns delta differences into deltas, scan 2 (wrapping
// add, seeded with the first value) turns deltas into timestamps.  Row r's
// predecessor is t[r] - delta[r-1], so the nondecreasing check needs no
// neighbour exchange.
//
// One warp per short chunk (decode_timestamp_chunk_warp, gts_warp.cuh): 32 rows
// per step, each lane one varint, the same two scans across the warp.
//
// Flags, exactly as the CPU backend's sequential reader (decode/cpu/timestamp.py) sets
// them (both kernels); "->" means that flag alone, the reader stops there:
//   enc 1: len != 16 -> BAD_LENGTH; step < 0 -> NEGATIVE_STEP; overflow ->
//          TIMESTAMP_OVERFLOW; else TIMESTAMP_BOUNDS if first/last disagree.
//   enc 2: len < 8 -> BAD_LENGTH; a bad varint -> VARINT_OVERFLOW or
//          VARINT_TRUNCATED; else the OR of TIMESTAMP_DECREASING,
//          TRAILING_BYTES and TIMESTAMP_BOUNDS.
//   other: UNSUPPORTED_ENCODING
#pragma once
#include "gts_types.cuh"
#include "gts_errors.cuh"
#include "gts_scan.cuh"
#include "gts_varint.cuh"
#include "gts_warp.cuh"

#define GTS_I64_MAX 0x7fffffffffffffffull

namespace gts {

// Rows t0, t0 + stride, ... are this thread's (a block's threads, or a warp's lanes).
__device__ __forceinline__ u32 ts_constant_step(const GtsChunk& c, const u8* __restrict__ p,
                                                i64* __restrict__ out, u32 t0, u32 stride) {
  const u32 R = c.rows;
  if (c.len != 16u) return GTS_FLAG_BAD_LENGTH;
  const u64 first = load_u64_le(p);
  const u64 step = load_u64_le(p + 8);
  if ((i64)step < 0) return GTS_FLAG_NEGATIVE_STEP;
  if (R > 1u) {
    const u64 headroom = GTS_I64_MAX - first;  // exact: I64_MAX - first lies in [0, 2^64)
    if (step > headroom / (u64)(R - 1u)) return GTS_FLAG_TIMESTAMP_OVERFLOW;
  }
  for (u32 r = t0; r < R; r += stride) out[r] = (i64)(first + (u64)r * step);
  const i64 last = (i64)(first + (u64)(R - 1u) * step);
  return ((i64)first != c.min_ts || last != c.max_ts) ? GTS_FLAG_TIMESTAMP_BOUNDS : 0u;
}

__device__ __forceinline__ u32 ts_delta_of_delta(const GtsChunk& c, const u8* __restrict__ p,
                                                 i64* __restrict__ out, u32* __restrict__ ends) {
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

  u64 carry_d = 0, carry_t = first;
  u32 local = 0;
  for (u32 base = 0; base < R; base += GTS_BLOCK) {
    const u32 r = base + threadIdx.x;
    const bool row = r < R;
    u64 x = 0;
    if (row && r >= 1u && r - 1u < found) {
      bool bad;
      const u64 v = varint_at(p, ends, 8u, r - 1u, bad);
      if (bad) atomicMin(&s_bad, r - 1u);
      x = zigzag_decode_u(v);
    }
    u64 tot;
    const u64 d = carry_d + block_scan_add_u64(x, &tot);  // delta[r-1]
    carry_d += tot;
    const u64 e = (row && r >= 1u) ? d : 0ull;
    const u64 t = carry_t + block_scan_add_u64(e, &tot);  // timestamp[r]
    carry_t += tot;
    if (row) {
      out[r] = (i64)t;
      if (r >= 1u && (i64)(t - e) > (i64)t) local |= GTS_FLAG_TIMESTAMP_DECREASING;
      if (r == 0u && (i64)t != c.min_ts) local |= GTS_FLAG_TIMESTAMP_BOUNDS;
      if (r == R - 1u && (i64)t != c.max_ts) local |= GTS_FLAG_TIMESTAMP_BOUNDS;
    }
  }
  const u32 post = block_or_u32(local);  // its barriers also publish s_bad
  const u32 vflags = varint_stream_flags(ends, 8u, len, K, found, s_bad);
  // a bad varint stops the reader; trailing bytes are found after the values
  if (vflags & (GTS_FLAG_VARINT_OVERFLOW | GTS_FLAG_VARINT_TRUNCATED)) return vflags;
  return vflags | post;
}

// One CUDA block per timestamp chunk of the batch.
__device__ __forceinline__ void decode_timestamp_chunk(const GtsChunk* __restrict__ chunks, u32* status,
                                                       u64* summary) {
  __shared__ u32 s_ends[GTS_MAX_BLOCK_ROWS];
  const GtsChunk c = chunks[blockIdx.x];
  if (already_failed(status, c.chunk)) return;
  const u8* p = (const u8*)c.src;
  i64* out = (i64*)c.dst + c.out_row;
  u32 flags;
  if (c.rows == 0u || c.rows > GTS_MAX_BLOCK_ROWS) flags = GTS_FLAG_BAD_LENGTH;  // planner guarantees
  else if (c.encoding == GTS_ENC_TS_CONSTANT_STEP) flags = ts_constant_step(c, p, out, threadIdx.x, GTS_BLOCK);
  else if (c.encoding == GTS_ENC_TS_DELTA_OF_DELTA) flags = ts_delta_of_delta(c, p, out, s_ends);
  else flags = GTS_FLAG_UNSUPPORTED_ENCODING;
  if (threadIdx.x == 0) report_flags(status, summary, c.chunk, flags);
}

// --- one warp per chunk (gts_warp.cuh) -----------------------------------------------

__device__ __forceinline__ u32 ts_delta_of_delta_warp(const GtsChunk& c, const u8* __restrict__ p,
                                                      i64* __restrict__ out) {
  const u32 R = c.rows;
  if (c.len < 8u) return GTS_FLAG_BAD_LENGTH;
  const u64 first = load_u64_le(p);
  const u32 lane = lane_id();
  u32 local = 0;
  if (lane == 0u) {
    out[0] = (i64)first;
    if ((i64)first != c.min_ts) local |= GTS_FLAG_TIMESTAMP_BOUNDS;
    if (R == 1u && (i64)first != c.max_ts) local |= GTS_FLAG_TIMESTAMP_BOUNDS;
  }
  WarpVarints vs;
  vs.init(p, 8u, c.len, R - 1u);
  u64 carry_d = 0, carry_t = first;
  for (;;) {
    u64 v;
    u32 i;
    bool mine;
    if (vs.next_group(v, i, mine) == 0u) break;
    const u64 d = warp_carried_scan(mine ? zigzag_decode_u(v) : 0ull, carry_d, AddOp());  // delta[i]
    const u64 e = mine ? d : 0ull;
    const u64 t = warp_carried_scan(e, carry_t, AddOp());  // timestamp[i + 1]
    if (mine) {
      out[i + 1u] = (i64)t;
      if ((i64)(t - e) > (i64)t) local |= GTS_FLAG_TIMESTAMP_DECREASING;
      if (i + 1u == R - 1u && (i64)t != c.max_ts) local |= GTS_FLAG_TIMESTAMP_BOUNDS;
    }
  }
  for (u32 r = vs.found + 1u + lane; r < R; r += 32u) out[r] = 0;  // rows a bad stream did not reach
  const u32 post = warp_or_u32(local);
  const u32 vflags = vs.flags();
  // a bad varint stops the reader; trailing bytes are found after the values
  if (vflags & (GTS_FLAG_VARINT_OVERFLOW | GTS_FLAG_VARINT_TRUNCATED)) return vflags;
  return vflags | post;
}

// Timestamp chunks of at most GTS_WARP_MAX_ROWS rows, one per warp (the driver's routing).
__device__ __forceinline__ void decode_timestamp_chunk_warp(const GtsChunk* __restrict__ chunks, u32 n_chunks,
                                                            u32* status, u64* summary) {
  run_warp_chunk(chunks, n_chunks, status, summary, [](const GtsChunk& c) -> u32 {
    const u8* p = (const u8*)c.src;
    i64* out = (i64*)c.dst + c.out_row;
    if (c.encoding == GTS_ENC_TS_CONSTANT_STEP) return ts_constant_step(c, p, out, lane_id(), 32u);
    if (c.encoding == GTS_ENC_TS_DELTA_OF_DELTA) return ts_delta_of_delta_warp(c, p, out);
    return GTS_FLAG_UNSUPPORTED_ENCODING;
  });
}

}  // namespace gts
