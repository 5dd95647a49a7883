"""The part-file rules written out one by one (pure Python and numpy): the reference the
kernels of ``gtsamples.format.pages`` are tested against.

The reader checks headers, trailers, references and pages in numba kernels that
return a rule code, and builds the message from the code
(:mod:`gtsamples.format.rules`).  These functions are the rules as the reader
checked them before that (``format/pages.py`` up to the navigator's rework): each
raises the first broken rule's error, and tests compare the kernels' verdicts
and messages with theirs on valid, corrupted, mutated and random inputs.
"""

from __future__ import annotations

import struct

import numpy as np

from gtsamples.errors import CorruptArtifactError, UnsupportedError
from gtsamples.format import constants as C
from gtsamples.format.pages import LeafPage, PageRef, Trailer, xxh64
from gtsamples.format.zstd import decompress_exact
from gtsamples.format.structs import BLOCK_PREFIX, COLUMN_DESC

_PAGE_REF_STRUCT = struct.Struct("<IQIQqqQIIQHHI")
_TRAILER_TAIL = struct.Struct("<IIQQ8sQ")
_HEADER_STRUCT = struct.Struct("<8sII")
_new_ref = tuple.__new__


def _page_ref(buf, offset: int) -> PageRef:
    ft, fs, lt, ls, mn, mx, off, sl, dl, ck, enc, comp, res = _PAGE_REF_STRUCT.unpack_from(buf, offset)
    return _new_ref(PageRef, ((ft, fs), (lt, ls), mn, mx, off, sl, dl, ck, enc, comp, res))


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


def load_payload(stored, ref: PageRef, what: str) -> bytes:
    """Checksum, then decompress a page to exactly its decoded length."""
    got = xxh64(stored)
    if got != ref.checksum:
        raise CorruptArtifactError(f"{what}: XXH64 of the stored bytes is {got:#018x}, reference says {ref.checksum:#018x}")
    if ref.compression == C.COMP_RAW:
        return bytes(stored)
    return decompress_exact(stored, ref.decoded_len, C.MAX_PAGE_DECODED, what)


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


def parse_trailer(buf: bytes, file_size: int, part, what: str) -> Trailer:
    """Every check of "Trailer" before traversal; ``part`` is the manifest PartDescriptor."""
    if len(buf) != C.TRAILER_SIZE:
        raise CorruptArtifactError(f"{what}: trailer is {len(buf)} bytes, expected {C.TRAILER_SIZE}")
    got = xxh64(buf[: C.TRAILER_CHECKSUMMED])
    depth, version, file_length, payload_end, magic, checksum = _TRAILER_TAIL.unpack_from(buf, C.PAGE_REF_SIZE)
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
    root = _page_ref(buf, 0)
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


_PAGE_PREFIX_STRUCT = struct.Struct("<IQ")


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


def _walk_leaf(buf, count):
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


def _gather(data: np.ndarray, starts: np.ndarray, width: int, dtype: np.dtype) -> np.ndarray:
    idx = starts[:, None] + np.arange(width, dtype=np.int64)[None, :]
    return np.ascontiguousarray(data[idx]).view(dtype).reshape(starts.shape[0])


def parse_leaf_page(data: bytes, ref: PageRef, manifest, column_area: tuple[int, int], what: str) -> LeafPage:
    """A leaf page rule by rule (numpy): the first broken rule raises."""
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
    bad = same & ((ords[:-1] == np.uint64(C.U64_MAX)) | (ords[1:] != ords[:-1] + np.uint64(1)))  # (no u64 wrap)
    if bad.any():
        fail(bad, lambda i: f"ordinals increase by one per identity: expected {int(ords[i - 1]) + 1}")
    bad = ~same & (ords[1:] != 0)
    if bad.any():
        fail(bad, lambda i: "ordinals start at zero for each identity: expected 0")
    bad = same & (mx[:-1] > mn[1:])
    if bad.any():
        fail(bad, lambda i: f"adjacent blocks of a series need previous.max_timestamp <= next.min_timestamp "
             f"({int(mx[i - 1])} > {int(mn[i])})")


def check_first_ordinal(leaf: LeafPage, prev_last, what: str) -> None:
    """A page's first block continues the previous page's (or part's) last identity, or
    starts its own at ordinal 0 (``prev_last``: that identity, None for the first part)."""
    tid, tsid, _mn, _mx, ordinal, _rows, _cols = leaf.blocks[0].item()
    if (tid, tsid) != prev_last and ordinal != 0:
        raise CorruptArtifactError(
            f"{what} block 0 (table {tid}, tsid {tsid}): the identity's first block must have "
            f"ordinal 0, found {ordinal}"
        )


def check_boundary(prev: LeafPage, cur: LeafPage, what: str, same_part: bool) -> None:
    """Rules between the last block of one page and the first of the next."""
    pair = np.concatenate([prev.blocks[-1:], cur.blocks[:1]])
    check_block_sequence(pair, f"{what} (boundary with the previous page)", first_index=-1)
    if same_part:
        pr = prev.columns["ref"][-1]
        nr = cur.columns["ref"][0]
        end = int(pr["offset"]) + int(pr["stored_len"])
        if int(nr["offset"]) < end:
            raise CorruptArtifactError(
                f"{what} block 0: chunks must be physically ordered and disjoint across blocks: "
                f"first chunk starts at {int(nr['offset'])}, previous page's last chunk ends at {end}"
            )


# --- navigation ------------------------------------------------------------------------


def navigate(art, sel, stats, cache=None) -> list:
    """An artifact's navigation written out part by part and page by page with the
    checkers above, as ``Artifact.navigate`` was before the batch navigator: the
    selected leaves (``gtsamples.plan.SelectedLeaf``) or the first broken rule's error,
    and the reads counted in ``stats`` as the reader counts them (``cache``: a dict
    standing for the page cache, keyed by ``(part, offset)``; -1: the part)."""
    from gtsamples.plan import SelectedLeaf
    from gtsamples.storage import LOCAL_COALESCE_GAP

    cache = {} if cache is None else cache
    m = art.manifest
    out: list = []
    if sel.is_empty:
        return out
    n_leaves: dict = {}
    for i in sel.part_indices(m.files):
        what = art.store.path(art.part_key(i))
        desc = m.files[i]
        prev_part_last = None if i == 0 else m.files[i - 1].last
        with art.store.reader(art.part_key(i), stats) as rd:
            part = cache.get((i, -1))
            stats.cache_hits += part is not None
            stats.cache_misses += part is None
            if part is None:
                size = art.part_sizes[i]
                header, trailer_bytes = rd.read_ranges([0, size - C.TRAILER_SIZE], [C.HEADER_SIZE, C.TRAILER_SIZE],
                                                       LOCAL_COALESCE_GAP)
                stats.metadata_bytes += C.HEADER_SIZE + C.TRAILER_SIZE
                trailer = parse_trailer(trailer_bytes, size, desc, what)
                parse_header(header, what)
                root = trailer.root
                stored = rd.read(root.offset, root.stored_len)
                stats.metadata_bytes += root.stored_len
                stats.pages_loaded += 1
                data = load_payload(stored, root, f"{what} root page")
                if trailer.depth == 1:
                    lw = f"{what} leaf 0 (root)"
                    leaf = parse_leaf_page(data, root, m, trailer.column_area, lw)
                    check_first_ordinal(leaf, prev_part_last, lw)
                    part = (trailer, leaf, None)
                else:
                    part = (trailer, None, parse_internal_page(data, root, trailer.metadata_area, f"{what} root page"))
                cache[(i, -1)] = part
            trailer, root_leaf, children = part
            if root_leaf is not None:
                pages = [(0, root_leaf)]
                n_leaves[i] = 1
            else:
                wanted = [k for k, c in enumerate(children) if sel.selects(c.first, c.last, c.min_timestamp,
                                                                            c.max_timestamp)]
                got = {k: cache.get((i, children[k].offset)) for k in wanted}
                for k in wanted:
                    stats.cache_hits += got[k] is not None
                    stats.cache_misses += got[k] is None
                missing = [k for k in wanted if got[k] is None]
                if missing:
                    datas = rd.read_ranges([children[k].offset for k in missing],
                                           [children[k].stored_len for k in missing])
                    for k, stored in zip(missing, datas):
                        r, lw = children[k], f"{what} leaf {k}"
                        stats.metadata_bytes += r.stored_len
                        stats.pages_loaded += 1
                        leaf = parse_leaf_page(load_payload(stored, r, lw), r, m, trailer.column_area, lw)
                        check_first_ordinal(leaf, prev_part_last if k == 0 else children[k - 1].last, lw)
                        got[k] = cache[(i, r.offset)] = leaf
                pages = [(k, got[k]) for k in wanted]
                n_leaves[i] = len(children)
        for k, leaf in pages:
            cur = SelectedLeaf(i, k, leaf, sel.block_mask(leaf.blocks))
            if out:
                prev = out[-1]
                same = prev.part == i and prev.leaf == k - 1
                if same or (prev.part == i - 1 and k == 0 and prev.leaf == n_leaves[prev.part] - 1):
                    check_boundary(prev.page, leaf, f"{what} leaf {k}", same)
            out.append(cur)
    for i in n_leaves:
        sls = [sl for sl in out if sl.part == i]
        if len(sls) == n_leaves[i]:
            desc = m.files[i]
            rows = sum(sl.page.num_rows for sl in sls)
            nblocks = sum(sl.page.blocks.shape[0] for sl in sls)
            if rows != desc.num_rows or nblocks != desc.num_blocks:
                raise CorruptArtifactError(
                    f"{art.store.path(art.part_key(i))}: part holds {nblocks} blocks / {rows} rows, "
                    f"the manifest part descriptor says {desc.num_blocks} blocks / {desc.num_rows} rows")
    return out
