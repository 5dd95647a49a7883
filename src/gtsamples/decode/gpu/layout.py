"""Mirrors of kernels/gts_types.cuh: the descriptor dtypes the kernels read, their
constants, and the kernel of each column kind."""

from __future__ import annotations

import numpy as np

# ----------------------------------------------------------------------------- mirrors of kernels/gts_types.cuh

#: struct GtsChunk (72 bytes)
CHUNK_DESC_DTYPE = np.dtype(
    {
        "names": ["src", "dst", "mask", "out_row", "min_ts", "max_ts", "len", "rows", "null_count", "chunk",
                  "encoding", "pad0", "pad1"],
        "formats": ["<u8", "<u8", "<u8", "<u8", "<i8", "<i8", "<u4", "<u4", "<u4", "<u4", "<u2", "<u2", "<u4"],
        "offsets": [0, 8, 16, 24, 32, 40, 48, 52, 56, 60, 64, 66, 68],
        "itemsize": 72,
    }
)  # fmt: skip
#: struct GtsBlock (24 bytes)
BLOCK_DESC_DTYPE = np.dtype(
    {"names": ["out_row", "tsid", "table_id", "rows"], "formats": ["<u8", "<u8", "<u4", "<u4"],
     "offsets": [0, 8, 16, 20], "itemsize": 24}
)  # fmt: skip
#: struct GtsCopyCol (24 bytes)
COPY_COL_DTYPE = np.dtype(
    {"names": ["src", "dst", "elem_size", "pad"], "formats": ["<u8", "<u8", "<u4", "<u4"],
     "offsets": [0, 8, 16, 20], "itemsize": 24}
)  # fmt: skip
#: struct GtsMaskCol (16 bytes)
MASK_COL_DTYPE = np.dtype({"names": ["src", "dst"], "formats": ["<u8", "<u8"], "offsets": [0, 8], "itemsize": 16})
#: struct GtsHashJob (32 bytes)
HASH_JOB_DTYPE = np.dtype(
    {"names": ["src", "expected", "len", "chunk", "on_mismatch", "pad"],
     "formats": ["<u8", "<u8", "<u4", "<u4", "<u4", "<u4"], "offsets": [0, 8, 16, 20, 24, 28], "itemsize": 32}
)  # fmt: skip

#: struct GtsSeqOrder (32 bytes)
SEQ_ORDER_DTYPE = np.dtype(
    {"names": ["out_row", "rows", "seq_chunk", "ts_chunk", "prev_seq", "prev_ts", "pad"],
     "formats": ["<u8", "<u4", "<u4", "<u4", "<u4", "<u4", "<u4"], "offsets": [0, 8, 12, 16, 20, 24, 28],
     "itemsize": 32}
)  # fmt: skip

GTS_BLOCK = 256  # threads per CUDA block (GTS_BLOCK)
GTS_WARPS = GTS_BLOCK // 32  # chunks per CUDA block of a *_warp kernel (GTS_WARPS)
GTS_WARP_MAX_ROWS = 1024  # most rows a *_warp kernel takes (GTS_WARP_MAX_ROWS)
ENC_NULL_FILL = 0xFFFF  # GTS_ENC_NULL_FILL
NO_CHUNK = 0xFFFFFFFF  # GTS_NO_CHUNK
HASH_PAD = 16  # GTS_HASH_PAD: slack after the stored bytes for aligned 8-byte loads
DECODED_ALIGN = 16  # start of every decompressed chunk in the decoded buffer
SECTION_ALIGN = 16
GRID_CAP = 1 << 20  # grid-stride kernels never launch more blocks than this

#: Kernel kinds in launch order: (.cu file, block kernel, warp kernel)
KIND_TIMESTAMP, KIND_SEQUENCE, KIND_OP_TYPE, KIND_FIELD = range(4)
KIND_KERNELS = {
    KIND_TIMESTAMP: ("gts_timestamp.cu", "gts_decode_timestamps", "gts_decode_timestamps_warp"),
    KIND_SEQUENCE: ("gts_sequence.cu", "gts_decode_sequences", "gts_decode_sequences_warp"),
    KIND_OP_TYPE: ("gts_optype.cu", "gts_decode_optypes", "gts_decode_optypes_warp"),
    KIND_FIELD: ("gts_float.cu", "gts_decode_floats", "gts_decode_floats_warp"),
}
