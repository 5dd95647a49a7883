"""The numbers of columnar-samples v1, each named once.

Section names refer to ``columnar-samples-v1.md``.
"""

from __future__ import annotations

# --- Artifact manifest -------------------------------------------------------
FORMAT_NAME = "columnar-samples"
MANIFEST_VERSION = 1
MANIFEST_NAME = "manifest.json"
MAX_MANIFEST_BYTES = 64 * 1024 * 1024
MIN_FIELDS = 1
MAX_FIELDS = 1024
FIELD_TYPE = "float64"
INTERNAL_COLUMN_NAMES = ("__table_id", "__tsid", "__sequence", "__op_type")
TIME_UNITS = ("second", "millisecond", "microsecond", "nanosecond")
#: manifest unit -> Arrow/numpy unit
ARROW_UNITS = {"second": "s", "millisecond": "ms", "microsecond": "us", "nanosecond": "ns"}


def part_file_name(part_id: int) -> str:
    """``part-<id>.samples`` with a decimal ID and no leading zeros."""
    return f"part-{part_id}.samples"


# --- Part file ---------------------------------------------------------------
MAGIC = b"GTSAMPLE"
FILE_VERSION = 1
HEADER_SIZE = 16
TRAILER_SIZE = 112
TRAILER_CHECKSUMMED = 104  # the trailer checksum covers the preceding 104 bytes
PAYLOAD_REF_SIZE = 32
PAGE_REF_SIZE = 72
BLOCK_PREFIX_SIZE = 44
COLUMN_DESC_SIZE = 44
PAGE_PREFIX_SIZE = 12  # kind u32 + entry_count u64
MIN_BLOCK_DESC_SIZE = BLOCK_PREFIX_SIZE + 3 * COLUMN_DESC_SIZE  # time, sequence, operation
SUPPORTED_DEPTHS = (1, 2)

# --- Page kinds --------------------------------------------------------------
PAGE_KIND_LEAF = 0
PAGE_KIND_INTERNAL = 1

# --- Column roles ------------------------------------------------------------
ROLE_TIMESTAMP = 1
ROLE_SEQUENCE = 2
ROLE_OP_TYPE = 3
ROLE_FIELD = 4
KNOWN_ROLES = (ROLE_TIMESTAMP, ROLE_SEQUENCE, ROLE_OP_TYPE, ROLE_FIELD)
ROLE_NAMES = {ROLE_TIMESTAMP: "timestamp", ROLE_SEQUENCE: "sequence", ROLE_OP_TYPE: "operation", ROLE_FIELD: "field"}

# --- Encodings and compression ----------------------------------------------
ENC_TS_CONSTANT_STEP = 1
ENC_TS_DELTA_OF_DELTA = 2
ENC_SEQ_CONSTANT = 3
ENC_SEQ_DELTA = 4
ENC_F64_XOR = 5
ENC_OP_CONSTANT = 6
ENC_OP_RAW = 7
KNOWN_COLUMN_ENCODINGS = (1, 2, 3, 4, 5, 6, 7)
#: role -> column encodings valid for it
ROLE_ENCODINGS = {
    ROLE_TIMESTAMP: (ENC_TS_CONSTANT_STEP, ENC_TS_DELTA_OF_DELTA),
    ROLE_SEQUENCE: (ENC_SEQ_CONSTANT, ENC_SEQ_DELTA),
    ROLE_OP_TYPE: (ENC_OP_CONSTANT, ENC_OP_RAW),
    ROLE_FIELD: (ENC_F64_XOR,),
}
META_ENC_PAGE = 1
COMP_RAW = 0
COMP_ZSTD = 1
KNOWN_COMPRESSIONS = (COMP_RAW, COMP_ZSTD)
WRITER_ZSTD_LEVEL = 3
#: libzstd's fastest level, ``ZSTD_minCLevel()`` (-ZSTD_TARGETLENGTH_MAX): the writer's
#: lower bound for ``compression_level`` (negative levels trade bytes for decode speed).
WRITER_ZSTD_MIN_LEVEL = -(1 << 17)
#: libzstd's strongest level, ``ZSTD_maxCLevel()``.
WRITER_ZSTD_MAX_LEVEL = 22
#: The writer's default leaf page size (decoded bytes; the spec allows up to
#: MAX_PAGE_DECODED).  A query decompresses and checks every leaf page it needs
#: whole, so smaller leaves cost a one-series query less: 16 KiB leaves made it
#: load 3.3x fewer metadata bytes than 64 KiB ones (region benchmark: 2.20 -> 0.68
#: MB for 100 artifacts) for a few more page references in each root.
WRITER_PAGE_BYTES = 16 * 1024

VALIDITY_ALL_VALID = 0
VALIDITY_BITMAP = 1
OP_DELETE = 0
OP_PUT = 1

# --- Limits ------------------------------------------------------------------
MAX_BLOCK_ROWS = 8192  # default writer row limit and v1 reader maximum
MAX_BLOCK_DECODED_BYTES = 262_144
MAX_CHUNK_DECODED = 1 << 20
MAX_CHUNK_STORED = (1 << 20) + (64 << 10)
MAX_PAGE_DECODED = 65_536
MAX_PAGE_STORED = 131_072
MAX_INTERNAL_ENTRIES = (MAX_PAGE_DECODED - PAGE_PREFIX_SIZE) // PAGE_REF_SIZE  # 910
MAX_VARINT_BYTES = 10
U64_MAX = (1 << 64) - 1
U32_MAX = (1 << 32) - 1
I64_MIN = -(1 << 63)
I64_MAX = (1 << 63) - 1


def block_decoded_size(rows: int, fields: int) -> int:
    """Decoded accounting size of a block ("Column payloads and row semantics")."""
    return rows * (8 + 8 + 1 + 8 * fields) + fields * ((rows + 7) // 8)


def max_block_rows(fields: int) -> int:
    """Largest row count allowed by both the row limit and the decoded-size limit."""
    lo, hi = 0, MAX_BLOCK_ROWS
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if block_decoded_size(mid, fields) <= MAX_BLOCK_DECODED_BYTES:
            lo = mid
        else:
            hi = mid - 1
    return lo


def block_desc_size(present_fields: int) -> int:
    """Bytes of one block descriptor with ``present_fields`` value chunks."""
    return BLOCK_PREFIX_SIZE + COLUMN_DESC_SIZE * (3 + present_fields)
