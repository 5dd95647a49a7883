// gts_float.cuh -- nullable Float64 fields, encoding 5, and synthesized nulls.
//
// Spec ("Nullable Float64 encoding 5"):
//   validity_kind <u8>                  0 = all valid, 1 = bitmap
//   validity <ceil(row_count/8) bytes>  only for kind 1
//   first_non_null_bits <u64>
//   xor_deltas <one uvarint per remaining non-null value>
// Bitmap bit i % 8 in byte i / 8 is one for a present value; unused high bits
// of the final byte are zero.  Kind 0 requires a zero null count.  Kind 1
// requires 0 < null_count < row_count and an exactly matching count of unset
// in-range bits.  Non-null values are processed in row order: the first
// IEEE-754 bit pattern as u64, then varints of the XOR with the previous
// non-null bit pattern (nulls do not reset it).  Decode exactly
// row_count - null_count values and scatter according to validity.  Preserve
// all bits.  Null is not NaN.
//
// Output (Arrow layout): values float64 (as u64 bit patterns; null rows get
// +0.0, the CPU backend's convention), validity as uint32 words with bit i =
// output row i, LSB first.  A chunk's rows start at an arbitrary bit offset,
// so each warp ORs its 32-bit ballot of present rows into the two words it
// straddles (atomicOr; the mask is zeroed before the launch).
//
// Parallel decoding (one CUDA block per chunk, rows in tiles of GTS_BLOCK):
// row r reads its validity bit; a block scan of the bits gives its rank j
// among present rows (the popcount rank); a present row with j > 0 decodes
// varint j - 1; a prefix-XOR scan over the tile (null rows contribute 0, the
// first present row contributes first_non_null_bits) gives every present
// row's bit pattern, written straight to its output row.
//
// One warp per short chunk (decode_float_chunk_warp; at most GTS_WARP_MAX_ROWS
// rows, gts_warp.cuh): lane w holds validity word w (rows 32w..32w+31) and a
// warp scan of their popcounts gives each word's first rank, so the row of the
// j-th present value is a binary search over the lanes plus select32 in its
// word.  The varints come 32 at a time (one per lane), a warp prefix-XOR gives
// their bit patterns, each lane writes its value's row; then every row not
// written (null, or a present row a bad stream did not reach) gets +0.0, and
// the words go into the mask.  Rows written once each: no lane reads or writes
// another's row.
//
// Flags, exactly as the CPU backend's sequential reader (decode/cpu/floats.py) sets
// them (both kernels), each alone (the reader stops at the first): empty chunk ->
// BAD_LENGTH; kind > 1 -> VALIDITY_KIND; kind 0 with nulls, or kind 1 with a
// null count outside (0, rows) -> NULL_COUNT_MISMATCH; shorter than kind +
// bitmap + first value -> BAD_LENGTH; set padding bits -> VALIDITY_PADDING;
// unset in-range bits != null count -> NULL_COUNT_MISMATCH; then the varint
// stream: VARINT_OVERFLOW, VARINT_TRUNCATED, TRAILING_BYTES.  Unknown
// encodings: UNSUPPORTED_ENCODING.
//
// GTS_ENC_NULL_FILL (internal): a projected field omitted in a block; its rows
// get +0.0 and stay null (the mask is not touched).
#pragma once
#include "gts_types.cuh"
#include "gts_errors.cuh"
#include "gts_scan.cuh"
#include "gts_varint.cuh"
#include "gts_warp.cuh"

namespace gts {

// ORs 32 validity bits (bit k = row g0 + k) into an Arrow-layout word array.
__device__ __forceinline__ void or_validity_bits(u32* mask, u64 g0, u32 bits) {
  if (bits == 0u) return;
  const u64 w = g0 >> 5;
  const u32 sh = (u32)(g0 & 31u);
  atomicOr(mask + w, bits << sh);
  if (sh != 0u) {
    const u32 hi = bits >> (32u - sh);
    if (hi) atomicOr(mask + w + 1, hi);
  }
}

// The checks before the values (kind, null count, lengths): their flag, or 0 with
// the validity kind, the bitmap's bytes and the first value's position.
__device__ __forceinline__ u32 f64_prefix(const GtsChunk& c, const u8* __restrict__ p, u32& kind, u32& nb, u32& p0) {
  const u32 R = c.rows;
  const u32 nc = c.null_count;
  if (c.len < 1u) return GTS_FLAG_BAD_LENGTH;
  kind = p[0];
  if (kind > GTS_VALIDITY_BITMAP) return GTS_FLAG_VALIDITY_KIND;
  if (kind == GTS_VALIDITY_ALL_VALID && nc != 0u) return GTS_FLAG_NULL_COUNT_MISMATCH;
  if (kind == GTS_VALIDITY_BITMAP && !(nc > 0u && nc < R)) return GTS_FLAG_NULL_COUNT_MISMATCH;
  nb = kind == GTS_VALIDITY_BITMAP ? (R + 7u) / 8u : 0u;
  p0 = 1u + nb;
  return (u64)c.len < (u64)p0 + 8u ? GTS_FLAG_BAD_LENGTH : 0u;
}

// The bitmap's checks, after the values: unused high bits of its last byte set, or
// unset in-range bits (present: the set ones) other than the null count.
__device__ __forceinline__ u32 f64_bitmap_flags(const GtsChunk& c, const u8* __restrict__ bitmap, u32 kind, u32 nb,
                                                u32 present) {
  if (kind != GTS_VALIDITY_BITMAP) return 0u;
  const u32 used = c.rows & 7u;
  if (used != 0u && (bitmap[nb - 1u] >> used) != 0u) return GTS_FLAG_VALIDITY_PADDING;
  return c.rows - present != c.null_count ? GTS_FLAG_NULL_COUNT_MISMATCH : 0u;
}

__device__ __forceinline__ u32 f64_xor(const GtsChunk& c, const u8* __restrict__ p, u64* __restrict__ out,
                                       u32* __restrict__ mask, u32* __restrict__ ends) {
  __shared__ u32 s_bad;
  const u32 R = c.rows;
  const u32 len = c.len;
  const u32 nc = c.null_count;
  u32 kind = 0, nb = 0, p0 = 0;
  const u32 pre = f64_prefix(c, p, kind, nb, p0);
  if (pre != 0u) return pre;
  const u8* bitmap = p + 1;
  const u64 first = load_u64_le(p + p0);
  const u32 vp0 = p0 + 8u;
  const u32 K = R - nc - 1u;  // varints after the first value; nc < R here

  if (threadIdx.x == 0) s_bad = 0xffffffffu;
  __syncthreads();
  const u32 found = find_terminators(p, vp0, len, K, ends);
  __syncthreads();

  const u32 lane = threadIdx.x & 31u;
  const u32 warp = threadIdx.x >> 5;
  u32 carry_rank = 0;
  u64 carry_x = 0;
  for (u32 base = 0; base < R; base += GTS_BLOCK) {
    const u32 r = base + threadIdx.x;
    const bool row = r < R;
    const bool valid = row && (kind == GTS_VALIDITY_ALL_VALID || ((bitmap[r >> 3] >> (r & 7u)) & 1u));
    u32 tot_r;
    const u32 j = carry_rank + block_scan_add_u32(valid ? 1u : 0u, &tot_r) - (valid ? 1u : 0u);
    carry_rank += tot_r;
    u64 x = 0;
    if (valid) {
      if (j == 0u) {
        x = first;
      } else if (j - 1u < found) {
        bool bad;
        x = varint_at(p, ends, vp0, j - 1u, bad);
        if (bad) atomicMin(&s_bad, j - 1u);
      }
    }
    u64 tot_x;
    const u64 bits = carry_x ^ block_scan_xor_u64(x, &tot_x);
    carry_x ^= tot_x;
    if (row) out[r] = valid ? bits : 0ull;
    const u32 bal = __ballot_sync(GTS_FULL_MASK, valid);
    if (lane == 0u && mask != nullptr) or_validity_bits(mask, c.out_row + base + 32u * warp, bal);
  }
  __syncthreads();  // publishes s_bad

  const u32 vflags = f64_bitmap_flags(c, bitmap, kind, nb, carry_rank);
  return vflags != 0u ? vflags : varint_stream_flags(ends, vp0, len, K, found, s_bad);
}

__device__ __forceinline__ void decode_float_chunk(const GtsChunk* __restrict__ chunks, u32* status,
                                                   u64* summary) {
  __shared__ u32 s_ends[GTS_MAX_BLOCK_ROWS];
  const GtsChunk c = chunks[blockIdx.x];
  if (already_failed(status, c.chunk)) return;
  u64* out = (u64*)c.dst + c.out_row;
  u32 flags;
  if (c.rows == 0u || c.rows > GTS_MAX_BLOCK_ROWS) {
    flags = GTS_FLAG_BAD_LENGTH;  // planner guarantees
  } else if (c.encoding == GTS_ENC_NULL_FILL) {
    for (u32 r = threadIdx.x; r < c.rows; r += GTS_BLOCK) out[r] = 0ull;
    flags = 0u;
  } else if (c.encoding == GTS_ENC_F64_XOR) {
    flags = f64_xor(c, (const u8*)c.src, out, (u32*)c.mask, s_ends);
  } else {
    flags = GTS_FLAG_UNSUPPORTED_ENCODING;
  }
  if (threadIdx.x == 0) report_flags(status, summary, c.chunk, flags);
}

// --- one warp per chunk (gts_warp.cuh) -----------------------------------------------

// Row of the j-th present row (0 when j >= present), lane w holding validity word
// w and rank0, the present rows before it: the last word whose rank0 is <= j
// (a binary search over the lanes), then select32 in that word.
__device__ __forceinline__ u32 present_row(u32 word, u32 rank0, u32 n_words, u32 present, u32 j) {
  u32 w = 0;
  for (u32 s = 16u; s > 0u; s >>= 1) {
    const u32 r = __shfl_sync(GTS_FULL_MASK, rank0, (w + s) & 31u);
    if (w + s < n_words && r <= j) w += s;
  }
  const u32 ww = __shfl_sync(GTS_FULL_MASK, word, w);
  const u32 rw = __shfl_sync(GTS_FULL_MASK, rank0, w);
  return j < present ? 32u * w + select32(ww, j - rw) : 0u;
}

__device__ __forceinline__ u32 f64_xor_warp(const GtsChunk& c, const u8* __restrict__ p, u64* __restrict__ out,
                                            u32* __restrict__ mask) {
  const u32 R = c.rows;
  const u32 lane = lane_id();
  u32 kind = 0, nb = 0, p0 = 0;
  const u32 pre = f64_prefix(c, p, kind, nb, p0);
  if (pre != 0u) return pre;
  const u8* bitmap = p + 1;
  const u64 first = load_u64_le(p + p0);

  // validity word of this lane: rows [32 lane, 32 lane + 32) (R <= 1024: every row has a lane)
  const u32 n_words = (R + 31u) / 32u;
  const u32 row0 = 32u * lane;
  u32 word = 0;
  if (row0 < R) {
    if (kind == GTS_VALIDITY_ALL_VALID) {
      word = 0xffffffffu;
    } else {
      for (u32 k = 0; k < 4u && 4u * lane + k < nb; ++k) word |= (u32)bitmap[4u * lane + k] << (8u * k);
    }
    if (R - row0 < 32u) word &= (1u << (R - row0)) - 1u;  // padding bits are not rows
  }
  const u32 count = __popc(word);
  const u32 rank0 = warp_inclusive_scan(count, AddOp()) - count;  // present rows before this word
  const u32 present = __shfl_sync(GTS_FULL_MASK, rank0 + count, 31);

  const u32 r_first = present_row(word, rank0, n_words, present, 0u);
  if (lane == 0u && present > 0u) out[r_first] = first;
  WarpVarints vs;
  vs.init(p, p0 + 8u, c.len, R - c.null_count - 1u);
  u64 carry = first;
  for (;;) {
    u64 v;
    u32 i;
    bool mine;
    if (vs.next_group(v, i, mine) == 0u) break;
    const u64 bits = warp_carried_scan(mine ? v : 0ull, carry, XorOp());  // value i + 1
    const u32 r = present_row(word, rank0, n_words, present, mine ? i + 1u : 0u);
    if (mine && i + 1u < present) out[r] = bits;
  }
  // the rows no value was written to: null rows, and present rows of rank > found (a bad stream)
  const u32 written = vs.found + 1u;
  for (u32 w = 0; w < n_words; ++w) {
    const u32 r = 32u * w + lane;
    const u32 ww = __shfl_sync(GTS_FULL_MASK, word, w);
    const u32 rank = __shfl_sync(GTS_FULL_MASK, rank0, w) + __popc(ww & ((1u << lane) - 1u));
    const bool valid = (ww >> lane) & 1u;
    if (r < R && (!valid || rank >= written)) out[r] = 0ull;
  }
  if (mask != nullptr && word != 0u) or_validity_bits(mask, c.out_row + row0, word);
  const u32 vflags = f64_bitmap_flags(c, bitmap, kind, nb, present);
  return vflags != 0u ? vflags : vs.flags();
}

// Field chunks (and null fills) of at most GTS_WARP_MAX_ROWS rows, one per warp (the driver's routing).
__device__ __forceinline__ void decode_float_chunk_warp(const GtsChunk* __restrict__ chunks, u32 n_chunks,
                                                        u32* status, u64* summary) {
  run_warp_chunk(chunks, n_chunks, status, summary, [](const GtsChunk& c) -> u32 {
    u64* out = (u64*)c.dst + c.out_row;
    if (c.encoding == GTS_ENC_NULL_FILL) {
      for (u32 r = lane_id(); r < c.rows; r += 32u) out[r] = 0ull;
      return 0u;
    }
    if (c.encoding == GTS_ENC_F64_XOR) return f64_xor_warp(c, (const u8*)c.src, out, (u32*)c.mask);
    return GTS_FLAG_UNSUPPORTED_ENCODING;
  });
}

}  // namespace gts
