"""Binary layouts of columnar-samples v1 as numpy structured dtypes.

All numbers are little-endian and packed (no alignment padding).  Descriptor
tables are parsed by viewing bytes through these dtypes; nothing here loops
over rows in Python.  These dtypes are the one definition of the layout: the
``struct`` formats that unpack single records (:func:`struct_of`) and the u32
word offsets that numba kernels read fields at (:func:`word_of`, frozen as
module constants below) are derived from them.
"""

from __future__ import annotations

import struct

import numpy as np

from . import constants as C

#: Payload reference, 32 bytes ("Payload reference").
PAYLOAD_REF = np.dtype(
    [
        ("offset", "<u8"),
        ("stored_len", "<u4"),
        ("decoded_len", "<u4"),
        ("checksum", "<u8"),
        ("encoding", "<u2"),
        ("compression", "<u2"),
        ("reserved", "<u4"),
    ]
)

#: Page reference with identity and time bounds, 72 bytes.
PAGE_REF = np.dtype(
    [
        ("first_table_id", "<u4"),
        ("first_tsid", "<u8"),
        ("last_table_id", "<u4"),
        ("last_tsid", "<u8"),
        ("min_timestamp", "<i8"),
        ("max_timestamp", "<i8"),
        ("ref", PAYLOAD_REF),
    ]
)

#: Fixed prefix of a block descriptor, 44 bytes.
BLOCK_PREFIX = np.dtype(
    [
        ("table_id", "<u4"),
        ("tsid", "<u8"),
        ("min_timestamp", "<i8"),
        ("max_timestamp", "<i8"),
        ("ordinal", "<u8"),
        ("row_count", "<u4"),
        ("column_count", "<u4"),
    ]
)

#: Column descriptor, 44 bytes.
COLUMN_DESC = np.dtype(
    [
        ("role", "<u4"),
        ("column_id", "<u4"),
        ("ref", PAYLOAD_REF),
        ("null_count", "<u4"),
    ]
)

#: Part header, 16 bytes.
HEADER = np.dtype([("magic", "S8"), ("version", "<u4"), ("reserved", "<u4")])

#: Part trailer, 112 bytes.
TRAILER = np.dtype(
    [
        ("root", PAGE_REF),
        ("depth", "<u4"),
        ("version", "<u4"),
        ("file_length", "<u8"),
        ("payload_end", "<u8"),
        ("magic", "S8"),
        ("checksum", "<u8"),
    ]
)

#: Page prefix: kind u32 + entry_count u64, 12 bytes.
PAGE_PREFIX = np.dtype([("kind", "<u4"), ("entry_count", "<u8")])

for _dt, _size in (
    (PAYLOAD_REF, C.PAYLOAD_REF_SIZE),
    (PAGE_REF, C.PAGE_REF_SIZE),
    (BLOCK_PREFIX, C.BLOCK_PREFIX_SIZE),
    (COLUMN_DESC, C.COLUMN_DESC_SIZE),
    (HEADER, C.HEADER_SIZE),
    (TRAILER, C.TRAILER_SIZE),
    (PAGE_PREFIX, C.PAGE_PREFIX_SIZE),
):
    assert _dt.itemsize == _size, (_dt, _size)
del _dt, _size


# --- derived views of the layout ------------------------------------------------------

_STRUCT_CODES = {("u", 2): "H", ("u", 4): "I", ("u", 8): "Q", ("i", 8): "q"}


def _leaf_fields(dtype: np.dtype, base: int = 0):
    """``(name path, byte offset, leaf dtype)`` of every scalar field, in layout order."""
    for name in dtype.names:
        sub, off = dtype.fields[name][:2]
        if sub.names:
            for path, o, leaf in _leaf_fields(sub, base + off):
                yield f"{name}.{path}", o, leaf
        else:
            yield name, base + off, sub


def offset_of(dtype: np.dtype, path: str) -> int:
    """Byte offset of the field ``path`` (``"ref.offset"`` names a nested field)."""
    for name, off, _leaf in _leaf_fields(dtype):
        if name == path:
            return off
    raise KeyError(path)


def struct_of(dtype: np.dtype) -> struct.Struct:
    """The ``struct`` format of ``dtype``'s scalar fields (nested ones flattened, in
    layout order): ``unpack`` gives the values a structured view holds."""
    codes, pos = ["<"], 0
    for name, off, leaf in _leaf_fields(dtype):
        assert off == pos, f"{name}: the layout is packed"
        codes.append(f"{leaf.itemsize}s" if leaf.kind == "S" else _STRUCT_CODES[(leaf.kind, leaf.itemsize)])
        pos += leaf.itemsize
    assert pos == dtype.itemsize
    return struct.Struct("".join(codes))


def word_of(dtype: np.dtype, path: str) -> int:
    """The u32 word index of the field ``path`` (kernels read records as little-endian
    u32 words: every field of these records lies on a 4-byte boundary, a u64 spans
    two words, and the two u16 codecs of a payload reference share one)."""
    off = offset_of(dtype, path)
    assert off % 4 == 0, path
    return off // 4


def words_of(dtype: np.dtype, *paths: str) -> tuple[int, ...]:
    """The record's size in u32 words, then :func:`word_of` of each field ``paths``."""
    return (dtype.itemsize // 4,) + tuple(word_of(dtype, p) for p in paths)


# u32 word offsets, module constants so that numba kernels compile them in.  A payload
# reference's codecs word: encoding in the low 16 bits, compression in the high 16.
(PAGE_REF_WORDS, PR_FIRST_TABLE_ID, PR_FIRST_TSID, PR_LAST_TABLE_ID, PR_LAST_TSID, PR_MIN_TIMESTAMP, PR_MAX_TIMESTAMP,
 PR_OFFSET, PR_STORED_LEN, PR_DECODED_LEN, PR_CHECKSUM, PR_CODECS, PR_RESERVED) = words_of(
    PAGE_REF, "first_table_id", "first_tsid", "last_table_id", "last_tsid", "min_timestamp", "max_timestamp",
    "ref.offset", "ref.stored_len", "ref.decoded_len", "ref.checksum", "ref.encoding", "ref.reserved")
(TRAILER_WORDS, TR_DEPTH, TR_VERSION, TR_FILE_LENGTH, TR_PAYLOAD_END, TR_MAGIC, TR_CHECKSUM) = words_of(
    TRAILER, "depth", "version", "file_length", "payload_end", "magic", "checksum")
HEADER_WORDS, HD_MAGIC, HD_VERSION, HD_RESERVED = words_of(HEADER, "magic", "version", "reserved")
PAGE_PREFIX_WORDS, PP_KIND, PP_ENTRY_COUNT = words_of(PAGE_PREFIX, "kind", "entry_count")
(BLOCK_PREFIX_WORDS, BP_TABLE_ID, BP_TSID, BP_MIN_TIMESTAMP, BP_MAX_TIMESTAMP, BP_ORDINAL, BP_ROW_COUNT,
 BP_COLUMN_COUNT) = words_of(BLOCK_PREFIX, "table_id", "tsid", "min_timestamp", "max_timestamp", "ordinal",
                             "row_count", "column_count")
(COLUMN_DESC_WORDS, CD_ROLE, CD_COLUMN_ID, CD_OFFSET, CD_STORED_LEN, CD_DECODED_LEN, CD_CODECS, CD_RESERVED,
 CD_NULL_COUNT) = words_of(COLUMN_DESC, "role", "column_id", "ref.offset", "ref.stored_len", "ref.decoded_len",
                           "ref.encoding", "ref.reserved", "null_count")

for _dt in (PAGE_REF, COLUMN_DESC):  # the codecs word: encoding, then compression, little-endian
    assert offset_of(_dt, "ref.compression") == offset_of(_dt, "ref.encoding") + 2
del _dt

#: Single records as ``struct`` formats (a part's trailer, a page reference), for reads
#: of one record (or a root's children) where a numpy view costs more than the parse.
PAGE_REF_STRUCT = struct_of(PAGE_REF)
TRAILER_STRUCT = struct_of(TRAILER)
