// gts_xxh64.cuh -- XXH64 (seed 0) of stored chunks, on the device.
//
// Spec ("Payload reference"): Checksum = XXH64 of the stored bytes, seed zero;
// verify it before decompression.  On a mismatch the chunk's status word
// becomes the job's on_mismatch word (CHECKSUM_MISMATCH plus the codec flags
// the host found), dropping the Zstd frame flags the host computed without
// knowing the checksum: the CPU backend never checks the frame of a chunk
// whose checksum failed.
//
// XXH64 keeps four independent accumulators over 32-byte stripes, so four
// lanes work on one chunk (lane k owns accumulator k and reads word k of every
// stripe); a warp hashes eight chunks.  Lane 0 merges the accumulators and
// hashes the tail.  Stored bytes sit at any byte offset: 8-byte values are
// assembled from aligned words, which may read up to 7 bytes past the chunk,
// so the host pads the stored buffer by GTS_HASH_PAD bytes.
#pragma once
#include "gts_types.cuh"
#include "gts_errors.cuh"

#define GTS_HASH_PAD 16

namespace gts {

#define GTS_P64_1 0x9E3779B185EBCA87ull
#define GTS_P64_2 0xC2B2AE3D27D4EB4Full
#define GTS_P64_3 0x165667B19E3779F9ull
#define GTS_P64_4 0x85EBCA77C2B2AE63ull
#define GTS_P64_5 0x27D4EB2F165667C5ull

__device__ __forceinline__ u64 rotl64(u64 x, u32 r) { return (x << r) | (x >> (64u - r)); }
__device__ __forceinline__ u64 xxh_round(u64 acc, u64 input) {
  acc += input * GTS_P64_2;
  acc = rotl64(acc, 31);
  return acc * GTS_P64_1;
}
__device__ __forceinline__ u64 xxh_merge(u64 acc, u64 val) {
  acc ^= xxh_round(0, val);
  return acc * GTS_P64_1 + GTS_P64_4;
}

// Little-endian u64 at any address from two aligned words (reads within the
// 8-byte-aligned words covering [p, p + 8)).
__device__ __forceinline__ u64 load_u64_any(const u8* p) {
  const u64 a = (u64)p;
  const u64* w = (const u64*)(a & ~7ull);
  const u32 sh = (u32)(a & 7ull) * 8u;
  const u64 lo = w[0];
  return sh ? (lo >> sh) | (w[1] << (64u - sh)) : lo;
}

__device__ __forceinline__ u64 xxh64_tail(u64 h, const u8* p, const u8* end) {
  while (p + 8 <= end) {
    h ^= xxh_round(0, load_u64_le(p));
    h = rotl64(h, 27) * GTS_P64_1 + GTS_P64_4;
    p += 8;
  }
  if (p + 4 <= end) {
    h ^= (u64)load_u32_le(p) * GTS_P64_1;
    h = rotl64(h, 23) * GTS_P64_2 + GTS_P64_3;
    p += 4;
  }
  while (p < end) {
    h ^= (u64)(*p) * GTS_P64_5;
    h = rotl64(h, 11) * GTS_P64_1;
    ++p;
  }
  h ^= h >> 33;
  h *= GTS_P64_2;
  h ^= h >> 29;
  h *= GTS_P64_3;
  h ^= h >> 32;
  return h;
}

// Four consecutive lanes per job; blockDim.x must be a multiple of 32.
__device__ __forceinline__ void xxh64_jobs(const GtsHashJob* __restrict__ jobs, u32 njobs, u32* status,
                                           u64* summary) {
  const u32 gid = blockIdx.x * blockDim.x + threadIdx.x;
  const u32 sub = threadIdx.x & 3u;
  const u32 job = gid >> 2;
  const bool active = job < njobs;
  GtsHashJob j;
  if (active) j = jobs[job];
  else { j.src = 0; j.expected = 0; j.len = 0; j.chunk = GTS_NO_CHUNK; j.on_mismatch = 0; j.pad = 0; }
  const u8* p = (const u8*)j.src;
  const u32 len = j.len;
  const u32 stripes = len / 32u;
  u64 acc = sub == 0 ? GTS_P64_1 + GTS_P64_2 : sub == 1 ? GTS_P64_2 : sub == 2 ? 0ull : 0ull - GTS_P64_1;
  for (u32 s = 0; s < stripes; ++s) acc = xxh_round(acc, load_u64_any(p + 32u * s + 8u * sub));
  // gather the four accumulators on lane sub == 0 (all 32 lanes take part)
  const u32 lane = threadIdx.x & 31u;
  const u32 g = lane & ~3u;
  const u64 v1 = __shfl_sync(GTS_FULL_MASK, acc, g);
  const u64 v2 = __shfl_sync(GTS_FULL_MASK, acc, g + 1);
  const u64 v3 = __shfl_sync(GTS_FULL_MASK, acc, g + 2);
  const u64 v4 = __shfl_sync(GTS_FULL_MASK, acc, g + 3);
  if (!active || sub != 0) return;
  u64 h;
  if (len >= 32u) {
    h = rotl64(v1, 1) + rotl64(v2, 7) + rotl64(v3, 12) + rotl64(v4, 18);
    h = xxh_merge(h, v1);
    h = xxh_merge(h, v2);
    h = xxh_merge(h, v3);
    h = xxh_merge(h, v4);
  } else {
    h = GTS_P64_5;
  }
  h += (u64)len;
  h = xxh64_tail(h, p + 32u * stripes, p + len);
  if (h != j.expected) {
    if (j.chunk != GTS_NO_CHUNK) status[j.chunk] = j.on_mismatch;  // replaces the host's frame flags
    atomicOr(summary, (u64)(j.on_mismatch | GTS_FLAG_CHECKSUM_MISMATCH));
  }
}

}  // namespace gts
