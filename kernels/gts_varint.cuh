// gts_varint.cuh -- LEB128 varints and ZigZag, decoded by a whole CUDA block.
//
// Spec ("Encodings and compression"): unsigned varints are base-128 LEB128,
// seven data bits per byte, high bit = continuation.  Readers reject
// truncation, more than ten bytes, a tenth byte greater than 1, and trailing
// bytes after the expected values.  ZigZag maps signed x to
// ((x as u64) << 1) ^ ((x >> 63) as u64); decoding reverses it.  Non-shortest
// varints are accepted (docs/format.md, "Our readings of the open points").
//
// Parallel decoding.  A varint ends at a byte whose continuation bit is clear
// (a "terminator").  find_terminators() sweeps the byte range in tiles of
// GTS_BLOCK * 32 bytes: a warp ballot over the continuation bits of 32
// consecutive bytes gives a terminator mask, a block scan of the masks'
// popcounts gives every terminator its varint index i, and ends[i] records its
// position for the first K varints.  Varint i then spans
// (ends[i-1], ends[i]] and any thread can decode it independently.
//
// Error classification is that of a sequential reader, which stops at the
// first failing varint i* (lowest index):
//   * i* has a terminator but is longer than ten bytes, or its tenth byte is
//     greater than one                            -> VARINT_OVERFLOW
//   * i* has no terminator (the bytes run out):  ten or more bytes remain
//     (the tenth, a continuation byte, is > 1)    -> VARINT_OVERFLOW
//     fewer than ten bytes remain                 -> VARINT_TRUNCATED
//   * all K varints are fine but bytes follow the last one -> TRAILING_BYTES
// Nothing outside [0, len) is ever read, whatever the bytes claim.
#pragma once
#include "gts_types.cuh"
#include "gts_errors.cuh"
#include "gts_scan.cuh"

namespace gts {

__device__ __forceinline__ i64 zigzag_decode(u64 v) { return (i64)(v >> 1) ^ -(i64)(v & 1ull); }
__device__ __forceinline__ u64 zigzag_decode_u(u64 v) { return (v >> 1) ^ (0ull - (v & 1ull)); }

// Bytes covered by one sweep of the block: each warp covers 32 x 32 bytes.
#define GTS_VARINT_TILE (GTS_BLOCK * 32u)

// Records ends[i] for the first min(K, terminators) varints in p[p0, len).
// Returns that count (uniform across the block).  ends must hold K entries;
// the caller synchronizes before reading them.
//
// Per sweep, warp w owns the 1,024 bytes at base + 1024 w.  In step j its
// lanes read 32 consecutive bytes (coalesced) and __ballot_sync over
// "continuation bit clear" gives the terminator mask of those 32 bytes; lane
// j keeps it.  Lanes (in block order) then own consecutive 32-byte groups in
// stream order, so a block scan of popcounts numbers every terminator.
__device__ __forceinline__ u32 find_terminators(const u8* __restrict__ p, u32 p0, u32 len, u32 K,
                                                u32* __restrict__ ends) {
  const u32 lane = threadIdx.x & 31u;
  const u32 warp = threadIdx.x >> 5;
  u32 found = 0;
  for (u32 base = p0; base < len && found < K; base += GTS_VARINT_TILE) {
    const u32 seg = base + warp * 1024u;
    u32 mask = 0;
    for (u32 j = 0; j < 32u; ++j) {
      const u32 row = seg + 32u * j;  // uniform within the warp
      if (row >= len) break;
      const u32 pos = row + lane;
      const bool term = pos < len && p[pos] < 0x80u;
      const u32 m = __ballot_sync(GTS_FULL_MASK, term);
      if (lane == j) mask = m;
    }
    const u32 my = seg + 32u * lane;  // first byte of this lane's group
    const u32 cnt = __popc(mask);
    u32 total;
    const u32 incl = block_scan_add_u32(cnt, &total);
    u32 idx = found + incl - cnt;
    while (mask) {
      const u32 k = __ffs(mask) - 1;
      mask &= mask - 1;
      if (idx < K) ends[idx] = my + k;
      ++idx;
    }
    found += total;
  }
  return found < K ? found : K;
}

// Start of varint i (requires i <= number of recorded ends).
__device__ __forceinline__ u32 varint_start(const u32* ends, u32 p0, u32 i) {
  return i == 0 ? p0 : ends[i - 1] + 1;
}

// Decodes varint i, 0 <= i < found.  bad is set when it is longer than ten
// bytes or its tenth byte is greater than one.  Reads at most ten bytes, all
// inside [start, ends[i]] which lies inside [p0, len).
__device__ __forceinline__ u64 varint_at(const u8* __restrict__ p, const u32* ends, u32 p0, u32 i,
                                         bool& bad) {
  const u32 s = varint_start(ends, p0, i);
  const u32 e = ends[i];
  const u32 L = e - s + 1;
  bad = L > GTS_MAX_VARINT_BYTES || (L == GTS_MAX_VARINT_BYTES && p[e] > 1u);
  const u32 n = L < GTS_MAX_VARINT_BYTES ? L : GTS_MAX_VARINT_BYTES;
  u64 v = 0;
  for (u32 k = 0; k < n; ++k) v |= (u64)(p[s + k] & 0x7fu) << (7u * k);
  return v;
}

// Flags of a varint stream of K expected values in p[p0, len), given the
// recorded ends (found of them) and the lowest index of a bad varint among
// them (0xffffffff when none).  Call after a barrier; any thread may call.
__device__ __forceinline__ u32 varint_stream_flags(const u32* ends, u32 p0, u32 len, u32 K, u32 found,
                                                   u32 first_bad) {
  if (first_bad != 0xffffffffu && first_bad < found) return GTS_FLAG_VARINT_OVERFLOW;
  if (found < K) {
    const u32 s = varint_start(ends, p0, found);
    return (len - s) >= GTS_MAX_VARINT_BYTES ? GTS_FLAG_VARINT_OVERFLOW : GTS_FLAG_VARINT_TRUNCATED;
  }
  const u32 end = K == 0 ? p0 : ends[K - 1] + 1;
  return end != len ? GTS_FLAG_TRAILING_BYTES : 0u;
}

}  // namespace gts
