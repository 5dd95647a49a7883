"""Rule codes of the part-file checks, and the one table that turns a code into its error.

The checks of headers, trailers, page references and pages run in numba kernels
(:mod:`gtsamples.format.pages`), which cannot build messages: a check returns
the code of the first rule broken (0: every rule holds), where it broke (a
child, block or descriptor index: ``at``) and the values the message needs
(``vals``, a ``uint64`` array of :data:`N_VALS`; signed values are stored as
their two's complement).  :func:`rule_error` maps that to the exception a
reader raises: the class (corrupt or unsupported) and a message naming the
object, the rule, and the observed and expected values.

Within one kind of page the codes are numbered in the order the rules are
checked, so a check that visits every block of a leaf reports the broken rule
with the lowest code, and the first block or descriptor breaking it.
"""

from __future__ import annotations

from ..errors import CorruptArtifactError, SamplesError, UnsupportedError
from . import constants as C

N_VALS = 16

OK = 0
# A page reference (a part's root reference, an internal page's children).  The four
# rules every payload reference shares are consecutive, here and for chunks (CHUNK_*).
REF_IDS = 1
REF_TIMES = 2
REF_RESERVED = 3
REF_LENGTHS = 4
REF_OVERFLOW = 5
REF_AREA = 6
REF_ENCODING = 7
REF_COMPRESSION = 8
REF_DECODED_MAX = 9
REF_STORED_MAX = 10
REF_RAW_LENGTHS = 11
# Trailer, then header (the root reference's codes come between payload_end and the bounds).
TRAILER_CHECKSUM = 20
TRAILER_MAGIC = 21
TRAILER_VERSION = 22
TRAILER_FILE_LENGTH = 23
TRAILER_DEPTH = 24
TRAILER_PAYLOAD_END = 25
ROOT_BOUNDS = 26
ROOT_END = 27
HEADER_MAGIC = 30
HEADER_VERSION = 31
HEADER_RESERVED = 32
# A stored page, then its prefix.
PAGE_CHECKSUM = 40
PAGE_ZSTD = 41
PAGE_SHORT = 45
PAGE_EMPTY = 46
PAGE_KIND = 47
# Internal pages (a child's reference breaks a REF_* rule: ``at`` is the child).
INTERNAL_LENGTH = 50
CHILD_DISJOINT = 51
CHILD_ORDER = 52
DERIVED_BOUNDS = 55
# Leaf pages: structure, blocks, column descriptors, chunk references, block sequence.
LEAF_COUNT = 60
LEAF_RUNS_PAST = 61
LEAF_TRAILING = 62
BLOCK_ROWS_ZERO = 65
BLOCK_ROWS_CAP = 66
BLOCK_TIMES = 67
BLOCK_COLUMNS = 68
COL_ROLE_UNKNOWN = 70
COL_ROLE = 71
COL_ID = 72
COL_NULLS_MANDATORY = 73
COL_FIELD_UNKNOWN = 74
COL_FIELD_ORDER = 75
COL_NULLS_ALL = 76
CHUNK_RESERVED = 80
CHUNK_LENGTHS = 81
CHUNK_OVERFLOW = 82
CHUNK_AREA = 83
CHUNK_STORED_MAX = 84
CHUNK_DECODED_MAX = 85
CHUNK_RAW_LENGTHS = 86
CHUNK_ENCODING_ROLE = 87
CHUNK_DISJOINT = 88
SEQ_ORDER = 90
SEQ_ORDINAL_NEXT = 91
SEQ_ORDINAL_ZERO = 92
SEQ_TIME = 93
FIRST_ORDINAL = 98
# Across pages (the navigator's checks).
BOUNDARY_CHUNKS = 100
PART_TOTALS = 101

for _first in (REF_RESERVED, CHUNK_RESERVED):  # pages.payload_rule's four, in its order
    assert (_first + 1, _first + 2, _first + 3) in ((REF_LENGTHS, REF_OVERFLOW, REF_AREA),
                                                    (CHUNK_LENGTHS, CHUNK_OVERFLOW, CHUNK_AREA))
del _first

_U64 = 1 << 64


def s64(v: int) -> int:
    """A signed 64-bit value stored as its two's complement."""
    return v - _U64 if v >= 1 << 63 else v


def _ids(v, k: int) -> str:
    return f"({v[k]}, {v[k + 1]})"


def _bounds(v, k: int) -> str:
    """``ids [first, last] times [min, max]`` of six values from ``k``."""
    return f"ids [{_ids(v, k)}, {_ids(v, k + 2)}] times [{s64(v[k + 4])}, {s64(v[k + 5])}]"


def _magic(v: int) -> bytes:
    return v.to_bytes(8, "little")


# Values of a page reference's rules (REF_*): the reference's fields and its area.
R_FT, R_FS, R_LT, R_LS, R_MN, R_MX, R_OFF, R_STORED, R_DEC, R_ENC, R_COMP, R_RES, R_LO, R_HI = range(14)

_CORRUPT, _UNSUPPORTED = CorruptArtifactError, UnsupportedError

#: code -> (error class, message after "<object>: " given the values ``v``).
_REF_MESSAGES = {
    REF_IDS: (_CORRUPT, lambda v: f"identifier interval first {_ids(v, R_FT)} > last {_ids(v, R_LT)}; "
              "require first <= last"),
    REF_TIMES: (_CORRUPT, lambda v: f"time interval min_timestamp {s64(v[R_MN])} > max_timestamp {s64(v[R_MX])}"),
    REF_RESERVED: (_CORRUPT, lambda v: f"payload reference reserved field is {v[R_RES]}, must be zero"),
    REF_LENGTHS: (_CORRUPT, lambda v: f"payload lengths must be nonzero (stored {v[R_STORED]}, decoded {v[R_DEC]})"),
    REF_OVERFLOW: (_CORRUPT, lambda v: f"offset {v[R_OFF]} + stored length {v[R_STORED]} overflows u64"),
    REF_AREA: (_CORRUPT, lambda v: f"page bytes [{v[R_OFF]}, {v[R_OFF] + v[R_STORED]}) lie outside the metadata "
               f"area [{v[R_LO]}, {v[R_HI]})"),
    REF_ENCODING: (_UNSUPPORTED, lambda v: f"metadata encoding {v[R_ENC]} is not supported "
                   f"(expected {C.META_ENC_PAGE})"),
    REF_COMPRESSION: (_UNSUPPORTED, lambda v: f"compression {v[R_COMP]} is not supported"),
    REF_DECODED_MAX: (_CORRUPT, lambda v: f"page decoded length {v[R_DEC]} exceeds {C.MAX_PAGE_DECODED} bytes"),
    REF_STORED_MAX: (_CORRUPT, lambda v: f"page stored length {v[R_STORED]} exceeds {C.MAX_PAGE_STORED} bytes"),
    REF_RAW_LENGTHS: (_CORRUPT, lambda v: f"compression 0 requires equal lengths (stored {v[R_STORED]}, "
                      f"decoded {v[R_DEC]})"),
}

_PART_MESSAGES = {
    TRAILER_CHECKSUM: (_CORRUPT, lambda v: f"trailer checksum is {v[0]:#018x}, XXH64 of the first "
                       f"{C.TRAILER_CHECKSUMMED} bytes is {v[1]:#018x}"),
    TRAILER_MAGIC: (_CORRUPT, lambda v: f"trailer magic is {_magic(v[0])!r}, expected {C.MAGIC!r}"),
    TRAILER_VERSION: (_UNSUPPORTED, lambda v: f"trailer file version {v[0]} is not supported "
                      f"(expected {C.FILE_VERSION})"),
    TRAILER_FILE_LENGTH: (_CORRUPT, lambda v: f"trailer file length {v[0]} differs from the recorded size {v[1]}"),
    TRAILER_DEPTH: (_UNSUPPORTED, lambda v: f"index depth {v[0]} is not supported (version 1 reads depth 1 or 2)"),
    TRAILER_PAYLOAD_END: (_CORRUPT, lambda v: f"payload_end {v[0]} lies outside [{C.HEADER_SIZE}, {v[1]}] "
                          "(header end .. trailer start)"),
    ROOT_BOUNDS: (_CORRUPT, lambda v: f"root bounds {_bounds(v, 0)} differ from the manifest part descriptor "
                  f"{_bounds(v, 6)}"),
    ROOT_END: (_CORRUPT, lambda v: f"the root page must end immediately before the trailer: it ends at {v[0]}, "
               f"trailer starts at {v[1]}"),
    HEADER_MAGIC: (_CORRUPT, lambda v: f"header magic is {_magic(v[0])!r}, expected {C.MAGIC!r}"),
    HEADER_VERSION: (_UNSUPPORTED, lambda v: f"header file version {v[0]} is not supported "
                     f"(expected {C.FILE_VERSION})"),
    HEADER_RESERVED: (_CORRUPT, lambda v: f"header reserved field is {v[0]}, must be zero"),
    PAGE_CHECKSUM: (_CORRUPT, lambda v: f"XXH64 of the stored bytes is {v[0]:#018x}, reference says {v[1]:#018x}"),
    PAGE_SHORT: (_CORRUPT, lambda v: f"decoded page is {v[0]} bytes, shorter than the {C.PAGE_PREFIX_SIZE}-byte "
                 "prefix"),
    PAGE_EMPTY: (_CORRUPT, lambda v: "pages are nonempty; entry_count is 0"),
    PAGE_KIND: (_CORRUPT, lambda v: f"page kind {v[0]}, expected "
                f"{'leaf (0)' if v[1] == C.PAGE_KIND_LEAF else 'internal (1)'}"),
    INTERNAL_LENGTH: (_CORRUPT, lambda v: f"internal page with entry_count {v[0]} must be {C.PAGE_PREFIX_SIZE} + "
                      f"{C.PAGE_REF_SIZE} * {v[0]} bytes; decoded length is {v[1]}"),
    DERIVED_BOUNDS: (_CORRUPT, lambda v: f"derived bounds {_bounds(v, 0)} differ from its reference's "
                     f"{_bounds(v, 6)}"),
    LEAF_COUNT: (_CORRUPT, lambda v: f"entry_count {v[0]} cannot fit in {v[1]} bytes (at most {v[2]} descriptors "
                 f"of >= {C.MIN_BLOCK_DESC_SIZE} bytes)"),
    LEAF_RUNS_PAST: (_CORRUPT, lambda v: f"block descriptor {v[0]} runs past the end of the {v[1]}-byte page"),
    LEAF_TRAILING: (_CORRUPT, lambda v: f"trailing bytes after {v[0]} block descriptors"),
    BOUNDARY_CHUNKS: (_CORRUPT, lambda v: f"block 0: chunks must be physically ordered and disjoint across "
                      f"blocks: first chunk starts at {v[0]}, previous page's last chunk ends at {v[1]}"),
    PART_TOTALS: (_CORRUPT, lambda v: f"part holds {v[0]} blocks / {v[1]} rows, the manifest part descriptor "
                  f"says {v[2]} blocks / {v[3]} rows"),
}

# Block rules: v[0:3] the block's table, tsid and ordinal, then the rule's values.
_BLOCK_MESSAGES = {
    BLOCK_ROWS_ZERO: lambda v: "row count must be nonzero",
    BLOCK_ROWS_CAP: lambda v: (f"row count {v[3]} exceeds the cap of {v[4]} rows for {v[5]} fields (row limit "
                               f"{C.MAX_BLOCK_ROWS} and {C.MAX_BLOCK_DECODED_BYTES}-byte decoded-size formula: "
                               f"{C.block_decoded_size(v[3], v[5])} bytes)"),
    BLOCK_TIMES: lambda v: f"min_timestamp {s64(v[3])} > max_timestamp {s64(v[4])}",
    BLOCK_COLUMNS: lambda v: f"column count {v[3]} must be 3 + present fields (3..={3 + v[4]})",
    SEQ_ORDER: lambda v: (f"blocks sort by (table_id, tsid, min_timestamp, ordinal); previous identity "
                          f"({v[3]}, {v[4]}) is greater"),
    SEQ_ORDINAL_NEXT: lambda v: f"ordinals increase by one per identity: expected {v[3] + 1}",
    SEQ_ORDINAL_ZERO: lambda v: "ordinals start at zero for each identity: expected 0",
    SEQ_TIME: lambda v: (f"adjacent blocks of a series need previous.max_timestamp <= next.min_timestamp "
                         f"({s64(v[3])} > {s64(v[4])})"),
}

# Column descriptor rules: v[0:6] the block's table, tsid, ordinal, then the descriptor's
# position, role and column ID, then the rule's values.
_COLUMN_MESSAGES = {
    COL_ROLE: lambda v: (f"role must be {v[6]} ({C.ROLE_NAMES[v[6]]}): time, sequence and operation come first, "
                         "then value fields"),
    COL_ID: lambda v: f"column ID must be {v[6]}",
    COL_NULLS_MANDATORY: lambda v: f"null count {v[6]} must be zero for time, sequence and operation",
    COL_FIELD_UNKNOWN: lambda v: f"field column ID {v[5]} is not in the manifest",
    COL_FIELD_ORDER: lambda v: "value descriptors follow manifest order with no repeated IDs",
    COL_NULLS_ALL: lambda v: f"present value chunks need null_count < row_count ({v[6]} >= {v[7]})",
    CHUNK_RESERVED: lambda v: f"payload reference reserved field is {v[6]}, must be zero",
    CHUNK_LENGTHS: lambda v: f"payload lengths must be nonzero (stored {v[6]}, decoded {v[7]})",
    CHUNK_OVERFLOW: lambda v: f"offset {v[6]} + stored length {v[7]} overflows u64",
    CHUNK_AREA: lambda v: f"chunk bytes [{v[6]}, {v[7]}) lie outside the column area [{v[8]}, {v[9]})",
    CHUNK_STORED_MAX: lambda v: f"chunk stored length {v[6]} exceeds {C.MAX_CHUNK_STORED} bytes",
    CHUNK_DECODED_MAX: lambda v: f"chunk decoded length {v[6]} exceeds {C.MAX_CHUNK_DECODED} bytes",
    CHUNK_RAW_LENGTHS: lambda v: f"compression 0 requires equal lengths (stored {v[6]}, decoded {v[7]})",
    CHUNK_ENCODING_ROLE: lambda v: (f"encoding {v[6]} is not valid for the {C.ROLE_NAMES[v[4]]} role "
                                    f"(allowed {C.ROLE_ENCODINGS[v[4]]})"),
    CHUNK_DISJOINT: lambda v: (f"chunks must be physically ordered and disjoint: starts at {v[6]}, "
                               f"previous chunk ends at {v[7]}"),
}


def rule_error(code: int, what: str, at: int, vals) -> SamplesError:
    """The error of rule ``code`` broken by ``what`` (a part, a page): ``at`` is the
    child (REF_* and CHILD_* codes of an internal page: -1 for the part's root
    reference), block or descriptor position, ``vals`` the check's values."""
    v = [int(x) for x in vals]
    if code in _REF_MESSAGES:
        cls, msg = _REF_MESSAGES[code]
        where = f"{what} root page reference" if at < 0 else f"{what} child {at}"
        return cls(f"{where}: {msg(v)}")
    if code == CHILD_DISJOINT:
        return CorruptArtifactError(f"{what} child {at}: child byte ranges must be ordered and disjoint: starts at "
                                    f"{v[0]}, previous ends at {v[1]}")
    if code == CHILD_ORDER:
        return CorruptArtifactError(f"{what} child {at}: children follow block order: previous last {_ids(v, 0)} "
                                    f"> first {_ids(v, 2)}")
    if code in _PART_MESSAGES:
        cls, msg = _PART_MESSAGES[code]
        return cls(f"{what}: {msg(v)}" if code != BOUNDARY_CHUNKS else f"{what} {msg(v)}")
    block = f"{what} block {at} (table {v[0]}, tsid {v[1]}, ordinal {v[2]})"
    if code in _BLOCK_MESSAGES:
        return CorruptArtifactError(f"{block}: {_BLOCK_MESSAGES[code](v)}")
    if code == COL_ROLE_UNKNOWN:
        return UnsupportedError(f"{what} block {at} column descriptor {v[3]}: column role {v[4]} is not supported")
    if code in _COLUMN_MESSAGES:
        return CorruptArtifactError(f"{block} column descriptor {v[3]} (role {v[4]}, id {v[5]}): "
                                    f"{_COLUMN_MESSAGES[code](v)}")
    if code == FIRST_ORDINAL:
        return CorruptArtifactError(f"{what} block 0 (table {v[0]}, tsid {v[1]}): the identity's first block must "
                                    f"have ordinal 0, found {v[2]}")
    raise AssertionError(f"rule code {code} has no message")  # pragma: no cover - every code has one
