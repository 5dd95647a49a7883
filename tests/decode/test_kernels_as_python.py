"""The reader's numba kernels, run as Python: coverage and a JIT-vs-Python differential.

numba-compiled functions execute as machine code, so ``pytest --cov`` never
sees their lines.  The ``as_python`` fixture swaps every numba dispatcher of
the CPU read path (the ``decode/cpu/`` package, ``format/zstd_frames.py``,
``format/pages.py``, ``plan/loading.py``, ``plan/selection.py``) for its
``py_func`` -- the same source run by the interpreter -- so the suite's coverage report includes the kernels.  Each case
also runs compiled, and both runs must agree (same columns, same flags, same
error class): the pure-Python run is a second implementation of the same text.
"""

from __future__ import annotations

import json
import struct

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pytest

import gtsamples as gs
from gtsamples.decode import cpu
from gtsamples.format import libzstd, zstd_frames
from gtsamples.errors import DecodeErrorFlag as F
from gtsamples.format import pages
from gtsamples.plan import loading, selection

from ..conftest import DATA, assert_tables_equal, kernels_as_python
from ._encode_ref import enc_f64_xor, enc_seq_delta, enc_ts_dod, zstd_compress, zstd_raw_frame

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")  # numpy scalar wrap-around as Python

MODULES = (cpu, zstd_frames, pages, loading, selection)


@pytest.fixture
def as_python(monkeypatch):
    assert len(kernels_as_python(monkeypatch, *MODULES)) >= 10
    yield


def _outcome(fn):
    try:
        out = fn()
    except gs.SamplesError as e:
        return ("error", type(e).__name__, int(getattr(e, "flags", 0)))
    if isinstance(out, tuple):
        return ("ok", tuple(np.asarray(x).tobytes() for x in out))
    if isinstance(out, pa.Table):
        return ("ok", out)
    return ("ok", np.asarray(out).tobytes())


def both(fn, monkeypatch):
    """(compiled outcome, Python outcome) of ``fn``."""
    jit = _outcome(fn)
    kernels_as_python(monkeypatch, *MODULES)
    try:
        py = _outcome(fn)
    finally:
        monkeypatch.undo()
    return jit, py


# --- whole reads ----------------------------------------------------------------------------

VECTORS = sorted(p for p in (DATA / "vectors").iterdir() if p.is_dir())


def _load(path):
    with pa.memory_map(str(path)) as f:
        return ipc.open_file(f).read_all()


@pytest.mark.parametrize("vec", VECTORS, ids=lambda p: p.name)
def test_vectors_as_python(vec, as_python):
    entry = json.loads((vec / "entry.json").read_text())
    art = gs.open_artifact(vec / "store", entry=entry, cache=gs.cache.PageCache() if hasattr(gs, "cache") else None)
    assert_tables_equal(art.read(), _load(vec / "expected.arrow"))
    assert art.validate()["valid"]
    case = json.loads((vec / "case.json").read_text())
    for q in case["queries"]:
        cols = None
        if q["columns"] is not None:
            cols = ["__table_id", "__tsid", "__sequence", "__op_type", art.manifest.timestamp.name] + q["columns"]
        series = [tuple(s) for s in q["series"]] if q["series"] is not None else None
        got = art.read(columns=cols, series=series, tables=q["tables"], start=q["start"], end=q["end"])
        assert_tables_equal(got, _load(vec / q["expected"]))


def test_fuzz_seed_shapes_as_python(monkeypatch):
    """Writer-made artifacts of many shapes (raw/Zstd chunks and pages, depth 1/2, parts): JIT == Python."""
    from tests.fuzz import corpus, targets

    for name, data in corpus.build_seeds(quick=True)[::3]:
        prep = targets.Prepared(data)
        ws = targets.workspace()
        ws.write(prep)
        jit, py = both(lambda: ws.open(prep).read(), monkeypatch)
        assert jit[0] == py[0] == "ok", name
        assert_tables_equal(py[1], jit[1])


# --- single chunks: every decoder branch and flag ------------------------------------------

U64 = (1 << 64) - 1


def varint(u: int) -> bytes:
    out = bytearray()
    while True:
        b = u & 0x7F
        u >>= 7
        if u:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def zz(x: int) -> int:
    return ((x << 1) ^ (x >> 63)) & U64


TS = np.array([10, 10, 13, 20, 20], np.int64)

# Long XOR varints (>= 3 bytes per value): the masked decoder, _dec_f64_long.
LONG = np.random.default_rng(5).integers(0, U64, 300, dtype=np.uint64, endpoint=True)
LONG_VALID = np.zeros(300, bool)
LONG_VALID[:10] = LONG_VALID[140:150] = LONG_VALID[203] = True  # whole null words 64-127, trailing null words
LONG_VALID_LATE = np.zeros(300, bool)
LONG_VALID_LATE[70:80] = True  # the first whole validity word is null
EIGHT = b"\xff" * 7 + b"\x01"  # one 8-byte varint
JITTER_TS = 1000 + np.cumsum([0] + [15, 16, 14, 15, 15, 17, 15, 13, 15, 15, 16, 15] * 3)  # 1-byte dods
SHORT = np.where(np.arange(40) % 13 == 12, 2.5, 1.5)  # mostly 1-byte XORs (zeros), a few 8-byte ones
SHORT_VALID = np.ones(40, bool)
SHORT_VALID[35] = False  # bytes 0-3 of the bitmap are 0xFF


def short_chain(middle: bytes, kind1: bool = False) -> bytes:
    """A 40-row chunk of 1-byte varints with ``middle`` (one varint) in place of the 20th."""
    head = (b"\x01" + bytes([0xFF, 0xFF, 0xFF, 0xFF, 0xF7])) if kind1 else b"\x00"
    n_vals = 39 if kind1 else 40
    return head + b"\x01" * 8 + b"\x00" * 18 + middle + b"\x00" * (n_vals - 20)


def long_chain(middle: bytes, n_before: int = 5, n_after: int = 20) -> tuple[bytes, int]:
    """An all-valid chunk: first value, ``n_before`` 8-byte varints, ``middle``, ``n_after`` 8-byte varints."""
    return b"\x00" + b"\x01" * 8 + EIGHT * n_before + middle + EIGHT * n_after, 1 + n_before + 1 + n_after


CHUNKS = [
    # (id, encoding, bytes, rows, nulls, min_ts, max_ts, compression, decoded_len, expected flag or None)
    ("ts1 ok", 1, struct.pack("<qq", 5, 3), 4, 0, 5, 14, 0, None, None),
    ("ts1 singleton", 1, struct.pack("<qq", 5, 0), 1, 0, 5, 5, 0, None, None),
    ("ts1 length", 1, struct.pack("<qq", 5, 3)[:15], 4, 0, 5, 14, 0, None, F.BAD_LENGTH),
    ("ts1 negative step", 1, struct.pack("<qq", 5, -1), 4, 0, 5, 2, 0, None, F.NEGATIVE_STEP),
    ("ts1 overflow", 1, struct.pack("<qq", (1 << 63) - 5, 3), 4, 0, 0, 0, 0, None, F.TIMESTAMP_OVERFLOW),
    ("ts1 bounds", 1, struct.pack("<qq", 5, 3), 4, 0, 5, 15, 0, None, F.TIMESTAMP_BOUNDS),
    ("ts2 ok", 2, enc_ts_dod(TS), 5, 0, 10, 20, 0, None, None),
    ("ts2 short", 2, b"\x01\x02", 5, 0, 10, 20, 0, None, F.BAD_LENGTH),
    ("ts2 truncated", 2, enc_ts_dod(TS)[:-1], 5, 0, 10, 20, 0, None, F.VARINT_TRUNCATED),
    ("ts2 trailing", 2, enc_ts_dod(TS) + b"\x00", 5, 0, 10, 20, 0, None, F.TRAILING_BYTES),
    ("ts2 varint 11 bytes", 2, struct.pack("<q", 0) + b"\x80" * 10 + b"\x00", 2, 0, 0, 0, 0, None, F.VARINT_OVERFLOW),
    ("ts2 tenth byte 2", 2, struct.pack("<q", 0) + b"\x80" * 9 + b"\x02", 2, 0, 0, 0, 0, None, F.VARINT_OVERFLOW),
    ("ts2 decreasing", 2, struct.pack("<q", 10) + varint(zz(-3)), 2, 0, 10, 7, 0, None, F.TIMESTAMP_DECREASING),
    ("ts2 bounds", 2, enc_ts_dod(TS), 5, 0, 10, 21, 0, None, F.TIMESTAMP_BOUNDS),
    ("ts2 full range", 2, struct.pack("<q", -(1 << 63)) + varint(zz(-1)), 2, 0, -(1 << 63), (1 << 63) - 1, 0, None,
     None),
    ("seq3 ok", 3, struct.pack("<Q", U64), 3, 0, None, None, 0, None, None),
    ("seq3 length", 3, b"\x00" * 9, 3, 0, None, None, 0, None, F.BAD_LENGTH),
    ("seq4 ok", 4, enc_seq_delta(np.array([U64, 0, 7, 3], np.uint64)), 4, 0, None, None, 0, None, None),
    ("seq4 short", 4, b"\x00" * 7, 4, 0, None, None, 0, None, F.BAD_LENGTH),
    ("seq4 truncated", 4, b"\x00" * 8 + b"\x02", 4, 0, None, None, 0, None, F.VARINT_TRUNCATED),
    ("seq4 trailing", 4, b"\x00" * 8 + b"\x02\x02\x02\x02", 4, 0, None, None, 0, None, F.TRAILING_BYTES),
    ("seq4 overflow", 4, b"\x00" * 8 + b"\xff" * 10, 2, 0, None, None, 0, None, F.VARINT_OVERFLOW),
    ("op6 ok", 6, b"\x00", 3, 0, None, None, 0, None, None),
    ("op6 length", 6, b"\x01\x01", 3, 0, None, None, 0, None, F.BAD_LENGTH),
    ("op6 invalid", 6, b"\x02", 3, 0, None, None, 0, None, F.OP_TYPE_INVALID),
    ("op7 ok", 7, b"\x00\x01\x01", 3, 0, None, None, 0, None, None),
    ("op7 length", 7, b"\x00\x01", 3, 0, None, None, 0, None, F.BAD_LENGTH),
    ("op7 invalid", 7, b"\x00\x05\x01", 3, 0, None, None, 0, None, F.OP_TYPE_INVALID),
    ("f5 kind0", 5, enc_f64_xor(np.array([1.5, -0.0, np.nan, 2.0])), 4, 0, None, None, 0, None, None),
    ("f5 kind1", 5, enc_f64_xor(np.array([1.5, 0, np.inf, 2.0, 3.0, 0, 0, 0, 9.0]),
                                np.array([1, 0, 1, 1, 1, 0, 0, 0, 1], bool)), 9, 4, None, None, 0, None, None),
    ("f5 empty", 5, b"", 4, 0, None, None, 7, None, F.UNSUPPORTED_COMPRESSION),
    ("f5 kind0 with nulls", 5, enc_f64_xor(np.ones(4)), 4, 1, None, None, 0, None, F.NULL_COUNT_MISMATCH),
    ("f5 kind0 short", 5, b"\x00\x01\x02", 4, 0, None, None, 0, None, F.BAD_LENGTH),
    ("f5 kind0 truncated", 5, enc_f64_xor(np.array([1.0, 2.0, 3.0]))[:-1], 3, 0, None, None, 0, None,
     F.VARINT_TRUNCATED),
    ("f5 kind0 trailing", 5, enc_f64_xor(np.ones(3)) + b"\x00", 3, 0, None, None, 0, None, F.TRAILING_BYTES),
    ("f5 kind1 null count 0", 5, b"\x01\x05" + b"\x00" * 8 + b"\x00", 3, 0, None, None, 0, None,
     F.NULL_COUNT_MISMATCH),
    ("f5 kind1 short", 5, b"\x01\x05\x00", 3, 1, None, None, 0, None, F.BAD_LENGTH),
    ("f5 kind1 padding", 5, b"\x01\x0d" + b"\x00" * 8 + b"\x00", 3, 1, None, None, 0, None, F.VALIDITY_PADDING),
    ("f5 kind1 popcount", 5, b"\x01\x01" + b"\x00" * 8, 3, 1, None, None, 0, None, F.NULL_COUNT_MISMATCH),
    ("f5 kind1 truncated", 5, b"\x01\x05" + b"\x00" * 8, 3, 1, None, None, 0, None, F.VARINT_TRUNCATED),
    ("f5 kind1 trailing", 5, b"\x01\x05" + b"\x00" * 8 + b"\x00\x00", 3, 1, None, None, 0, None,
     F.TRAILING_BYTES),
    ("f5 kind2", 5, b"\x02" + b"\x00" * 9, 2, 0, None, None, 0, None, F.VALIDITY_KIND),
    ("ts2 eight 1-byte varints", 2, enc_ts_dod(JITTER_TS), len(JITTER_TS), 0, int(JITTER_TS[0]),
     int(JITTER_TS[-1]), 0, None, None),
    ("f5 kind0 short varints", 5, enc_f64_xor(SHORT), 40, 0, None, None, 0, None, None),
    ("f5 kind1 short varints", 5, enc_f64_xor(SHORT, SHORT_VALID), 40, 1, None, None, 0, None, None),
    ("f5 kind1 short sparse", 5, enc_f64_xor(SHORT, np.arange(40) % 3 == 0), 40, 26, None, None, 0, None, None),
    ("f5 kind0 short 11 bytes", 5, short_chain(b"\x80" * 10 + b"\x00"), 40, 0, None, None, 0, None,
     F.VARINT_OVERFLOW),
    ("f5 kind1 short 11 bytes", 5, short_chain(b"\x80" * 10 + b"\x00", kind1=True), 40, 1, None, None, 0, None,
     F.VARINT_OVERFLOW),
    ("f5 kind1 sparse 11 bytes", 5, b"\x01" + bytes([0x55] * 5) + b"\x01" * 8 + b"\x00" * 8
     + b"\x80" * 10 + b"\x00" + b"\x00" * 10, 40, 20, None, None, 0, None, F.VARINT_OVERFLOW),
    ("f5 long kind1 leading null word", 5, enc_f64_xor(LONG, LONG_VALID_LATE), 300, 290, None, None, 0, None, None),
    ("f5 long kind0", 5, enc_f64_xor(LONG), 300, 0, None, None, 0, None, None),
    ("f5 long kind1 null words", 5, enc_f64_xor(LONG, LONG_VALID), 300, 279, None, None, 0, None, None),
    ("f5 long 9 and 10 bytes", 5, long_chain(b"\xff" * 8 + b"\x7f" + b"\xff" * 9 + b"\x01", n_after=19)[0], 27, 0,
     None, None, 0, None, None),
    ("f5 long 11 bytes", 5, long_chain(b"\x80" * 10 + b"\x00")[0], 27, 0, None, None, 0, None, F.VARINT_OVERFLOW),
    ("f5 long tenth byte 2", 5, long_chain(b"\x80" * 9 + b"\x02")[0], 27, 0, None, None, 0, None,
     F.VARINT_OVERFLOW),
    ("f5 long no terminator", 5, long_chain(b"\x80" * 200, n_after=0)[0], 7, 0, None, None, 0, None,
     F.VARINT_OVERFLOW),
    ("f5 long truncated", 5, enc_f64_xor(LONG)[:-1], 300, 0, None, None, 0, None, F.VARINT_TRUNCATED),
    ("f5 long trailing", 5, enc_f64_xor(LONG) + b"\x00", 300, 0, None, None, 0, None, F.TRAILING_BYTES),
    ("f5 too few bytes for the long path", 5, enc_f64_xor(LONG)[:100], 300, 0, None, None, 0, None, F.VARINT_TRUNCATED),
    ("unknown encoding", 99, b"\x00" * 8, 2, 0, None, None, 0, None, F.UNSUPPORTED_ENCODING),
    ("raw length mismatch", 3, b"\x00" * 8, 2, 0, None, None, 0, 9, F.DECODED_LENGTH_MISMATCH),
    # Zstd: decoded through the frame check and the decompressor
    ("zstd ok", 7, zstd_compress(b"\x01\x00" * 300), 600, 0, None, None, 1, 600, None),
    ("zstd raw frame ok", 7, zstd_raw_frame(b"\x01" * 40), 40, 0, None, None, 1, 40, None),
    ("zstd no fcs", 7, zstd_raw_frame(b"\x01" * 40, single_segment=False), 40, 0, None, None, 1, 40, None),
    ("zstd fcs 2 bytes", 7, zstd_raw_frame(b"\x01" * 300, fcs_size=2), 300, 0, None, None, 1, 300, None),
    ("zstd fcs 4 bytes", 7, zstd_raw_frame(b"\x01" * 40, fcs_size=4), 40, 0, None, None, 1, 40, None),
    ("zstd fcs 8 bytes", 7, zstd_raw_frame(b"\x01" * 40, fcs_size=8), 40, 0, None, None, 1, 40, None),
    ("zstd checksum", 7, zstd_compress(b"\x00\x01" * 200, write_checksum=True), 400, 0, None, None, 1, 400, None),
    ("zstd checksum missing", 7, zstd_raw_frame(b"\x01" * 40, checksum=True)[:-2], 40, 0, None, None, 1, 40,
     F.ZSTD_FRAME_INVALID),
    ("zstd bad magic", 7, b"\x28\xb5\x2f\xfe" + zstd_raw_frame(b"\x01" * 8)[4:], 8, 0, None, None, 1, 8,
     F.ZSTD_FRAME_INVALID),
    ("zstd short", 7, b"\x28\xb5\x2f\xfd", 8, 0, None, None, 1, 8, F.ZSTD_FRAME_INVALID),
    ("zstd reserved bit", 7, zstd_raw_frame(b"\x01" * 8, reserved=True), 8, 0, None, None, 1, 8,
     F.ZSTD_FRAME_INVALID),
    ("zstd dictionary", 7, zstd_raw_frame(b"\x01" * 8, dict_flag=1), 8, 0, None, None, 1, 8, F.ZSTD_FRAME_INVALID),
    ("zstd window too large", 7, zstd_raw_frame(b"\x01" * 8, single_segment=False, window_exp=20), 8, 0, None,
     None, 1, 8, F.ZSTD_FRAME_INVALID),
    ("zstd window exponent 31+", 7, zstd_raw_frame(b"\x01" * 8, single_segment=False, window_exp=31), 8, 0, None,
     None, 1, 8, F.ZSTD_FRAME_INVALID),
    ("zstd no window byte", 7, b"\x28\xb5\x2f\xfd\x00", 8, 0, None, None, 1, 8, F.ZSTD_FRAME_INVALID),
    ("zstd fcs truncated", 7, b"\x28\xb5\x2f\xfd\xe0\x08\x00", 8, 0, None, None, 1, 8, F.ZSTD_FRAME_INVALID),
    ("zstd fcs mismatch", 7, zstd_raw_frame(b"\x01" * 8, fcs=9), 8, 0, None, None, 1, 8, F.DECODED_LENGTH_MISMATCH),
    ("zstd block type 3", 7, zstd_raw_frame(b"\x01" * 8, block_type=3), 8, 0, None, None, 1, 8,
     F.ZSTD_FRAME_INVALID),
    ("zstd block truncated", 7, zstd_raw_frame(b"\x01" * 8)[:-2], 8, 0, None, None, 1, 8, F.ZSTD_FRAME_INVALID),
    ("zstd no block header", 7, zstd_raw_frame(b"\x01" * 8)[:6], 8, 0, None, None, 1, 8, F.ZSTD_FRAME_INVALID),
    ("zstd trailing junk", 7, zstd_raw_frame(b"\x01" * 8) + b"\x00", 8, 0, None, None, 1, 8, F.ZSTD_FRAME_INVALID),
    ("zstd two frames", 7, zstd_raw_frame(b"\x01" * 4, single_segment=False) * 2, 4, 0, None, None, 1, 4,
     F.ZSTD_FRAME_INVALID),
    ("zstd rle more than declared", 7, zstd_raw_frame(b"\x01" * 8, block_type=1, single_segment=False), 4, 0,
     None, None, 1, 4, F.DECODED_LENGTH_MISMATCH),
    ("zstd less than declared", 7, zstd_raw_frame(b"\x01" * 8, single_segment=False), 16, 0, None, None, 1, 16,
     F.DECODED_LENGTH_MISMATCH),
    ("zstd garbage compressed block", 7, zstd_raw_frame(b"\xff" * 40, block_type=2, single_segment=False), 60, 0,
     None, None, 1, 60, F.ZSTD_DECOMPRESS_FAILED),
    ("zstd corrupt compressed block", 7, zstd_compress(bytes(range(256)) * 8)[:-3] + b"\xff\xff\xff", 2048, 0, None,
     None, 1, 2048, None),  # flag depends on where the damage lands; JIT and Python must agree
]


@pytest.mark.parametrize("case", CHUNKS, ids=[c[0] for c in CHUNKS])
def test_chunk_jit_equals_python(case, monkeypatch):
    name, enc, data, rows, nulls, mn, mx, comp, dec, want = case

    def run():
        return cpu.decode_chunk_bytes(enc, data, rows, nulls, mn, mx, compression=comp, decoded_len=dec)

    jit, py = both(run, monkeypatch)
    assert jit == py, (name, jit, py)
    if name.startswith("zstd corrupt"):
        return
    if want is None:
        assert jit[0] == "ok", (name, jit)
    else:
        assert jit[0] == "error" and F(jit[2]) & want, (name, jit, want)


def test_checksum_paths_as_python(monkeypatch):
    """Small chunks hash in the kernel, large ones with xxhash; a wrong checksum is flagged either way."""
    from ._encode_ref import block_of, make_batch

    ts = np.arange(0, 3000, 3, dtype=np.int64)  # 1000 rows: a dod chunk under 512 B, a field chunk over it
    vals = np.random.default_rng(0).normal(size=ts.size)
    batch = make_batch([block_of(ts, fields=[(0, vals, None)])], field_names=("v",))
    for i in range(len(batch.chunks)):
        b2 = make_batch([block_of(ts, fields=[(0, vals, None)])], field_names=("v",))
        b2.chunks["checksum"][i] ^= 1
        jit, py = both(lambda: cpu.decode_batch(b2), monkeypatch)
        assert jit == py and jit[0] == "error" and F(jit[2]) & F.CHECKSUM_MISMATCH
    jit, py = both(lambda: cpu.decode_batch(batch).values[0], monkeypatch)
    assert jit == py and jit[0] == "ok"


def test_leaf_walk_as_python(as_python):
    """format/pages.py's descriptor walk: runs past the page, trailing bytes (starts in
    u32 words: the block at byte 12 is word 3)."""
    from gtsamples.format import rules as R

    def walk(buf, count):
        code, starts, _total = pages._walk_leaf(buf[: len(buf) // 4 * 4].view(np.uint32), len(buf), count,
                                                np.zeros(R.N_VALS, np.uint64))
        return starts, code

    buf = np.zeros(12 + 44 + 3 * 44, np.uint8)
    buf[12 + 40] = 3
    starts, status = walk(buf, 1)
    assert status == R.OK and list(starts) == [3]
    assert walk(buf, 2)[1] == R.LEAF_RUNS_PAST
    assert walk(np.concatenate([buf, np.zeros(1, np.uint8)]), 1)[1] == R.LEAF_TRAILING
    assert walk(buf[:40], 1)[1] == R.LEAF_RUNS_PAST


# --- the two Zstd paths: libzstd from numba, python-zstandard ---------------------------------

ZSTD_CHUNKS = [c for c in CHUNKS if c[7] == 1]


@pytest.mark.parametrize("case", ZSTD_CHUNKS, ids=[c[0] for c in ZSTD_CHUNKS])
def test_zstd_paths_agree(case, monkeypatch):
    """Every Zstd case: the same columns, flags and error class through libzstd (the
    default) and through python-zstandard (``GTSAMPLES_LIBZSTD=off``)."""
    if libzstd.get() is None:
        pytest.skip("no libzstd loads here")
    name, enc, data, rows, nulls, mn, mx, comp, dec, want = case

    def run():
        return _outcome(lambda: cpu.decode_chunk_bytes(enc, data, rows, nulls, mn, mx, compression=comp,
                                                       decoded_len=dec))

    fast = run()
    monkeypatch.setenv(libzstd.ENV_VAR, "off")
    assert libzstd.get() is None
    assert run() == fast, name
    if zstd_frames.check_zstd_frame(data, dec):
        return  # decompress_chunk is only ever given frames that pass the structural check
    # decompress_chunk (the GPU backend's classification of nvCOMP failures) agrees too
    slow = cpu.decompress_chunk(data, dec)
    monkeypatch.delenv(libzstd.ENV_VAR)
    assert cpu.decompress_chunk(data, dec) == slow, name


def test_zstd_failure_messages_name_the_library_error(monkeypatch):
    from ._encode_ref import Block, Chunk, make_batch

    frame = zstd_raw_frame(b"\x01" * 8, single_segment=False)
    for lib in ("default", "off"):
        if lib == "off":
            monkeypatch.setenv(libzstd.ENV_VAR, "off")
        elif libzstd.get() is None:
            continue
        for declared, flag, text in ((4, F.DECODED_LENGTH_MISMATCH, ""), (16, F.DECODED_LENGTH_MISMATCH, "declared 16")):
            out, got, msg = cpu.decompress_chunk(frame, declared, detail=True)
            assert out is None and got == flag and text in msg, (lib, declared, msg)
            assert msg.startswith("zstd"), msg


def test_libzstd_search(monkeypatch, tmp_path):
    """GTSAMPLES_LIBZSTD: a library path, or "off"; a path that does not load falls back."""
    monkeypatch.setenv(libzstd.ENV_VAR, str(tmp_path / "missing.so"))
    assert libzstd.get() is None
    (tmp_path / "junk.so").write_bytes(b"not a library")
    monkeypatch.setenv(libzstd.ENV_VAR, str(tmp_path / "junk.so"))
    assert libzstd.get() is None
    out, flag = cpu.decompress_chunk(zstd_compress(b"abc" * 100), 300)
    assert (out, flag) == (b"abc" * 100, 0)  # python-zstandard did it
    monkeypatch.delenv(libzstd.ENV_VAR)
    z = libzstd.get()
    if z is None:
        pytest.skip("no libzstd loads here")
    assert z.version >= libzstd.MIN_VERSION and z.decompress_addr
    monkeypatch.setenv(libzstd.ENV_VAR, z.path)  # an explicit path
    assert libzstd.get().path == z.path


def test_decompress_window_as_python(monkeypatch):
    """The libzstd window loop run as Python (coverage): several windows, and frames
    without a content size that yield fewer or more bytes than declared."""
    if libzstd.get() is None:
        pytest.skip("no libzstd loads here")
    from ._encode_ref import Chunk, block_of, make_batch

    # the range loop as Python calls the window loop below
    monkeypatch.setattr(cpu.window, "decode_range", cpu.window.decode_range.py_func)
    monkeypatch.setattr(cpu.window, "decompress_window", cpu.window.decompress_window.py_func)
    monkeypatch.setattr(cpu.window, "WINDOW_BYTES", 700)  # a window per chunk or two
    blocks = [block_of(np.arange(i * 1000, i * 1000 + 300), fields=[(0, LONG[:300], None)], compression=1, tsid=i)
              for i in range(3)]
    cols = cpu.decode_batch(make_batch(blocks))
    np.testing.assert_array_equal(cols.timestamp, np.concatenate([np.arange(i * 1000, i * 1000 + 300)
                                                                  for i in range(3)]))
    ops = bytes([1, 0]) * 300
    no_fcs = zstd_compress(ops, write_content_size=False)
    for declared, flag in ((601, F.DECODED_LENGTH_MISMATCH), (599, F.DECODED_LENGTH_MISMATCH)):
        blk = block_of(np.arange(600))
        blk.chunks[2] = Chunk(2, 7, ops, compression=1, stored=no_fcs, decoded_len=declared)
        with pytest.raises(gs.CorruptArtifactError, match="zstd") as ei:
            cpu.decode_batch(make_batch([blk]))
        assert ei.value.flags == flag
