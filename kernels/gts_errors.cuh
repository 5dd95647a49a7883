// gts_errors.cuh -- per-chunk decode failure bits.
//
// Mirrors gtsamples.errors.DecodeErrorFlag bit for bit (a test parses this file
// and compares every name and value).  The numbers must never change.
//
// Every decode kernel writes the flags it finds for a chunk into that chunk's
// uint32 status word and ORs them into the batch-wide flag word (summary[0],
// atomicOr).  The host reads the batch word once per batch and, only when it is
// nonzero, copies the per-chunk words back and raises through
// gtsamples.batch.raise_for_flags, exactly as the CPU backend does.
#pragma once
#include "gts_types.cuh"

#define GTS_FLAG_NONE                    0u
#define GTS_FLAG_CHECKSUM_MISMATCH       (1u << 0)
#define GTS_FLAG_ZSTD_FRAME_INVALID      (1u << 1)
#define GTS_FLAG_DECODED_LENGTH_MISMATCH (1u << 2)
#define GTS_FLAG_ZSTD_DECOMPRESS_FAILED  (1u << 3)
#define GTS_FLAG_UNSUPPORTED_COMPRESSION (1u << 4)
#define GTS_FLAG_UNSUPPORTED_ENCODING    (1u << 5)
#define GTS_FLAG_VARINT_TRUNCATED        (1u << 6)
#define GTS_FLAG_VARINT_OVERFLOW         (1u << 7)
#define GTS_FLAG_TRAILING_BYTES          (1u << 8)
#define GTS_FLAG_BAD_LENGTH              (1u << 9)
#define GTS_FLAG_TIMESTAMP_OVERFLOW      (1u << 10)
#define GTS_FLAG_TIMESTAMP_DECREASING    (1u << 11)
#define GTS_FLAG_TIMESTAMP_BOUNDS        (1u << 12)
#define GTS_FLAG_VALIDITY_KIND           (1u << 13)
#define GTS_FLAG_NULL_COUNT_MISMATCH     (1u << 14)
#define GTS_FLAG_VALIDITY_PADDING        (1u << 15)
#define GTS_FLAG_OP_TYPE_INVALID         (1u << 16)
#define GTS_FLAG_NEGATIVE_STEP           (1u << 17)
#define GTS_FLAG_SEQUENCE_ORDER          (1u << 18)

namespace gts {

// summary[0]: batch-wide OR of the flags (u64 so one 16-byte copy brings it back
// together with summary[1], the row count after trimming).
__device__ __forceinline__ void report_flags(u32* status, u64* summary, u32 chunk, u32 flags) {
  if (flags == 0) return;
  if (chunk != GTS_NO_CHUNK) atomicOr(status + chunk, flags);
  atomicOr(summary, (u64)flags);
}

// A status word, read while other threads of the launch may OR flags into it
// (the chunk's own block reporting, a neighbouring block's SEQUENCE_ORDER): a
// relaxed atomic load, as a plain load racing an atomicOr is a data race in
// the PTX memory model.
__device__ __forceinline__ u32 load_status(const u32* status, u32 chunk) {
  return __nv_atomic_load_n(const_cast<u32*>(status) + chunk, __NV_ATOMIC_RELAXED, __NV_THREAD_SCOPE_DEVICE);
}

// Entry test of every per-chunk kernel: a chunk already failed (host pre-check,
// checksum, nvCOMP) is not decoded again.  That value is the same for the
// whole CUDA block, so an early return keeps barriers uniform.  (A block whose
// thread 0 reports flags before another thread gets here has no barrier left.)
__device__ __forceinline__ bool already_failed(const u32* status, u32 chunk) {
  return chunk != GTS_NO_CHUNK && load_status(status, chunk) != 0;
}

}  // namespace gts
