"""Header, trailer, payload references and metadata pages ("Part file").

Everything here validates untrusted bytes before using them: sizes are bounded
before allocating or decompressing, counts are checked against enclosing bytes
before descriptor tables are built, and descriptor tables are numpy structured
arrays.  Each rule is checked once, in a numba function over the records as
little-endian u32 words (:mod:`.structs` word offsets): :func:`ref_rule` (a page
reference), :func:`heads_rules` (a part's trailer and header),
:func:`internal_page_rules`, :func:`leaf_page_rules` and :func:`sequence_rule`
(adjacent blocks).  A check returns the code of the first rule broken and the
values its message needs; :func:`~gtsamples.format.rules.rule_error` builds the
error.  The navigator runs these functions inside its batch kernels; the
``parse_*`` functions here run them on one record or page.
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
from typing import NamedTuple

import numba
import numpy as np
from numba import carray, types
from numba.extending import intrinsic, overload
import xxhash

from ..errors import CorruptArtifactError
from . import constants as C
from . import rules as R
from . import structs as S
from .zstd import decompress_exact
from .structs import BLOCK_PREFIX, COLUMN_DESC, PAGE_REF_STRUCT, TRAILER_STRUCT
from ..jit import njit



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
        ft, fs, lt, ls, mn, mx, off, sl, dl, ck, enc, comp, res = PAGE_REF_STRUCT.unpack_from(buf, offset)
        return _new_ref(cls, ((ft, fs), (lt, ls), mn, mx, off, sl, dl, ck, enc, comp, res))

    @property
    def end(self) -> int:
        return self.offset + self.stored_len


_new_ref = tuple.__new__  # PageRef from its 11 values without the keyword-argument __new__


def page_refs(buf, offset: int, count: int) -> list[PageRef]:
    """The ``count`` page references at ``offset`` of ``buf`` (an internal page's children)."""
    end = offset + C.PAGE_REF_SIZE * count
    return [_new_ref(PageRef, ((ft, fs), (lt, ls), mn, mx, off, sl, dl, ck, enc, comp, res))
            for ft, fs, lt, ls, mn, mx, off, sl, dl, ck, enc, comp, res
            in PAGE_REF_STRUCT.iter_unpack(memoryview(buf)[offset:end])]


def _words(data) -> np.ndarray:
    """``data``'s whole little-endian u32 words (a page of any length: checks bound
    every read by the byte length)."""
    return np.frombuffer(data, dtype="<u4", count=len(data) // 4)


def _ref_words(ref: PageRef) -> np.ndarray:
    (ft, fs), (lt, ls) = ref.first, ref.last
    return _words(PAGE_REF_STRUCT.pack(ft, fs, lt, ls, ref.min_timestamp, ref.max_timestamp, ref.offset,
                                       ref.stored_len, ref.decoded_len, ref.checksum, ref.encoding, ref.compression,
                                       ref.reserved))


@numba.njit(inline="always")
def w64(w, k):  # pragma: no cover - numba
    """The little-endian u64 in 32-bit words ``k`` and ``k + 1`` (indices cast to
    unsigned: numba then omits the negative-index wraparound test)."""
    return np.uint64(w[np.uint64(k)]) | (np.uint64(w[np.uint64(k + 1)]) << np.uint64(32))


@intrinsic
def _u32_ptr(typingctx, addr):  # pragma: no cover - numba
    sig = types.CPointer(types.uint32)(types.int64)

    def codegen(context, builder, signature, args):
        return builder.inttoptr(args[0], context.get_value_type(signature.return_type))

    return sig, codegen


def words_at(addr, n):
    """The ``n`` u32 words at address ``addr`` (a table of many leaves, each passed by
    its address: no copy of them all; the caller keeps the memory alive).  Compiled
    code views the memory in place (:func:`_u32_ptr`); this body is what runs when
    the kernels run as Python (tests)."""
    n = int(n)
    if n == 0:
        return np.zeros(0, np.uint32)
    return np.ctypeslib.as_array((ctypes.c_uint32 * n).from_address(int(addr)))


@overload(words_at, inline="always")
def _words_at_ol(addr, n):
    return lambda addr, n: carray(_u32_ptr(addr), n)


_U64_MAX = np.uint64(C.U64_MAX)
_MAGIC_U64 = np.uint64(int.from_bytes(C.MAGIC, "little"))  # the 8-byte magic as one little-endian u64


@numba.njit(inline="always")
def payload_rule(off, stored, dec, reserved, lo, hi):  # pragma: no cover - numba
    """The rules every payload reference shares (a page's, a chunk's), in order: the
    reserved field zero, nonzero lengths, no u64 overflow, the bytes within ``[lo,
    hi)``: 0 when they hold, else the broken one's place (1-4)."""
    if reserved != 0:
        return 1
    if stored == 0 or dec == 0:
        return 2
    if off > _U64_MAX - stored:
        return 3
    if off < lo or off + stored > hi:
        return 4
    return 0


@numba.njit(inline="always")
def length_rule(stored, dec, comp, max_stored, max_dec, decoded_first):  # pragma: no cover - numba
    """A payload's lengths within its kind's limits, and equal when stored raw (compression
    0): 0 when they hold, else 1 (stored over), 2 (decoded over) or 3 (raw lengths
    differ).  ``decoded_first``: a page reference's decoded limit is checked before its
    stored one (a chunk's after), the order readers have reported them in."""
    if decoded_first and dec > max_dec:
        return 2
    if stored > max_stored:
        return 1
    if dec > max_dec:
        return 2
    if comp == C.COMP_RAW and stored != dec:
        return 3
    return 0


@numba.njit(inline="always")
def ref_rule(w, p, lo, hi, v):  # pragma: no cover - numba
    """Every rule of a page reference that can be checked without loading it, for the
    PAGE_REF at u32 word ``p`` of ``w``, its page within ``[lo, hi)``: the code of the
    first broken rule (``R.REF_*``; the reference's fields and area then in ``v``)."""
    ft = np.uint64(w[p + S.PR_FIRST_TABLE_ID])
    fs = w64(w, p + S.PR_FIRST_TSID)
    lt = np.uint64(w[p + S.PR_LAST_TABLE_ID])
    ls = w64(w, p + S.PR_LAST_TSID)
    mn = np.int64(w64(w, p + S.PR_MIN_TIMESTAMP))
    mx = np.int64(w64(w, p + S.PR_MAX_TIMESTAMP))
    off = w64(w, p + S.PR_OFFSET)
    stored = np.uint64(w[p + S.PR_STORED_LEN])
    dec = np.uint64(w[p + S.PR_DECODED_LEN])
    enc = w[p + S.PR_CODECS] & np.uint32(0xFFFF)
    comp = w[p + S.PR_CODECS] >> np.uint32(16)
    res = w[p + S.PR_RESERVED]
    code = R.OK
    shared = payload_rule(off, stored, dec, res, lo, hi)
    lengths = length_rule(stored, dec, comp, np.uint64(C.MAX_PAGE_STORED), np.uint64(C.MAX_PAGE_DECODED), True)
    if ft > lt or (ft == lt and fs > ls):
        code = R.REF_IDS
    elif mn > mx:
        code = R.REF_TIMES
    elif shared != 0:
        code = R.REF_RESERVED - 1 + shared
    elif enc != C.META_ENC_PAGE:
        code = R.REF_ENCODING
    elif comp != C.COMP_RAW and comp != C.COMP_ZSTD:
        code = R.REF_COMPRESSION
    elif lengths != 0:
        code = (R.REF_STORED_MAX, R.REF_DECODED_MAX, R.REF_RAW_LENGTHS)[lengths - 1]
    if code != R.OK:
        v[R.R_FT] = ft
        v[R.R_FS] = fs
        v[R.R_LT] = lt
        v[R.R_LS] = ls
        v[R.R_MN] = mn
        v[R.R_MX] = mx
        v[R.R_OFF] = off
        v[R.R_STORED] = stored
        v[R.R_DEC] = dec
        v[R.R_ENC] = enc
        v[R.R_COMP] = comp
        v[R.R_RES] = res
        v[R.R_LO] = lo
        v[R.R_HI] = hi
    return code


def payload_checksum(stored, ref: PageRef) -> tuple[int, int] | None:
    """The stored bytes of a page hash (XXH64) to its reference's checksum, checked before
    any decompression: None, or the values of rule ``R.PAGE_CHECKSUM`` broken."""
    got = xxhash.xxh64_intdigest(stored)
    return None if got == ref.checksum else (got, ref.checksum)


def load_payload(stored, ref: PageRef, what: str) -> bytes:
    """Checksum, then decompress a page to exactly its decoded length."""
    bad = payload_checksum(stored, ref)
    if bad is not None:
        raise R.rule_error(R.PAGE_CHECKSUM, what, 0, bad)
    if ref.compression == C.COMP_RAW:
        return bytes(stored)
    return decompress_exact(stored, ref.decoded_len, C.MAX_PAGE_DECODED, what)


# --- Header and trailer -----------------------------------------------------------


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

    @classmethod
    def from_bytes(cls, buf) -> "Trailer":
        """The trailer's values (checked by :func:`heads_rules`)."""
        ft, fs, lt, ls, mn, mx, off, sl, dl, ck, enc, comp, res, depth, version, file_length, payload_end, _m, _c = \
            TRAILER_STRUCT.unpack(buf)
        root = _new_ref(PageRef, ((ft, fs), (lt, ls), mn, mx, off, sl, dl, ck, enc, comp, res))
        return _new_ref(cls, (root, depth, version, file_length, payload_end))


@njit(nogil=True)
def heads_rules(tw, hw, sizes, hashes, dft, dfs, dlt, dls, dmn, dmx):  # pragma: no cover - numba
    """Every rule of "Trailer" before traversal, then of the header, for each part
    ``k``: ``tw`` the trailers and ``hw`` the headers as u32 words, ``sizes`` the
    recorded part sizes, ``hashes`` the XXH64 of each trailer's checksummed bytes,
    ``d*`` the manifest part descriptors' bounds.  Returns (code, values) per part."""
    n = sizes.shape[0]
    codes = np.zeros(n, np.int64)
    vals = np.zeros((n, R.N_VALS), np.uint64)
    for k in range(n):
        t = S.TRAILER_WORDS * k
        h = S.HEADER_WORDS * k
        v = vals[k]
        size = sizes[k]
        meta_end = size - np.uint64(C.TRAILER_SIZE)
        checksum = w64(tw, t + S.TR_CHECKSUM)
        magic = w64(tw, t + S.TR_MAGIC)
        version = tw[t + S.TR_VERSION]
        file_length = w64(tw, t + S.TR_FILE_LENGTH)
        depth = tw[t + S.TR_DEPTH]
        pe = w64(tw, t + S.TR_PAYLOAD_END)
        code = R.OK
        if hashes[k] != checksum:
            code = R.TRAILER_CHECKSUM
            v[0] = checksum
            v[1] = hashes[k]
        elif magic != _MAGIC_U64:
            code = R.TRAILER_MAGIC
            v[0] = magic
        elif version != C.FILE_VERSION:
            code = R.TRAILER_VERSION
            v[0] = version
        elif file_length != size:
            code = R.TRAILER_FILE_LENGTH
            v[0] = file_length
            v[1] = size
        elif depth != 1 and depth != 2:  # C.SUPPORTED_DEPTHS
            code = R.TRAILER_DEPTH
            v[0] = depth
        elif pe < np.uint64(C.HEADER_SIZE) or pe > meta_end:
            code = R.TRAILER_PAYLOAD_END
            v[0] = pe
            v[1] = meta_end
        else:
            code = ref_rule(tw, t, pe, meta_end, v)
        if code == R.OK:
            root = (np.uint64(tw[t + S.PR_FIRST_TABLE_ID]), w64(tw, t + S.PR_FIRST_TSID),
                    np.uint64(tw[t + S.PR_LAST_TABLE_ID]), w64(tw, t + S.PR_LAST_TSID),
                    np.int64(w64(tw, t + S.PR_MIN_TIMESTAMP)), np.int64(w64(tw, t + S.PR_MAX_TIMESTAMP)))
            end = w64(tw, t + S.PR_OFFSET) + np.uint64(tw[t + S.PR_STORED_LEN])
            if (root[0] != dft[k] or root[1] != dfs[k] or root[2] != dlt[k] or root[3] != dls[k]
                    or root[4] != dmn[k] or root[5] != dmx[k]):
                code = R.ROOT_BOUNDS  # root bounds are the manifest part descriptor's
                v[0], v[1], v[2], v[3], v[4], v[5] = root
                v[6], v[7], v[8], v[9], v[10], v[11] = dft[k], dfs[k], dlt[k], dls[k], dmn[k], dmx[k]
            elif end != meta_end:  # the root ends at the trailer
                code = R.ROOT_END
                v[0] = end
                v[1] = meta_end
            elif w64(hw, h + S.HD_MAGIC) != _MAGIC_U64:
                code = R.HEADER_MAGIC
                v[0] = w64(hw, h + S.HD_MAGIC)
            elif hw[h + S.HD_VERSION] != C.FILE_VERSION:
                code = R.HEADER_VERSION
                v[0] = hw[h + S.HD_VERSION]
            elif hw[h + S.HD_RESERVED] != 0:
                code = R.HEADER_RESERVED
                v[0] = hw[h + S.HD_RESERVED]
        codes[k] = code
    return codes, vals


def check_heads(headers: list, trailers: list, sizes, descs) -> tuple[np.ndarray, np.ndarray]:
    """:func:`heads_rules` for parts' header and trailer bytes (exactly
    :data:`~gtsamples.format.constants.HEADER_SIZE` and ``TRAILER_SIZE`` each),
    recorded sizes and manifest part descriptors (rows of ``PART_DTYPE``)."""
    hashes = np.array([xxhash.xxh64_intdigest(memoryview(t)[:C.TRAILER_CHECKSUMMED]) for t in trailers],
                      dtype=np.uint64)
    return heads_rules(_words(b"".join(trailers)), _words(b"".join(headers)), np.asarray(sizes, dtype=np.uint64),
                       hashes, descs["first_table_id"].astype(np.uint64), descs["first_tsid"].astype(np.uint64),
                       descs["last_table_id"].astype(np.uint64), descs["last_tsid"].astype(np.uint64),
                       descs["min_timestamp"].astype(np.int64), descs["max_timestamp"].astype(np.int64))


def parse_head(header: bytes, trailer: bytes, file_size: int, desc, what: str) -> Trailer:
    """One part's header and trailer checked (every rule, trailer first): its Trailer.
    ``desc``: the manifest part descriptor's row (``PartTable.array[i]``)."""
    if len(trailer) != C.TRAILER_SIZE:
        raise CorruptArtifactError(f"{what}: trailer is {len(trailer)} bytes, expected {C.TRAILER_SIZE}")
    if len(header) != C.HEADER_SIZE:
        raise CorruptArtifactError(f"{what}: header is {len(header)} bytes, expected {C.HEADER_SIZE}")
    codes, vals = check_heads([header], [trailer], [file_size], np.asarray(desc).reshape(1))
    if codes[0]:
        raise R.rule_error(int(codes[0]), what, -1, vals[0])
    return Trailer.from_bytes(trailer)


# --- Pages ---------------------------------------------------------------------


@numba.njit(inline="always")
def _prefix_rule(w, nbytes, kind, v):  # pragma: no cover - numba
    """A page's prefix: long enough, nonempty, of the expected kind.  (code, entry count)."""
    if nbytes < C.PAGE_PREFIX_SIZE:
        v[0] = nbytes
        return R.PAGE_SHORT, np.uint64(0)
    count = w64(w, S.PP_ENTRY_COUNT)
    if count == 0:
        return R.PAGE_EMPTY, count
    if w[S.PP_KIND] != kind:
        v[0] = w[S.PP_KIND]
        v[1] = kind
        return R.PAGE_KIND, count
    return R.OK, count


@numba.njit(inline="always")
def _bounds_vals(v, ft, fs, lt, ls, mn, mx, rw, r):  # pragma: no cover - numba
    """Derived bounds and those of the reference at word ``r`` of ``rw``, into ``v``."""
    v[0], v[1], v[2], v[3], v[4], v[5] = ft, fs, lt, ls, mn, mx
    v[6] = rw[r + S.PR_FIRST_TABLE_ID]
    v[7] = w64(rw, r + S.PR_FIRST_TSID)
    v[8] = rw[r + S.PR_LAST_TABLE_ID]
    v[9] = w64(rw, r + S.PR_LAST_TSID)
    v[10] = w64(rw, r + S.PR_MIN_TIMESTAMP)
    v[11] = w64(rw, r + S.PR_MAX_TIMESTAMP)


@njit(nogil=True)
def internal_page_rules(w, nbytes, rw, r, lo, v):  # pragma: no cover - numba
    """An internal page of ``nbytes`` (words ``w``) against its reference at word ``r``
    of ``rw``, children within ``[lo, reference offset)``: (code, child, entry count).
    Children are checked one by one, each against the previous one."""
    code, count = _prefix_rule(w, nbytes, C.PAGE_KIND_INTERNAL, v)
    if code != R.OK:
        return code, 0, 0
    if count > np.uint64(C.MAX_INTERNAL_ENTRIES) or nbytes != C.PAGE_PREFIX_SIZE + C.PAGE_REF_SIZE * np.int64(count):
        v[0] = count
        v[1] = nbytes
        return R.INTERNAL_LENGTH, 0, 0
    c = np.int64(count)
    hi = w64(rw, r + S.PR_OFFSET)  # children precede the parent
    mn = np.int64(0)
    mx = np.int64(0)
    for i in range(c):
        p = S.PAGE_PREFIX_WORDS + S.PAGE_REF_WORDS * i
        code = ref_rule(w, p, lo, hi, v)
        if code != R.OK:
            return code, i, c
        if i > 0:
            q = p - S.PAGE_REF_WORDS
            prev_end = w64(w, q + S.PR_OFFSET) + np.uint64(w[q + S.PR_STORED_LEN])
            if w64(w, p + S.PR_OFFSET) < prev_end:
                v[0] = w64(w, p + S.PR_OFFSET)
                v[1] = prev_end
                return R.CHILD_DISJOINT, i, c
            plt = w[q + S.PR_LAST_TABLE_ID]
            pls = w64(w, q + S.PR_LAST_TSID)
            cft = w[p + S.PR_FIRST_TABLE_ID]
            cfs = w64(w, p + S.PR_FIRST_TSID)
            if plt > cft or (plt == cft and pls > cfs):
                v[0], v[1], v[2], v[3] = plt, pls, cft, cfs
                return R.CHILD_ORDER, i, c
        cmn = np.int64(w64(w, p + S.PR_MIN_TIMESTAMP))
        cmx = np.int64(w64(w, p + S.PR_MAX_TIMESTAMP))
        if i == 0 or cmn < mn:
            mn = cmn
        if i == 0 or cmx > mx:
            mx = cmx
    f0 = S.PAGE_PREFIX_WORDS
    last = f0 + S.PAGE_REF_WORDS * (c - 1)
    ft, fs = w[f0 + S.PR_FIRST_TABLE_ID], w64(w, f0 + S.PR_FIRST_TSID)
    lt, ls = w[last + S.PR_LAST_TABLE_ID], w64(w, last + S.PR_LAST_TSID)
    if (ft != rw[r + S.PR_FIRST_TABLE_ID] or fs != w64(rw, r + S.PR_FIRST_TSID) or lt != rw[r + S.PR_LAST_TABLE_ID]
            or ls != w64(rw, r + S.PR_LAST_TSID) or mn != np.int64(w64(rw, r + S.PR_MIN_TIMESTAMP))
            or mx != np.int64(w64(rw, r + S.PR_MAX_TIMESTAMP))):
        _bounds_vals(v, ft, fs, lt, ls, mn, mx, rw, r)  # derived bounds are the reference's
        return R.DERIVED_BOUNDS, 0, c
    return R.OK, 0, c


def parse_internal_page(data: bytes, ref: PageRef, area: tuple[int, int], what: str) -> list[PageRef]:
    """An internal root: child leaf references, validated against each other and the parent."""
    v = np.zeros(R.N_VALS, np.uint64)
    code, at, count = internal_page_rules(_words(data), len(data), _ref_words(ref), 0, np.uint64(area[0]), v)
    if code:
        raise R.rule_error(code, what, at, v)
    return page_refs(data, C.PAGE_PREFIX_SIZE, count)


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

    @property
    def prefix_address(self) -> int | None:
        """The address of the block prefixes (None when ``blocks`` is not a contiguous
        BLOCK_PREFIX table): a region query's kernels read many leaves' prefixes in
        place (:func:`words_at`), where joining them all would cost a copy (and its
        allocation, the decoder's buffers their pages: see :meth:`Selection.block_masks
        <gtsamples.plan.selection.Selection.block_masks>`).  :attr:`tables_at`'s first item."""
        return self.tables_at[0]

    @property
    def tables_at(self) -> tuple:
        """``(prefix_address, blocks, columns address, column descriptors, (the tables
        read there))``: where a kernel reads this leaf's tables in place
        (:func:`words_at`; the descriptors from a contiguous copy of a strided table),
        found once per pair of tables.  The caller holds the last item while a kernel
        reads: the memory at those addresses lives as long as it does (another thread
        may set new tables)."""
        b, c = self.blocks, self.columns
        got = self.__dict__.get("_tables_at")
        if got is None or got[4][0] is not b or got[4][2] is not c:
            ok = b.dtype == BLOCK_PREFIX and b.ndim == 1 and b.flags.c_contiguous
            cc = np.ascontiguousarray(c)
            got = self.__dict__["_tables_at"] = (b.ctypes.data if ok else None, b.shape[0],
                                                 cc.ctypes.data if cc.shape[0] else 0, cc.shape[0], (b, cc, c))
        return got

    def __getstate__(self) -> dict:
        # an address is this process's: a copy (pickled, sent to a worker) finds its own
        return {k: v for k, v in self.__dict__.items() if k != "_tables_at"}


_FIELD_TABLES: dict = {}


def field_tables(fields) -> tuple:
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


#: [role, encoding] -> 1: valid for the role; 0: a known encoding the role does not allow;
#: 2: an unknown encoding (accepted here: it fails only when its chunk is decoded).
#: Encodings past the table's width are unknown too.
ALLOWED_ENCODINGS = np.full((max(C.KNOWN_ROLES) + 1, max(C.KNOWN_COLUMN_ENCODINGS) + 1), 2, dtype=np.uint8)
ALLOWED_ENCODINGS[:, list(C.KNOWN_COLUMN_ENCODINGS)] = 0
for _rl, _encs in C.ROLE_ENCODINGS.items():
    ALLOWED_ENCODINGS[_rl, list(_encs)] = 1
del _rl, _encs
_NONE = 1 << 30  # no rule broken yet (above every code)


@numba.njit(inline="always")
def sequence_rule(p_tid, p_tsid, p_ord, p_mx, tid, tsid, ordn, mn):  # pragma: no cover - numba
    """Adjacent blocks (previous: ``p_*``): identity order, ordinals +1 within an identity
    (no u64 wrap) and 0 at a new one, the time rule within a series (``R.SEQ_*``)."""
    if tid < p_tid or (tid == p_tid and tsid < p_tsid):
        return R.SEQ_ORDER
    same = tid == p_tid and tsid == p_tsid
    if same and (p_ord == _U64_MAX or ordn != p_ord + np.uint64(1)):
        return R.SEQ_ORDINAL_NEXT
    if not same and ordn != np.uint64(0):
        return R.SEQ_ORDINAL_ZERO
    if same and p_mx > mn:
        return R.SEQ_TIME
    return R.OK


@numba.njit(inline="always")
def _sequence_vals(v, code, p_tid, p_tsid, p_ord, p_mx, tid, tsid, ordn, mn):  # pragma: no cover - numba
    v[0], v[1], v[2] = tid, tsid, ordn
    if code == R.SEQ_ORDER:
        v[3], v[4] = p_tid, p_tsid
    elif code == R.SEQ_ORDINAL_NEXT:
        v[3] = p_ord
    elif code == R.SEQ_TIME:
        v[3], v[4] = p_mx, mn


@njit(nogil=True)
def _walk_leaf(w, nbytes, count, v):  # pragma: no cover - numba
    """The u32 word offsets of a leaf's ``count`` variable-size block descriptors, and
    their column descriptor total: (code, starts, total)."""
    starts = np.empty(count, np.int64)
    pos = C.PAGE_PREFIX_SIZE  # bytes (the page may have a partial last word)
    total = 0
    for i in range(count):
        cc = np.int64(0)
        if pos + C.BLOCK_PREFIX_SIZE <= nbytes:
            cc = np.int64(w[np.uint64(pos // 4 + S.BP_COLUMN_COUNT)])
        if pos + C.BLOCK_PREFIX_SIZE > nbytes or pos + C.BLOCK_PREFIX_SIZE + C.COLUMN_DESC_SIZE * cc > nbytes:
            v[0] = i
            v[1] = nbytes
            return R.LEAF_RUNS_PAST, starts, total
        starts[i] = pos // 4
        pos += C.BLOCK_PREFIX_SIZE + C.COLUMN_DESC_SIZE * cc
        total += cc
    if pos != nbytes:
        v[0] = count
        return R.LEAF_TRAILING, starts, total
    return R.OK, starts, total


@njit(nogil=True)
def leaf_page_rules(w, nbytes, n_fields, cap, ts_id, sorted_ids, order, lo, hi, ref_ft, ref_fs, ref_lt, ref_ls,
                    ref_mn, ref_mx, allowed, first_rule, prev_tid, prev_tsid):  # pragma: no cover - numba
    """Walk, copy and check a leaf page of ``nbytes`` (u32 words ``w``) in one pass:
    returns (code, block, values, block prefixes and column descriptors as u32 words,
    col_start).  Every block, descriptor and adjacent pair is checked, each against
    the rules in code order up to the first it breaks; the page's error is the lowest
    code broken, at its first block (rule by rule over the whole page, as a reader
    naming the first broken rule would).  Then the derived bounds against the
    reference (``ref_*``), and with ``first_rule`` the first block's ordinal: 0, or
    (``first_rule`` 2) any when it continues the identity ``(prev_tid, prev_tsid)``
    that ends the previous page or part.  ``lo, hi``: the column area."""
    v = np.zeros(R.N_VALS, np.uint64)
    no_words = np.empty(0, np.uint32)
    no_starts = np.empty(0, np.int64)
    code, count = _prefix_rule(w, nbytes, C.PAGE_KIND_LEAF, v)
    if code == R.OK and count > np.uint64((nbytes - C.PAGE_PREFIX_SIZE) // C.MIN_BLOCK_DESC_SIZE):
        code = R.LEAF_COUNT
        v[0], v[1], v[2] = count, nbytes, (nbytes - C.PAGE_PREFIX_SIZE) // C.MIN_BLOCK_DESC_SIZE
    if code != R.OK:
        return code, 0, v, no_words, no_words, no_starts
    n = np.int64(count)
    code, starts, total = _walk_leaf(w, nbytes, n, v)
    if code != R.OK:
        return code, 0, v, no_words, no_words, no_starts
    bw = S.BLOCK_PREFIX_WORDS
    cw = S.COLUMN_DESC_WORDS
    blocks = np.empty(n * bw, np.uint32)
    cols = np.empty(total * cw, np.uint32)
    col_start = np.empty(n, np.int64)
    n_ids = sorted_ids.shape[0]
    n_enc = allowed.shape[1]
    best = _NONE
    best_at = 0
    j = 0
    prev_end = np.uint64(0)
    p_tid, p_tsid, p_ord, p_mx = np.uint32(0), np.uint64(0), np.uint64(0), np.int64(0)
    mn_all = mx_all = np.int64(0)
    for i in range(n):
        s = starts[i]
        for k in range(bw):
            blocks[np.uint64(i * bw + k)] = w[np.uint64(s + k)]
        tid = w[np.uint64(s + S.BP_TABLE_ID)]
        tsid = w64(w, s + S.BP_TSID)
        mn = np.int64(w64(w, s + S.BP_MIN_TIMESTAMP))
        mx = np.int64(w64(w, s + S.BP_MAX_TIMESTAMP))
        ordn = w64(w, s + S.BP_ORDINAL)
        rows = np.int64(w[np.uint64(s + S.BP_ROW_COUNT)])
        cc = np.int64(w[np.uint64(s + S.BP_COLUMN_COUNT)])
        code = R.OK
        if rows == 0:
            code = R.BLOCK_ROWS_ZERO
        elif rows > cap:
            code = R.BLOCK_ROWS_CAP
        elif mn > mx:
            code = R.BLOCK_TIMES
        elif cc < 3 or cc > 3 + n_fields:
            code = R.BLOCK_COLUMNS
        if R.OK < code < best:
            best, best_at = code, i
            v[0], v[1], v[2] = tid, tsid, ordn
            if code == R.BLOCK_ROWS_CAP:
                v[3], v[4], v[5] = rows, cap, n_fields
            elif code == R.BLOCK_TIMES:
                v[3], v[4] = mn, mx
            elif code == R.BLOCK_COLUMNS:
                v[3], v[4] = cc, n_fields
        if i == 0:
            mn_all, mx_all = mn, mx
        else:
            code = sequence_rule(p_tid, p_tsid, p_ord, p_mx, tid, tsid, ordn, mn)
            if R.OK < code < best:
                best, best_at = code, i
                _sequence_vals(v, code, p_tid, p_tsid, p_ord, p_mx, tid, tsid, ordn, mn)
            mn_all = min(mn_all, mn)
            mx_all = max(mx_all, mx)
        p_tid, p_tsid, p_ord, p_mx = tid, tsid, ordn, mx
        col_start[i] = j
        prev_fi = np.int64(-1)
        for q in range(cc):
            c = s + bw + cw * q
            for k in range(cw):
                cols[np.uint64(j * cw + k)] = w[np.uint64(c + k)]
            role = np.int64(w[np.uint64(c + S.CD_ROLE)])
            cid = np.int64(w[np.uint64(c + S.CD_COLUMN_ID)])
            off = w64(w, c + S.CD_OFFSET)
            stored = np.uint64(w[np.uint64(c + S.CD_STORED_LEN)])
            dec = np.uint64(w[np.uint64(c + S.CD_DECODED_LEN)])
            enc = np.int64(w[np.uint64(c + S.CD_CODECS)] & np.uint32(0xFFFF))
            comp = np.int64(w[np.uint64(c + S.CD_CODECS)] >> np.uint32(16))
            reserved = w[np.uint64(c + S.CD_RESERVED)]
            nulls = np.int64(w[np.uint64(c + S.CD_NULL_COUNT)])
            end = off + stored
            expected = q + 1 if q < 3 else C.ROLE_FIELD
            code = R.OK
            if role < C.ROLE_TIMESTAMP or role > C.ROLE_FIELD:
                code = R.COL_ROLE_UNKNOWN
            elif role != expected:
                code = R.COL_ROLE
            elif (role == C.ROLE_TIMESTAMP and cid != ts_id) or (role != C.ROLE_TIMESTAMP and role != C.ROLE_FIELD
                                                                   and cid != 0):
                code = R.COL_ID
            elif role != C.ROLE_FIELD and nulls != 0:
                code = R.COL_NULLS_MANDATORY
            elif role == C.ROLE_FIELD:
                a = 0
                b = n_ids
                while a < b:  # searchsorted(sorted_ids, cid, "left")
                    m = (a + b) >> 1
                    if sorted_ids[m] < cid:
                        a = m + 1
                    else:
                        b = m
                fi = np.int64(-1)
                if a >= n_ids or sorted_ids[a] != cid:
                    code = R.COL_FIELD_UNKNOWN
                else:
                    fi = order[a]
                    if fi <= prev_fi:
                        code = R.COL_FIELD_ORDER
                    elif nulls >= rows:
                        code = R.COL_NULLS_ALL
                prev_fi = fi
            if code == R.OK:
                shared = payload_rule(off, stored, dec, reserved, lo, hi)
                lengths = length_rule(stored, dec, comp, np.uint64(C.MAX_CHUNK_STORED),
                                      np.uint64(C.MAX_CHUNK_DECODED), False)
                if shared != 0:
                    code = R.CHUNK_RESERVED - 1 + shared
                elif lengths != 0:
                    code = (R.CHUNK_STORED_MAX, R.CHUNK_DECODED_MAX, R.CHUNK_RAW_LENGTHS)[lengths - 1]
                elif enc < n_enc and allowed[role, enc] == 0:
                    code = R.CHUNK_ENCODING_ROLE
                elif j > 0 and off < prev_end:
                    code = R.CHUNK_DISJOINT
            if R.OK < code < best:
                best, best_at = code, i
                v[0], v[1], v[2], v[3], v[4], v[5] = tid, tsid, ordn, q, role, cid
                if code == R.COL_ROLE:
                    v[6] = expected
                elif code == R.COL_ID:
                    v[6] = ts_id if role == C.ROLE_TIMESTAMP else 0
                elif code == R.COL_NULLS_MANDATORY or code == R.CHUNK_RESERVED:
                    v[6] = nulls if code == R.COL_NULLS_MANDATORY else reserved
                elif code == R.COL_NULLS_ALL:
                    v[6], v[7] = nulls, rows
                elif code == R.CHUNK_LENGTHS or code == R.CHUNK_RAW_LENGTHS:
                    v[6], v[7] = stored, dec
                elif code == R.CHUNK_OVERFLOW:
                    v[6], v[7] = off, stored
                elif code == R.CHUNK_AREA:
                    v[6], v[7], v[8], v[9] = off, end, lo, hi
                elif code == R.CHUNK_STORED_MAX or code == R.CHUNK_DECODED_MAX:
                    v[6] = stored if code == R.CHUNK_STORED_MAX else dec
                elif code == R.CHUNK_ENCODING_ROLE:
                    v[6] = enc
                elif code == R.CHUNK_DISJOINT:
                    v[6], v[7] = off, prev_end
            prev_end = end
            j += 1
    if best == _NONE:
        best = R.OK
        f0 = starts[0]
        tid0, tsid0, ord0 = w[np.uint64(f0 + S.BP_TABLE_ID)], w64(w, f0 + S.BP_TSID), w64(w, f0 + S.BP_ORDINAL)
        if (np.uint64(tid0) != ref_ft or tsid0 != ref_fs or np.uint64(p_tid) != ref_lt or p_tsid != ref_ls
                or mn_all != ref_mn or mx_all != ref_mx):
            best = R.DERIVED_BOUNDS  # derived bounds are the reference's
            v[0], v[1], v[2], v[3], v[4], v[5] = tid0, tsid0, p_tid, p_tsid, mn_all, mx_all
            v[6], v[7], v[8], v[9], v[10], v[11] = ref_ft, ref_fs, ref_lt, ref_ls, ref_mn, ref_mx
        elif first_rule != 0 and ord0 != np.uint64(0) and (
                first_rule == 1 or np.uint64(tid0) != prev_tid or tsid0 != prev_tsid):
            best = R.FIRST_ORDINAL  # the identity's first block has ordinal 0
            v[0], v[1], v[2] = tid0, tsid0, ord0
    return best, best_at, v, blocks, cols, col_start


def parse_leaf_page(data: bytes, ref: PageRef, manifest, column_area: tuple[int, int], what: str, *,
                    check_first: bool = False, prev_last: tuple[int, int] | None = None) -> LeafPage:
    """Parse and validate a leaf page against its reference and the manifest
    (:func:`leaf_page_rules`).  ``check_first``: also the first block's ordinal, given
    the identity ``prev_last`` that ends the previous page or part (None: none)."""
    n_fields, cap, sorted_ids, order = field_tables(manifest.fields)
    (ft, fs), (lt, ls) = ref.first, ref.last
    first_rule = 0 if not check_first else 1 if prev_last is None else 2
    p_tid, p_tsid = prev_last if prev_last is not None else (0, 0)
    code, at, v, blocks, cols, col_start = leaf_page_rules(
        _words(data), len(data), n_fields, cap, manifest.timestamp.column_id, sorted_ids, order,
        np.uint64(column_area[0]), np.uint64(column_area[1]), np.uint64(ft), np.uint64(fs), np.uint64(lt),
        np.uint64(ls), np.int64(ref.min_timestamp), np.int64(ref.max_timestamp), ALLOWED_ENCODINGS, first_rule,
        np.uint64(p_tid), np.uint64(p_tsid))
    if code:
        raise R.rule_error(code, what, at, v)
    return LeafPage(blocks.view(BLOCK_PREFIX), cols.view(COLUMN_DESC), col_start)


@njit(nogil=True)
def _boundary_rules(prev_blocks, prev_cols, cur_blocks, cur_cols, same_part, v):  # pragma: no cover - numba
    """:func:`check_boundary`'s rules in one call: ``(code, chunk start, previous chunk end)``."""
    p = prev_blocks[prev_blocks.shape[0] - 1]
    b = cur_blocks[0]
    code = sequence_rule(p["table_id"], p["tsid"], p["ordinal"], p["max_timestamp"], b["table_id"], b["tsid"],
                         b["ordinal"], b["min_timestamp"])
    if code != R.OK:
        _sequence_vals(v, code, p["table_id"], p["tsid"], p["ordinal"], p["max_timestamp"], b["table_id"],
                       b["tsid"], b["ordinal"], b["min_timestamp"])
        return code, np.uint64(0), np.uint64(0)
    if same_part:
        pr = prev_cols[prev_cols.shape[0] - 1]["ref"]
        start = cur_cols[0]["ref"]["offset"]
        end = pr["offset"] + np.uint64(pr["stored_len"])  # (offsets lie inside the part: no overflow)
        if start < end:
            return R.BOUNDARY_CHUNKS, start, end
    return R.OK, np.uint64(0), np.uint64(0)


def check_boundary(prev: LeafPage, cur: LeafPage, what: str, same_part: bool) -> None:
    """Rules between the last block of one page and the first of the next (``what``:
    the second page): the block sequence rules of :func:`sequence_rule`, and within a
    part, chunks physically ordered and disjoint across the two."""
    v = np.zeros(R.N_VALS, np.uint64)
    code, start, end = _boundary_rules(prev.blocks, prev.columns, cur.blocks, cur.columns, same_part, v)
    if code == R.BOUNDARY_CHUNKS:
        raise R.rule_error(code, what, 0, (int(start), int(end)))
    if code:
        raise R.rule_error(code, f"{what} (boundary with the previous page)", 0, v)
