"""Binary layouts of columnar-samples v1 as numpy structured dtypes.

All numbers are little-endian and packed (no alignment padding).  Descriptor
tables are parsed by viewing bytes through these dtypes; nothing here loops
over rows in Python.
"""

from __future__ import annotations

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
