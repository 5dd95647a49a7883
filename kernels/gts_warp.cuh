// gts_warp.cuh -- one warp per short chunk: varints 32 at a time, in registers.
//
// The per-chunk kernels give every chunk a CUDA block of GTS_BLOCK threads and
// 32 KiB of shared memory (s_ends).  Real SSTs hold tens of thousands of series
// of a few hundred rows each: such a chunk leaves most of its block idle, and
// the shared memory bounds an SM to 7 chunks in flight.  The *_warp kernels
// (gts_decode_*_warp, one per column kind) take chunks of at most
// GTS_WARP_MAX_ROWS rows, GTS_WARPS chunks per CUDA block, one per warp:
// registers only, no shared memory and no block barrier (a block's warps never
// wait for each other), warp intrinsics only.  Every intrinsic is called by all
// 32 lanes of the warp with the full mask (loop trip counts are warp-uniform).
//
// Varints (WarpVarints): the lanes read 32 consecutive bytes; a ballot of
// "continuation bit clear" marks the varint ends among them.  Lane k of a
// group takes the k-th end not yet taken (select32 of the warp-uniform mask),
// over as many 32-byte windows as it takes to fill 32 lanes, reach the K-th
// varint or run out of bytes.  Lane k's varint starts after lane k-1's end (a
// shuffle; lane 0 after the previous group's last end), so each lane decodes
// its own varint, and a warp scan over the lanes (stream order) turns deltas,
// delta differences or XOR deltas into values 32 rows at a time.
//
// Error classification is that of a sequential reader, as varint_stream_flags
// (gts_varint.cuh) gives it from the recorded ends: found (ends taken, at most
// K), the lowest index of a bad varint (longer than ten bytes, or a tenth byte
// above 1) and the end of the last one taken are all it needs (flags()).
// Nothing outside [p0, len) is read.
#pragma once
#include "gts_types.cuh"
#include "gts_errors.cuh"
#include "gts_scan.cuh"
#include "gts_varint.cuh"

// The most rows a warp kernel takes: the validity bits of a chunk fit one
// 32-bit word per lane (gts_float.cuh's f64_xor_warp).  The driver sends longer
// chunks to the block kernels (gtsamples.decode.gpu.WARP_MAX_ROWS, at most this).
#define GTS_WARP_MAX_ROWS 1024u

namespace gts {

__device__ __forceinline__ u32 lane_id() { return threadIdx.x & 31u; }

// Chunk of this warp in a *_warp launch: GTS_WARPS consecutive chunks per block.
__device__ __forceinline__ u32 warp_chunk_index() { return blockIdx.x * GTS_WARPS + (threadIdx.x >> 5); }

// The entry of every *_warp kernel: this warp's chunk (none past n_chunks; one
// already failed is skipped), decode(c) -> its flags, reported by lane 0.
template <typename Decode>
__device__ __forceinline__ void run_warp_chunk(const GtsChunk* __restrict__ chunks, u32 n_chunks, u32* status,
                                               u64* summary, Decode decode) {
  const u32 ci = warp_chunk_index();
  if (ci >= n_chunks) return;  // uniform over the warp
  const GtsChunk c = chunks[ci];
  if (already_failed(status, c.chunk)) return;
  // (the rows: the driver's routing guarantees them)
  const u32 flags = (c.rows == 0u || c.rows > GTS_WARP_MAX_ROWS) ? GTS_FLAG_BAD_LENGTH : decode(c);
  if (lane_id() == 0u) report_flags(status, summary, c.chunk, flags);
}

// Bit position of the k-th (0-based) set bit of x; requires k < popc(x).
__device__ __forceinline__ u32 select32(u32 x, u32 k) {
  u32 pos = 0;
  for (u32 s = 16u; s > 0u; s >>= 1) {
    const u32 below = __popc(x & ((1u << s) - 1u));
    if (k >= below) {
      k -= below;
      x >>= s;
      pos += s;
    }
  }
  return pos;
}

// OR of v over the warp, in every lane.
__device__ __forceinline__ u32 warp_or_u32(u32 v) {
#pragma unroll
  for (u32 d = 16u; d > 0u; d >>= 1) v |= __shfl_down_sync(GTS_FULL_MASK, v, d);
  return __shfl_sync(GTS_FULL_MASK, v, 0);
}

struct WarpVarints {
  const u8* p;
  u32 len;
  u32 K;          // varints expected
  u32 found;      // varint ends taken so far (at most K)
  u32 next;       // first byte of the next varint: after the last end taken (p0 before any)
  u32 base;       // the current 32-byte window
  u32 pending;    // its varint ends not taken yet (warp-uniform)
  u32 first_bad;  // lowest index of a bad varint taken, 0xffffffff when none

  __device__ __forceinline__ u32 window_ends(u32 b) const {
    const u32 pos = b + lane_id();
    return __ballot_sync(GTS_FULL_MASK, pos < len && p[pos] < 0x80u);
  }

  __device__ __forceinline__ void init(const u8* __restrict__ bytes, u32 p0, u32 n_bytes, u32 k) {
    p = bytes;
    len = n_bytes;
    K = k;
    found = 0;
    next = p0;
    base = p0;
    pending = window_ends(p0);
    first_bad = 0xffffffffu;
  }

  // Takes the next group of at most 32 varints and returns how many (uniform):
  // lane k < n gets varint found + k (its index in *idx) in v, `mine` set.
  __device__ __forceinline__ u32 next_group(u64& v, u32& idx, bool& mine) {
    const u32 lane = lane_id();
    const u32 want = K - found < 32u ? K - found : 32u;
    u32 have = 0;
    u32 end = 0;
    while (have < want) {
      if (pending == 0u) {
        if (base + 32u >= len) break;
        base += 32u;
        pending = window_ends(base);
        continue;
      }
      const u32 c = __popc(pending);
      const u32 take = c < want - have ? c : want - have;
      if (lane >= have && lane < have + take) end = base + select32(pending, lane - have);
      // drop the taken ends (the lowest `take`; a higher one remains, so the shift is < 32)
      pending = take == c ? 0u : pending & ~((2u << select32(pending, take - 1u)) - 1u);
      have += take;
    }
    const u32 before = __shfl_up_sync(GTS_FULL_MASK, end, 1);
    const u32 start = lane == 0u ? next : before + 1u;
    mine = lane < have;
    idx = found + lane;
    v = 0;
    bool bad = false;
    if (mine) {
      const u32 L = end - start + 1u;
      bad = L > GTS_MAX_VARINT_BYTES || (L == GTS_MAX_VARINT_BYTES && p[end] > 1u);
      const u32 n = L < GTS_MAX_VARINT_BYTES ? L : GTS_MAX_VARINT_BYTES;
      for (u32 k = 0; k < n; ++k) v |= (u64)(p[start + k] & 0x7fu) << (7u * k);
    }
    const u32 bads = __ballot_sync(GTS_FULL_MASK, bad);
    if (bads != 0u && first_bad == 0xffffffffu) first_bad = found + (u32)(__ffs(bads) - 1);
    const u32 last = __shfl_sync(GTS_FULL_MASK, end, have > 0u ? have - 1u : 0u);
    if (have > 0u) next = last + 1u;
    found += have;
    return have;
  }

  // The stream's flags once every group was taken: varint_stream_flags' rules.
  __device__ __forceinline__ u32 flags() const {
    if (first_bad != 0xffffffffu) return GTS_FLAG_VARINT_OVERFLOW;
    if (found < K) return (len - next) >= GTS_MAX_VARINT_BYTES ? GTS_FLAG_VARINT_OVERFLOW : GTS_FLAG_VARINT_TRUNCATED;
    return next != len ? GTS_FLAG_TRAILING_BYTES : 0u;
  }
};

}  // namespace gts
