// gts_types.cuh -- fixed-width types, little-endian loads and the device
// descriptor tables shared by every gtsamples kernel.
//
// Compiles under nvcc and under NVRTC without the CUDA include directory: no
// standard header is included.  The descriptor structs below are mirrored by
// numpy structured dtypes in src/gtsamples/decode/gpu.py (CHUNK_DESC_DTYPE,
// BLOCK_DESC_DTYPE, COPY_COL_DTYPE, MASK_COL_DTYPE, HASH_JOB_DTYPE); a test
// parses this file and compares the field names and offsets, and the
// static_asserts below pin the sizes for the compiler.
#pragma once

namespace gts {

typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;
typedef int i32;
typedef long long i64;

static_assert(sizeof(u8) == 1 && sizeof(u16) == 2 && sizeof(u32) == 4 && sizeof(u64) == 8, "widths");
static_assert(sizeof(i32) == 4 && sizeof(i64) == 8, "widths");

// --- launch shape -----------------------------------------------------------
// Every per-chunk kernel runs one CUDA block of GTS_BLOCK threads per chunk.
#define GTS_BLOCK 256
#define GTS_WARPS (GTS_BLOCK / 32)
#define GTS_FULL_MASK 0xffffffffu
// Resident blocks per SM the varint kernels are compiled for (32 KiB of shared
// memory each; 4 x 256 threads leaves ptxas 64 registers, no spills).
#define GTS_MIN_BLOCKS 4

// --- spec numbers (columnar-samples v1, "Encodings and compression", "Limits")
#define GTS_MAX_BLOCK_ROWS 8192u       // v1 reader maximum rows per block
#define GTS_MAX_VARINT_BYTES 10u
#define GTS_ENC_TS_CONSTANT_STEP 1
#define GTS_ENC_TS_DELTA_OF_DELTA 2
#define GTS_ENC_SEQ_CONSTANT 3
#define GTS_ENC_SEQ_DELTA 4
#define GTS_ENC_F64_XOR 5
#define GTS_ENC_OP_CONSTANT 6
#define GTS_ENC_OP_RAW 7
// Internal, never on disk: a projected field whose chunk is omitted in a block
// (all null).  Its rows get value 0.0 and validity 0.
#define GTS_ENC_NULL_FILL 0xffff
#define GTS_VALIDITY_ALL_VALID 0
#define GTS_VALIDITY_BITMAP 1
#define GTS_OP_MAX 1                    // 0 delete, 1 put
// Chunk descriptor `chunk` value for synthesized null fills (no status word).
#define GTS_NO_CHUNK 0xffffffffu

// One chunk to decode (one per CUDA block of a decode kernel).  72 bytes.
struct GtsChunk {
  u64 src;         //  0 device address of the decoded (uncompressed) encoded bytes
  u64 dst;         //  8 device address of the output column's row 0
  u64 mask;        // 16 device address of the column's uint32 validity words, or 0
  u64 out_row;     // 24 first output row of the chunk's block
  i64 min_ts;      // 32 block descriptor minimum timestamp
  i64 max_ts;      // 40 block descriptor maximum timestamp
  u32 len;         // 48 decoded length in bytes (never read past)
  u32 rows;        // 52 the block's row count
  u32 null_count;  // 56 descriptor null count
  u32 chunk;       // 60 index into the per-chunk status array, or GTS_NO_CHUNK
  u16 encoding;    // 64 column encoding ID (or GTS_ENC_NULL_FILL)
  u16 pad0;        // 66
  u32 pad1;        // 68
};
static_assert(sizeof(GtsChunk) == 72, "GtsChunk layout");

// One selected block (identity broadcast, trimming).  24 bytes.
struct GtsBlock {
  u64 out_row;     //  0 first output row before trimming
  u64 tsid;        //  8
  u32 table_id;    // 16
  u32 rows;        // 20
};
static_assert(sizeof(GtsBlock) == 24, "GtsBlock layout");

// One fixed-width column to compact after trimming.  24 bytes.
struct GtsCopyCol {
  u64 src;         //  0
  u64 dst;         //  8
  u32 elem_size;   // 16 1, 4 or 8
  u32 pad;         // 20
};
static_assert(sizeof(GtsCopyCol) == 24, "GtsCopyCol layout");

// One validity mask to compact after trimming.  16 bytes.
struct GtsMaskCol {
  u64 src;         //  0 uint32 words, bit i = row i
  u64 dst;         //  8 uint32 words, zeroed before the launch
};
static_assert(sizeof(GtsMaskCol) == 16, "GtsMaskCol layout");

// One stored chunk whose XXH64 (seed 0) is checked on the device.  32 bytes.
struct GtsHashJob {
  u64 src;         //  0 device address of the stored bytes
  u64 expected;    //  8 checksum from the payload reference
  u32 len;         // 16 stored length
  u32 chunk;       // 20 index into the per-chunk status array
  u32 on_mismatch; // 24 the chunk's whole status word when the checksum differs
  u32 pad;         // 28
};
static_assert(sizeof(GtsHashJob) == 32, "GtsHashJob layout");

// One block's sequence order check (gts_check_sequence_order).  32 bytes.
struct GtsSeqOrder {
  u64 out_row;     //  0 first output row of the block
  u32 rows;        //  8 the block's row count
  u32 seq_chunk;   // 12 status index of the block's sequence chunk (flagged on failure)
  u32 ts_chunk;    // 16 status index of the block's timestamp chunk
  u32 prev_seq;    // 20 previous block's sequence chunk when the block continues its
                   //    series (same identity, ordinal + 1), else GTS_NO_CHUNK
  u32 prev_ts;     // 24 previous block's timestamp chunk (with prev_seq)
  u32 pad;         // 28
};
static_assert(sizeof(GtsSeqOrder) == 32, "GtsSeqOrder layout");

// --- little-endian loads at any byte address -----------------------------------
__device__ __forceinline__ u64 load_u64_le(const u8* p) {
  u64 v = 0;
#pragma unroll
  for (int k = 0; k < 8; ++k) v |= (u64)p[k] << (8 * k);
  return v;
}

__device__ __forceinline__ u32 load_u32_le(const u8* p) {
  return (u32)p[0] | ((u32)p[1] << 8) | ((u32)p[2] << 16) | ((u32)p[3] << 24);
}

__device__ __forceinline__ u32 min_u32(u32 a, u32 b) { return a < b ? a : b; }
__device__ __forceinline__ u64 min_u64(u64 a, u64 b) { return a < b ? a : b; }

}  // namespace gts
