"""Header, trailer, payload references and metadata pages ("Part file").

Everything here validates untrusted bytes before using them: sizes are bounded
before allocating or decompressing, counts are checked against enclosing bytes
before descriptor tables are built, and descriptor tables are numpy structured
arrays (the only loop over descriptors is a numba walk over a leaf's
variable-size descriptors).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple

import numba
import numpy as np
import xxhash
import zstandard

from ..errors import CorruptArtifactError, UnsupportedError
from . import constants as C
from . import structs as S
from .structs import (BLOCK_PREFIX, COLUMN_DESC, HEADER_STRUCT, PAGE_PREFIX_STRUCT, PAGE_REF_STRUCT, TRAILER_TAIL_OFFSET,
                      TRAILER_TAIL_STRUCT)

#: Largest Zstd window accepted for pages and chunks (a v1 writer never needs more
#: than the 1 MiB chunk limit; this bounds the decoder's allocation).
MAX_ZSTD_WINDOW = 8 * 1024 * 1024
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


def xxh64(data) -> int:
    return xxhash.xxh64_intdigest(data)


# --- References -------------------------------------------------------------------


class PageRef(NamedTuple):
    """A 72-byte page reference, as Python ints (a named tuple: a part's root and
    children are made per part opened, so they must be cheap to build)."""

    first: tuple[int, int]
    last: tuple[int, int]
    min_timestamp: int
    max_timestamp: int
    offset: int
    stored_len: int
    decoded_len: int
    checksum: int
    encoding: int
    compression: int
    reserved: int

    @classmethod
    def from_record(cls, r) -> "PageRef":
        ref = r["ref"]
        return cls(
            (int(r["first_table_id"]), int(r["first_tsid"])),
            (int(r["last_table_id"]), int(r["last_tsid"])),
            int(r["min_timestamp"]),
            int(r["max_timestamp"]),
            int(ref["offset"]),
            int(ref["stored_len"]),
            int(ref["decoded_len"]),
            int(ref["checksum"]),
            int(ref["encoding"]),
            int(ref["compression"]),
            int(ref["reserved"]),
        )

    @classmethod
    def from_bytes(cls, buf, offset: int = 0) -> "PageRef":
        """The 72-byte page reference at ``offset`` of ``buf`` (same values as :meth:`from_record`)."""
        ft, fs, lt, ls, mn, mx, off, sl, dl, ck, enc, comp, res = _PAGE_REF_STRUCT.unpack_from(buf, offset)
        return _new_ref(cls, ((ft, fs), (lt, ls), mn, mx, off, sl, dl, ck, enc, comp, res))

    @property
    def end(self) -> int:
        return self.offset + self.stored_len


_new_ref = tuple.__new__  # PageRef from its 11 values without the keyword-argument __new__

#: PAGE_REF (and the payload reference inside it) as a ``struct`` format.
_PAGE_REF_STRUCT = PAGE_REF_STRUCT
#: TRAILER after its root page reference: depth, version, file_length, payload_end, magic, checksum.
_TRAILER_TAIL = TRAILER_TAIL_STRUCT
_HEADER_STRUCT = HEADER_STRUCT


def check_page_ref(ref: PageRef, area: tuple[int, int], what: str) -> None:
    """Every rule of a page reference that can be checked without loading it."""
    if ref.first > ref.last:
        raise CorruptArtifactError(f"{what}: identifier interval first {ref.first} > last {ref.last}; require first <= last")
    if ref.min_timestamp > ref.max_timestamp:
        raise CorruptArtifactError(
            f"{what}: time interval min_timestamp {ref.min_timestamp} > max_timestamp {ref.max_timestamp}"
        )
    if ref.reserved != 0:
        raise CorruptArtifactError(f"{what}: payload reference reserved field is {ref.reserved}, must be zero")
    if ref.stored_len == 0 or ref.decoded_len == 0:
        raise CorruptArtifactError(
            f"{what}: payload lengths must be nonzero (stored {ref.stored_len}, decoded {ref.decoded_len})"
        )
    if ref.offset + ref.stored_len > C.U64_MAX:
        raise CorruptArtifactError(
            f"{what}: offset {ref.offset} + stored length {ref.stored_len} overflows u64"
        )
    lo, hi = area
    if ref.offset < lo or ref.end > hi:
        raise CorruptArtifactError(
            f"{what}: page bytes [{ref.offset}, {ref.end}) lie outside the metadata area [{lo}, {hi})"
        )
    if ref.encoding != C.META_ENC_PAGE:
        raise UnsupportedError(f"{what}: metadata encoding {ref.encoding} is not supported (expected {C.META_ENC_PAGE})")
    if ref.compression not in C.KNOWN_COMPRESSIONS:
        raise UnsupportedError(f"{what}: compression {ref.compression} is not supported")
    if ref.decoded_len > C.MAX_PAGE_DECODED:
        raise CorruptArtifactError(
            f"{what}: page decoded length {ref.decoded_len} exceeds {C.MAX_PAGE_DECODED} bytes"
        )
    if ref.stored_len > C.MAX_PAGE_STORED:
        raise CorruptArtifactError(f"{what}: page stored length {ref.stored_len} exceeds {C.MAX_PAGE_STORED} bytes")
    if ref.compression == C.COMP_RAW and ref.stored_len != ref.decoded_len:
        raise CorruptArtifactError(
            f"{what}: compression 0 requires equal lengths (stored {ref.stored_len}, decoded {ref.decoded_len})"
        )


def zstd_frame_content_size(frame: bytes, what: str) -> int | None:
    """Validate the frame header cheaply; return the content size if present."""
    if frame[:4] != _ZSTD_MAGIC:
        raise CorruptArtifactError(
            f"{what}: compression 1 requires one Zstd frame; magic is {bytes(frame[:4]).hex()}, expected 28b52ffd"
        )
    try:
        params = zstandard.get_frame_parameters(frame)
    except zstandard.ZstdError as e:
        raise CorruptArtifactError(f"{what}: malformed Zstd frame header: {e}") from None
    if params.dict_id != 0:
        raise CorruptArtifactError(f"{what}: Zstd frame requires dictionary {params.dict_id}; dictionaries are not allowed")
    if params.window_size > MAX_ZSTD_WINDOW:
        raise CorruptArtifactError(
            f"{what}: Zstd window {params.window_size} bytes exceeds the {MAX_ZSTD_WINDOW}-byte limit"
        )
    cs = params.content_size
    return None if cs == zstandard.CONTENTSIZE_UNKNOWN else int(cs)


_DCTX = threading_local = None


def _decompressor():
    import threading

    global _DCTX
    if _DCTX is None:
        _DCTX = threading.local()
    d = getattr(_DCTX, "d", None)
    if d is None:
        d = _DCTX.d = zstandard.ZstdDecompressor(max_window_size=MAX_ZSTD_WINDOW)
    return d


def decompress_exact(stored, declared: int, limit: int, what: str) -> bytes:
    """Zstd-decompress one frame into exactly ``declared`` bytes, bounded output."""
    if declared > limit:
        raise CorruptArtifactError(f"{what}: decoded length {declared} exceeds the limit of {limit} bytes")
    stored = bytes(stored)
    cs = zstd_frame_content_size(stored, what)
    if cs is not None and cs != declared:
        raise CorruptArtifactError(
            f"{what}: Zstd frame content size {cs} differs from the declared decoded length {declared}"
        )
    try:
        out = _decompressor().decompress(stored, max_output_size=declared, allow_extra_data=False)
    except zstandard.ZstdError as e:
        raise CorruptArtifactError(f"{what}: Zstd decompression failed: {e}") from None
    if len(out) != declared:
        raise CorruptArtifactError(f"{what}: decompressed to {len(out)} bytes, expected exactly {declared}")
    return out


def load_payload(stored, ref: PageRef, what: str) -> bytes:
    """Checksum, then decompress a page to exactly its decoded length."""
    got = xxh64(stored)
    if got != ref.checksum:
        raise CorruptArtifactError(f"{what}: XXH64 of the stored bytes is {got:#018x}, reference says {ref.checksum:#018x}")
    if ref.compression == C.COMP_RAW:
        return bytes(stored)
    return decompress_exact(stored, ref.decoded_len, C.MAX_PAGE_DECODED, what)


# --- Header and trailer -----------------------------------------------------------


def parse_header(buf: bytes, what: str) -> int:
    if len(buf) != C.HEADER_SIZE:
        raise CorruptArtifactError(f"{what}: header is {len(buf)} bytes, expected {C.HEADER_SIZE}")
    magic, version, reserved = _HEADER_STRUCT.unpack_from(buf)
    if magic != C.MAGIC:
        raise CorruptArtifactError(f"{what}: header magic is {bytes(buf[:8])!r}, expected {C.MAGIC!r}")
    if version != C.FILE_VERSION:
        raise UnsupportedError(f"{what}: header file version {version} is not supported (expected {C.FILE_VERSION})")
    if reserved != 0:
        raise CorruptArtifactError(f"{what}: header reserved field is {reserved}, must be zero")
    return version


class Trailer(NamedTuple):
    root: PageRef
    depth: int
    version: int
    file_length: int
    payload_end: int

    @property
    def metadata_area(self) -> tuple[int, int]:
        return (self.payload_end, self.file_length - C.TRAILER_SIZE)

    @property
    def column_area(self) -> tuple[int, int]:
        return (C.HEADER_SIZE, self.payload_end)


def parse_trailer(buf: bytes, file_size: int, part, what: str) -> Trailer:
    """Every check of "Trailer" before traversal; ``part`` is the manifest PartDescriptor."""
    if len(buf) != C.TRAILER_SIZE:
        raise CorruptArtifactError(f"{what}: trailer is {len(buf)} bytes, expected {C.TRAILER_SIZE}")
    got = xxh64(buf[: C.TRAILER_CHECKSUMMED])
    depth, version, file_length, payload_end, magic, checksum = _TRAILER_TAIL.unpack_from(buf, TRAILER_TAIL_OFFSET)
    if got != checksum:
        raise CorruptArtifactError(
            f"{what}: trailer checksum is {checksum:#018x}, XXH64 of the first 104 bytes is {got:#018x}"
        )
    if magic != C.MAGIC:
        raise CorruptArtifactError(f"{what}: trailer magic is {bytes(buf[96:104])!r}, expected {C.MAGIC!r}")
    if version != C.FILE_VERSION:
        raise UnsupportedError(f"{what}: trailer file version {version} is not supported (expected {C.FILE_VERSION})")
    if file_length != file_size:
        raise CorruptArtifactError(f"{what}: trailer file length {file_length} differs from the recorded size {file_size}")
    if depth not in C.SUPPORTED_DEPTHS:
        raise UnsupportedError(f"{what}: index depth {depth} is not supported (version 1 reads depth 1 or 2)")
    meta_end = file_length - C.TRAILER_SIZE
    if not C.HEADER_SIZE <= payload_end <= meta_end:
        raise CorruptArtifactError(
            f"{what}: payload_end {payload_end} lies outside [{C.HEADER_SIZE}, {meta_end}] (header end .. trailer start)"
        )
    root = PageRef.from_bytes(buf, 0)
    check_page_ref(root, (payload_end, meta_end), f"{what} root page reference")
    if (root.first, root.last, root.min_timestamp, root.max_timestamp) != (
        part.first, part.last, part.min_timestamp, part.max_timestamp
    ):
        raise CorruptArtifactError(
            f"{what}: root bounds ids [{root.first}, {root.last}] times [{root.min_timestamp}, {root.max_timestamp}] "
            f"differ from the manifest part descriptor ids [{part.first}, {part.last}] "
            f"times [{part.min_timestamp}, {part.max_timestamp}]"
        )
    if root.end != meta_end:
        raise CorruptArtifactError(
            f"{what}: the root page must end immediately before the trailer: it ends at {root.end}, trailer starts at {meta_end}"
        )
    return Trailer(root, depth, version, file_length, payload_end)


# --- Pages ---------------------------------------------------------------------


_PAGE_PREFIX_STRUCT = PAGE_PREFIX_STRUCT


def _prefix(data: bytes, what: str) -> tuple[int, int]:
    if len(data) < C.PAGE_PREFIX_SIZE:
        raise CorruptArtifactError(f"{what}: decoded page is {len(data)} bytes, shorter than the 12-byte prefix")
    kind, count = _PAGE_PREFIX_STRUCT.unpack_from(data)
    if count == 0:
        raise CorruptArtifactError(f"{what}: pages are nonempty; entry_count is 0")
    return kind, count


def _check_kind(kind: int, expected: int, what: str) -> None:
    if kind != expected:
        names = {C.PAGE_KIND_LEAF: "leaf (0)", C.PAGE_KIND_INTERNAL: "internal (1)"}
        raise CorruptArtifactError(f"{what}: page kind {kind}, expected {names[expected]}")


def parse_internal_page(data: bytes, ref: PageRef, area: tuple[int, int], what: str) -> list[PageRef]:
    """An internal root: child leaf references, validated against each other and the parent."""
    kind, count = _prefix(data, what)
    _check_kind(kind, C.PAGE_KIND_INTERNAL, what)
    expected = C.PAGE_PREFIX_SIZE + C.PAGE_REF_SIZE * count if count <= C.MAX_INTERNAL_ENTRIES else -1
    if expected != len(data):
        raise CorruptArtifactError(
            f"{what}: internal page with entry_count {count} must be 12 + 72 * {count} bytes; decoded length is {len(data)}"
        )
    children = [_new_ref(PageRef, ((ft, fs), (lt, ls), mn, mx, off, sl, dl, ck, enc, comp, res))  # at most 910
                for ft, fs, lt, ls, mn, mx, off, sl, dl, ck, enc, comp, res
                in _PAGE_REF_STRUCT.iter_unpack(memoryview(data)[C.PAGE_PREFIX_SIZE:])]
    lo, _hi = area
    prev = None
    for i, c in enumerate(children):
        cw = f"{what} child {i}"
        check_page_ref(c, (lo, ref.offset), cw)  # children precede the parent
        if prev is not None:
            if c.offset < prev.end:
                raise CorruptArtifactError(
                    f"{cw}: child byte ranges must be ordered and disjoint: starts at {c.offset}, previous ends at {prev.end}"
                )
            if prev.last > c.first:
                raise CorruptArtifactError(
                    f"{cw}: children follow block order: previous last {prev.last} > first {c.first}"
                )
        prev = c
    derived = (
        children[0].first,
        children[-1].last,
        min(c.min_timestamp for c in children),
        max(c.max_timestamp for c in children),
    )
    _check_bounds(derived, ref, what)
    return children


def _check_bounds(derived, ref: PageRef, what: str) -> None:
    want = (ref.first, ref.last, ref.min_timestamp, ref.max_timestamp)
    if tuple(derived) != want:
        raise CorruptArtifactError(
            f"{what}: derived bounds ids [{derived[0]}, {derived[1]}] times [{derived[2]}, {derived[3]}] "
            f"differ from its reference's ids [{want[0]}, {want[1]}] times [{want[2]}, {want[3]}]"
        )


@numba.njit(cache=True, nogil=True)
def _walk_leaf(buf, count):  # pragma: no cover - numba
    """Start offsets of ``count`` variable-size block descriptors.

    status: 0 ok, 1 a descriptor runs past the page, 2 trailing bytes.
    """
    n = buf.shape[0]
    starts = np.empty(count, np.int64)
    pos = 12
    for i in range(count):
        if pos + 44 > n:
            return starts, 1, i
        cc = np.int64(buf[pos + 40]) | (np.int64(buf[pos + 41]) << 8) | (np.int64(buf[pos + 42]) << 16) | (
            np.int64(buf[pos + 43]) << 24
        )
        size = 44 + 44 * cc
        if pos + size > n:
            return starts, 1, i
        starts[i] = pos
        pos += size
    if pos != n:
        return starts, 2, count
    return starts, 0, count


@dataclasses.dataclass
class LeafPage:
    """A validated leaf: block prefixes plus a flat table of column descriptors."""

    blocks: np.ndarray  # BLOCK_PREFIX, one per block
    columns: np.ndarray  # COLUMN_DESC, all blocks' descriptors in order
    col_start: np.ndarray  # int64: index of each block's first column descriptor

    @functools.cached_property
    def col_block(self) -> np.ndarray:
        """int64: the block index of each column descriptor (made when first asked for:
        reads never need it, and a cold region query parses a leaf per artifact)."""
        return np.repeat(np.arange(self.blocks.shape[0], dtype=np.int64),
                         self.blocks["column_count"].astype(np.int64))

    @property
    def num_rows(self) -> int:
        return int(self.blocks["row_count"].sum(dtype=np.uint64))


def _gather(data: np.ndarray, starts: np.ndarray, width: int, dtype: np.dtype) -> np.ndarray:
    idx = starts[:, None] + np.arange(width, dtype=np.int64)[None, :]
    return np.ascontiguousarray(data[idx]).view(dtype).reshape(starts.shape[0])


def parse_leaf_page(data: bytes, ref: PageRef, manifest, column_area: tuple[int, int], what: str) -> LeafPage:
    """Parse and validate a leaf page against its reference and the manifest.

    One numba pass (:func:`_leaf_kernel`) walks the descriptors, copies them into
    the output tables and checks every rule of :func:`_parse_leaf_page_checked`;
    a page it does not accept goes through that function, which names the first
    broken rule (and returns the page, should the kernel have refused a valid one).
    """
    kind, count = _prefix(data, what)
    _check_kind(kind, C.PAGE_KIND_LEAF, what)
    if count <= (len(data) - C.PAGE_PREFIX_SIZE) // C.MIN_BLOCK_DESC_SIZE:
        n_fields, cap, sorted_ids, order = _field_tables(manifest.fields)
        lo, hi = column_area
        (ft, fs), (lt, ls) = ref.first, ref.last
        if len(data) % 4 == 0 and 0 <= lo <= hi <= C.U64_MAX and fs <= C.U64_MAX and ls <= C.U64_MAX:
            status, blocks, cols, col_start = _leaf_kernel(
                np.frombuffer(data, dtype="<u4"), count, n_fields, cap,
                manifest.timestamp.column_id, sorted_ids, order, np.uint64(lo), np.uint64(hi),
                ft, np.uint64(fs), lt, np.uint64(ls), ref.min_timestamp, ref.max_timestamp, _ALLOWED_ENCODINGS,
            )
            if status == 0:
                return LeafPage(blocks.view(BLOCK_PREFIX), cols.view(COLUMN_DESC), col_start)
    return _parse_leaf_page_checked(data, ref, manifest, column_area, what)


_FIELD_TABLES: dict = {}


def _field_tables(fields) -> tuple:
    """(field count, block row cap, sorted field IDs, their manifest indices) for
    the leaf kernel, made once per manifest field list (keyed by identity: each
    value keeps its list alive, so an id is never reused while cached)."""
    hit = _FIELD_TABLES.get(id(fields))
    if hit is not None and hit[0] is fields:
        return hit[1]
    field_ids = np.array([f.column_id for f in fields], dtype=np.int64)
    order = np.argsort(field_ids, kind="stable")
    tables = (len(fields), _max_block_rows(len(fields)), field_ids[order], order)
    if len(_FIELD_TABLES) >= 1024:
        _FIELD_TABLES.clear()
    _FIELD_TABLES[id(fields)] = (fields, tables)
    return tables


def _max_block_rows(n_fields: int, _memo: dict = {}) -> int:  # noqa: B006 - a memo
    cap = _memo.get(n_fields)
    if cap is None:
        cap = _memo[n_fields] = C.max_block_rows(n_fields)
    return cap


def _parse_leaf_page_checked(data: bytes, ref: PageRef, manifest, column_area: tuple[int, int],
                             what: str) -> LeafPage:
    """:func:`parse_leaf_page` rule by rule (numpy): the first broken rule raises."""
    kind, count = _prefix(data, what)
    _check_kind(kind, C.PAGE_KIND_LEAF, what)
    max_count = (len(data) - C.PAGE_PREFIX_SIZE) // C.MIN_BLOCK_DESC_SIZE
    if count > max_count:
        raise CorruptArtifactError(
            f"{what}: entry_count {count} cannot fit in {len(data)} bytes (at most {max_count} descriptors of >= {C.MIN_BLOCK_DESC_SIZE} bytes)"
        )
    buf = np.frombuffer(data, dtype=np.uint8)
    starts, status, at = _walk_leaf(buf, count)
    if status == 1:
        raise CorruptArtifactError(f"{what}: block descriptor {at} runs past the end of the {len(data)}-byte page")
    if status == 2:
        raise CorruptArtifactError(f"{what}: trailing bytes after {count} block descriptors")
    blocks = _gather(buf, starts, C.BLOCK_PREFIX_SIZE, BLOCK_PREFIX)
    ccount = blocks["column_count"].astype(np.int64)
    n_fields = len(manifest.fields)
    rows = blocks["row_count"].astype(np.int64)

    def fail_block(mask, rule):
        i = int(np.flatnonzero(mask)[0])
        b = blocks[i]
        raise CorruptArtifactError(
            f"{what} block {i} (table {int(b['table_id'])}, tsid {int(b['tsid'])}, ordinal {int(b['ordinal'])}): {rule(i)}"
        )

    cap = C.max_block_rows(n_fields)
    bad = rows == 0
    if bad.any():
        fail_block(bad, lambda i: "row count must be nonzero")
    bad = rows > cap
    if bad.any():
        fail_block(
            bad,
            lambda i: f"row count {rows[i]} exceeds the cap of {cap} rows for {n_fields} fields "
            f"(row limit {C.MAX_BLOCK_ROWS} and {C.MAX_BLOCK_DECODED_BYTES}-byte decoded-size formula: "
            f"{C.block_decoded_size(int(rows[i]), n_fields)} bytes)",
        )
    bad = blocks["min_timestamp"] > blocks["max_timestamp"]
    if bad.any():
        fail_block(bad, lambda i: f"min_timestamp {blocks['min_timestamp'][i]} > max_timestamp {blocks['max_timestamp'][i]}")
    bad = (ccount < 3) | (ccount > 3 + n_fields)
    if bad.any():
        fail_block(bad, lambda i: f"column count {ccount[i]} must be 3 + present fields (3..={3 + n_fields})")

    # Column descriptors: flat table, block index and position within the block.
    col_start = np.zeros(count, np.int64)
    col_start[1:] = np.cumsum(ccount)[:-1]
    total = int(ccount.sum())
    col_block = np.repeat(np.arange(count, dtype=np.int64), ccount)
    col_pos = np.arange(total, dtype=np.int64) - col_start[col_block]
    cstarts = starts[col_block] + C.BLOCK_PREFIX_SIZE + C.COLUMN_DESC_SIZE * col_pos
    cols = _gather(buf, cstarts, C.COLUMN_DESC_SIZE, COLUMN_DESC)
    role = cols["role"].astype(np.int64)
    cid = cols["column_id"].astype(np.int64)
    r = cols["ref"]

    def fail_col(mask, rule):
        j = int(np.flatnonzero(mask)[0])
        i = int(col_block[j])
        b = blocks[i]
        raise CorruptArtifactError(
            f"{what} block {i} (table {int(b['table_id'])}, tsid {int(b['tsid'])}, ordinal {int(b['ordinal'])}) "
            f"column descriptor {int(col_pos[j])} (role {role[j]}, id {cid[j]}): {rule(j)}"
        )

    # Roles: unknown roles are unsupported; mandatory columns first, in order.
    unknown = ~np.isin(role, C.KNOWN_ROLES)
    if unknown.any():
        j = int(np.flatnonzero(unknown)[0])
        raise UnsupportedError(
            f"{what} block {int(col_block[j])} column descriptor {int(col_pos[j])}: column role {role[j]} is not supported"
        )
    expected_role = np.where(col_pos < 3, col_pos + 1, C.ROLE_FIELD)
    bad = role != expected_role
    if bad.any():
        fail_col(bad, lambda j: f"role must be {expected_role[j]} ({C.ROLE_NAMES[int(expected_role[j])]}): "
                 "time, sequence and operation come first, then value fields")
    ts_id = manifest.timestamp.column_id
    bad = ((role == C.ROLE_TIMESTAMP) & (cid != ts_id)) | (((role == C.ROLE_SEQUENCE) | (role == C.ROLE_OP_TYPE)) & (cid != 0))
    if bad.any():
        fail_col(bad, lambda j: f"column ID must be {ts_id if role[j] == C.ROLE_TIMESTAMP else 0}")
    nulls = cols["null_count"].astype(np.int64)
    bad = (role != C.ROLE_FIELD) & (nulls != 0)
    if bad.any():
        fail_col(bad, lambda j: f"null count {nulls[j]} must be zero for time, sequence and operation")
    # Value fields: known IDs in manifest order, no repeats; present chunks have a non-null.
    field_ids = np.array([f.column_id for f in manifest.fields], dtype=np.int64)
    order = np.argsort(field_ids, kind="stable")
    is_field = role == C.ROLE_FIELD
    pos_sorted = np.searchsorted(field_ids[order], cid)
    pos_sorted = np.minimum(pos_sorted, len(field_ids) - 1)
    known = field_ids[order][pos_sorted] == cid
    bad = is_field & ~known
    if bad.any():
        fail_col(bad, lambda j: f"field column ID {cid[j]} is not in the manifest")
    field_index = np.where(is_field, order[pos_sorted], -1)
    prev_same_block = np.zeros(total, dtype=bool)
    prev_same_block[1:] = col_block[1:] == col_block[:-1]
    prev_fi = np.full(total, -1, np.int64)
    prev_fi[1:] = field_index[:-1]
    bad = is_field & prev_same_block & (field_index <= prev_fi)
    if bad.any():
        fail_col(bad, lambda j: "value descriptors follow manifest order with no repeated IDs")
    bad = is_field & (nulls >= rows[col_block])
    if bad.any():
        fail_col(bad, lambda j: f"present value chunks need null_count < row_count ({nulls[j]} >= {rows[col_block[j]]})")

    # Payload references: reserved, lengths, overflow, area, limits, raw lengths, role/encoding.
    off = r["offset"]
    stored = r["stored_len"].astype(np.uint64)
    dec = r["decoded_len"].astype(np.int64)
    bad = r["reserved"] != 0
    if bad.any():
        fail_col(bad, lambda j: f"payload reference reserved field is {int(r['reserved'][j])}, must be zero")
    bad = (r["stored_len"] == 0) | (r["decoded_len"] == 0)
    if bad.any():
        fail_col(bad, lambda j: f"payload lengths must be nonzero (stored {int(stored[j])}, decoded {dec[j]})")
    bad = off > np.uint64(C.U64_MAX) - stored
    if bad.any():
        fail_col(bad, lambda j: f"offset {int(off[j])} + stored length {int(stored[j])} overflows u64")
    end = off + stored
    lo, hi = column_area
    bad = (off < np.uint64(lo)) | (end > np.uint64(hi))
    if bad.any():
        fail_col(bad, lambda j: f"chunk bytes [{int(off[j])}, {int(end[j])}) lie outside the column area [{lo}, {hi})")
    bad = r["stored_len"] > C.MAX_CHUNK_STORED
    if bad.any():
        fail_col(bad, lambda j: f"chunk stored length {int(stored[j])} exceeds {C.MAX_CHUNK_STORED} bytes")
    bad = dec > C.MAX_CHUNK_DECODED
    if bad.any():
        fail_col(bad, lambda j: f"chunk decoded length {dec[j]} exceeds {C.MAX_CHUNK_DECODED} bytes")
    comp = r["compression"].astype(np.int64)
    bad = (comp == C.COMP_RAW) & (r["stored_len"] != r["decoded_len"])
    if bad.any():
        fail_col(bad, lambda j: f"compression 0 requires equal lengths (stored {int(stored[j])}, decoded {dec[j]})")
    enc = r["encoding"].astype(np.int64)
    known_enc = np.isin(enc, C.KNOWN_COLUMN_ENCODINGS)
    allowed = np.zeros((5, 8), dtype=bool)
    for rl, encs in C.ROLE_ENCODINGS.items():
        allowed[rl, list(encs)] = True
    bad = known_enc & ~allowed[role, np.where(known_enc, enc, 0)]
    if bad.any():
        fail_col(bad, lambda j: f"encoding {enc[j]} is not valid for the {C.ROLE_NAMES[int(role[j])]} role "
                 f"(allowed {C.ROLE_ENCODINGS[int(role[j])]})")
    # Chunks physically ordered and disjoint within the page.
    if total > 1:
        bad = np.zeros(total, dtype=bool)
        bad[1:] = off[1:] < end[:-1]
        if bad.any():
            fail_col(bad, lambda j: f"chunks must be physically ordered and disjoint: starts at {int(off[j])}, "
                     f"previous chunk ends at {int(end[j - 1])}")

    # Block order, ordinals and the adjacent-block time rule inside the page.
    check_block_sequence(blocks, what)
    derived = (
        (int(blocks["table_id"][0]), int(blocks["tsid"][0])),
        (int(blocks["table_id"][-1]), int(blocks["tsid"][-1])),
        int(blocks["min_timestamp"].min()),
        int(blocks["max_timestamp"].max()),
    )
    _check_bounds(derived, ref, what)
    return LeafPage(blocks, cols, col_start)


#: [role, encoding] -> 1: valid for the role; 0: a known encoding the role does not allow;
#: 2: an unknown encoding (accepted here: it fails only when its chunk is decoded).
#: Encodings past the table's width are unknown too.
_ALLOWED_ENCODINGS = np.full((max(C.KNOWN_ROLES) + 1, max(C.KNOWN_COLUMN_ENCODINGS) + 1), 2, dtype=np.uint8)
_ALLOWED_ENCODINGS[:, list(C.KNOWN_COLUMN_ENCODINGS)] = 0
for _rl, _encs in C.ROLE_ENCODINGS.items():
    _ALLOWED_ENCODINGS[_rl, list(_encs)] = 1
del _rl, _encs
_U64_MAX = np.uint64(C.U64_MAX)
_MAX_CHUNK_STORED = np.uint64(C.MAX_CHUNK_STORED)
_MAX_CHUNK_DECODED = np.uint64(C.MAX_CHUNK_DECODED)


@numba.njit(cache=True, nogil=True, inline="always")
def _w64(w, k):  # pragma: no cover - numba
    """The little-endian u64 in 32-bit words ``k`` and ``k + 1``."""
    return np.uint64(w[np.uint64(k)]) | (np.uint64(w[np.uint64(k + 1)]) << np.uint64(32))


@numba.njit(cache=True, nogil=True)
def _leaf_kernel(w, count, n_fields, cap, ts_id, sorted_ids, order, lo, hi,
                 ref_ft, ref_fs, ref_lt, ref_ls, ref_mn, ref_mx, allowed):  # pragma: no cover - numba
    """Walk, copy and check a leaf page in one pass (the rules of ``_parse_leaf_page_checked``).

    ``w``: the decoded page as little-endian u32 words (every descriptor field
    of a leaf lies on a 4-byte boundary).  Returns (status, block prefixes and
    column descriptors as u32 words, col_start); status 0: every
    rule holds; nonzero: some rule may be broken (the caller runs the
    rule-by-rule check, which names it).  Unsigned 64-bit values are only
    compared with unsigned ones.  Word indices are cast to unsigned: numba
    then omits the negative-index wraparound test on every access (they are
    never negative: the walk bounds every descriptor), ~25% of the kernel.
    """
    n = w.shape[0]  # words
    empty = np.empty(0, np.uint32)
    empty_i = np.empty(0, np.int64)
    starts = np.empty(count, np.int64)
    pos = S.PAGE_PREFIX_WORDS
    total = 0
    for i in range(count):
        if pos + S.BLOCK_PREFIX_WORDS > n:
            return 1, empty, empty, empty_i
        cc = np.int64(w[np.uint64(pos + S.BP_COLUMN_COUNT)])
        size = S.BLOCK_PREFIX_WORDS + S.COLUMN_DESC_WORDS * cc
        if pos + size > n:
            return 1, empty, empty, empty_i
        starts[i] = pos
        pos += size
        total += cc
    if pos != n:
        return 2, empty, empty, empty_i
    blocks = np.empty(count * S.BLOCK_PREFIX_WORDS, np.uint32)
    cols = np.empty(total * S.COLUMN_DESC_WORDS, np.uint32)
    col_start = np.empty(count, np.int64)
    n_ids = sorted_ids.shape[0]
    n_enc = allowed.shape[1]
    j = 0
    prev_end = np.uint64(0)
    p_tid = np.int64(0)
    p_tsid = np.uint64(0)
    p_ord = np.uint64(0)
    p_mx = np.int64(0)
    mn_all = np.int64(0)
    mx_all = np.int64(0)
    for i in range(count):
        s = starts[i]
        for k in range(S.BLOCK_PREFIX_WORDS):
            blocks[np.uint64(i * S.BLOCK_PREFIX_WORDS + k)] = w[np.uint64(s + k)]
        tid = np.int64(w[np.uint64(s + S.BP_TABLE_ID)])
        tsid = _w64(w, s + S.BP_TSID)
        mn = np.int64(_w64(w, s + S.BP_MIN_TIMESTAMP))
        mx = np.int64(_w64(w, s + S.BP_MAX_TIMESTAMP))
        ordn = _w64(w, s + S.BP_ORDINAL)
        rows = np.int64(w[np.uint64(s + S.BP_ROW_COUNT)])
        cc = np.int64(w[np.uint64(s + S.BP_COLUMN_COUNT)])
        if rows == 0 or rows > cap or mn > mx or cc < 3 or cc > 3 + n_fields:
            return 3, empty, empty, empty_i
        if i == 0:
            if tid != ref_ft or tsid != ref_fs:
                return 4, empty, empty, empty_i
            mn_all = mn
            mx_all = mx
        else:
            if tid < p_tid or (tid == p_tid and tsid < p_tsid):
                return 5, empty, empty, empty_i
            if tid == p_tid and tsid == p_tsid:
                if p_ord == _U64_MAX or ordn != p_ord + np.uint64(1) or p_mx > mn:
                    return 5, empty, empty, empty_i
            elif ordn != np.uint64(0):
                return 5, empty, empty, empty_i
            if mn < mn_all:
                mn_all = mn
            if mx > mx_all:
                mx_all = mx
        p_tid = tid
        p_tsid = tsid
        p_ord = ordn
        p_mx = mx
        col_start[i] = j
        prev_fi = np.int64(-1)
        for q in range(cc):
            c = s + S.BLOCK_PREFIX_WORDS + S.COLUMN_DESC_WORDS * q
            for k in range(S.COLUMN_DESC_WORDS):
                cols[np.uint64(j * S.COLUMN_DESC_WORDS + k)] = w[np.uint64(c + k)]
            role = np.int64(w[np.uint64(c + S.CD_ROLE)])
            cid = np.int64(w[np.uint64(c + S.CD_COLUMN_ID)])
            off = _w64(w, c + S.CD_OFFSET)
            stored = np.uint64(w[np.uint64(c + S.CD_STORED_LEN)])
            dec = np.uint64(w[np.uint64(c + S.CD_DECODED_LEN)])
            enc = np.int64(w[np.uint64(c + S.CD_CODECS)] & np.uint32(0xFFFF))
            comp = np.int64(w[np.uint64(c + S.CD_CODECS)] >> np.uint32(16))
            reserved = w[np.uint64(c + S.CD_RESERVED)]
            nulls = np.int64(w[np.uint64(c + S.CD_NULL_COUNT)])
            expected = q + 1 if q < 3 else 4
            if role != expected:
                return 6, empty, empty, empty_i
            if role == 1:
                if cid != ts_id or nulls != 0:
                    return 6, empty, empty, empty_i
            elif role == 4:
                a = 0
                b = n_ids
                while a < b:  # searchsorted(sorted_ids, cid, "left")
                    m = (a + b) >> 1
                    if sorted_ids[m] < cid:
                        a = m + 1
                    else:
                        b = m
                if a >= n_ids or sorted_ids[a] != cid:
                    return 6, empty, empty, empty_i
                fi = order[a]
                if fi <= prev_fi or nulls >= rows:
                    return 6, empty, empty, empty_i
                prev_fi = fi
            elif cid != 0 or nulls != 0:
                return 6, empty, empty, empty_i
            if reserved != 0 or stored == np.uint64(0) or dec == np.uint64(0):
                return 7, empty, empty, empty_i
            if off > _U64_MAX - stored:
                return 7, empty, empty, empty_i
            end = off + stored
            if off < lo or end > hi:
                return 7, empty, empty, empty_i
            if stored > _MAX_CHUNK_STORED or dec > _MAX_CHUNK_DECODED:
                return 7, empty, empty, empty_i
            if comp == 0 and stored != dec:
                return 7, empty, empty, empty_i
            if enc < n_enc and allowed[role, enc] == 0:
                return 8, empty, empty, empty_i
            if j > 0 and off < prev_end:
                return 9, empty, empty, empty_i
            prev_end = end
            j += 1
    if p_tid != ref_lt or p_tsid != ref_ls or mn_all != ref_mn or mx_all != ref_mx:
        return 4, empty, empty, empty_i
    return 0, blocks, cols, col_start


def check_block_sequence(blocks: np.ndarray, what: str, first_index: int = 0) -> None:
    """Adjacent blocks: identity order, ordinals +1 / restart at 0, time rule."""
    if blocks.shape[0] < 2:
        return
    t = blocks["table_id"]
    s = blocks["tsid"]
    same = (t[1:] == t[:-1]) & (s[1:] == s[:-1])
    less = (t[1:] < t[:-1]) | ((t[1:] == t[:-1]) & (s[1:] < s[:-1]))
    ords = blocks["ordinal"]
    mn, mx = blocks["min_timestamp"], blocks["max_timestamp"]

    def fail(mask, rule):
        i = int(np.flatnonzero(mask)[0]) + 1
        b = blocks[i]
        raise CorruptArtifactError(
            f"{what} block {i + first_index} (table {int(b['table_id'])}, tsid {int(b['tsid'])}, "
            f"ordinal {int(b['ordinal'])}): {rule(i)}"
        )

    if less.any():
        fail(less, lambda i: f"blocks sort by (table_id, tsid, min_timestamp, ordinal); previous identity "
             f"({int(t[i - 1])}, {int(s[i - 1])}) is greater")
    bad = same & (ords[1:] != ords[:-1] + np.uint64(1))
    if bad.any():
        fail(bad, lambda i: f"ordinals increase by one per identity: expected {int(ords[i - 1]) + 1}")
    bad = ~same & (ords[1:] != 0)
    if bad.any():
        fail(bad, lambda i: "ordinals start at zero for each identity: expected 0")
    bad = same & (mx[:-1] > mn[1:])
    if bad.any():
        fail(bad, lambda i: f"adjacent blocks of a series need previous.max_timestamp <= next.min_timestamp "
             f"({int(mx[i - 1])} > {int(mn[i])})")
