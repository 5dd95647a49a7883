"""The CPU backend's own guards and host plumbing.

The planner's invariants are checked again where a kernel would otherwise
write outside its outputs (the kernels run as Python here, so these branches
are covered), and the host side (thread pool, identity columns, libzstd
contexts and search) is exercised directly.
"""

from __future__ import annotations

import os
import threading

import numba
import numpy as np
import pytest
from numba.core.errors import TypingError

from gtsamples.decode import cpu
from gtsamples.format import libzstd
from gtsamples.errors import DecodeErrorFlag as F

from ._encode_ref import block_of, enc_f64_xor, enc_seq_delta, enc_ts_dod, make_batch, zstd_compress


def _meta(rows: list[tuple[int, int, int, int, int]]) -> np.ndarray:
    """Kernel metadata rows ``(offset, length, encoding, rows, out_row)`` (active, in ``data``)."""
    meta = np.zeros((len(rows), cpu.chunks.N_META), np.int64)
    for i, (off, ln, enc, n, o) in enumerate(rows):
        meta[i, cpu.chunks.M_ACTIVE] = 1
        meta[i, cpu.chunks.M_OFFSET] = off
        meta[i, cpu.chunks.M_LENGTH] = ln
        meta[i, cpu.chunks.M_ENCODING] = enc
        meta[i, cpu.chunks.M_ROWS] = n
        meta[i, cpu.chunks.M_OUT_ROW] = o
        meta[i, cpu.chunks.M_TS_CHUNK] = -1
    return meta


@pytest.mark.parametrize("compiled", [True, False], ids=["jit", "python"])
def test_kernel_writes_stay_inside_outputs(compiled):
    """Chunks whose rows or bytes lie outside the outputs or buffer are BAD_LENGTH, never written."""
    fn = cpu.decode_chunks_range if compiled else cpu.decode_chunks_range.py_func
    ts_bytes = enc_ts_dod(np.arange(4))
    seq_bytes = enc_seq_delta(np.arange(4, dtype=np.uint64))
    f_bytes = enc_f64_xor(np.ones(4))
    data = np.frombuffer(ts_bytes + seq_bytes + b"\x01\x01\x00\x01" + f_bytes, np.uint8).copy()
    a, b, c = len(ts_bytes), len(seq_bytes), 4
    cases = [
        (0, a, 2, 4, 2),  # ts rows past the output
        (a, b, 4, 4, 2),  # seq rows past the output
        (a + b, c, 7, 4, 2),  # op rows past the output
        (a + b + c, len(f_bytes), 5, 4, 2),  # field rows past the output
        (0, a, 2, 4, -1),  # negative output row
        (0, 10_000, 2, 4, 0),  # bytes past the buffer
        (0, a, 2, 0, 0),  # zero rows
        (0, a, 42, 4, 0),  # unknown encoding
    ]
    meta = _meta(cases)
    meta[:, cpu.chunks.M_FIELD] = 0
    ts, seq, op = np.full(5, -7, np.int64), np.full(5, 7, np.uint64), np.full(5, 7, np.uint8)
    vals, bitmaps = np.full((1, 5), 7, np.uint64), np.zeros((1, 64), np.uint8)
    flags = np.zeros(len(cases), np.uint32)
    fn(data, data, meta, 0, 0, len(cases), ts, seq, op, vals, bitmaps, np.ones(1, np.uint8),
       np.zeros((len(cases), 2), np.uint8), flags)
    assert flags.tolist() == [int(F.BAD_LENGTH)] * 7 + [int(F.UNSUPPORTED_ENCODING)]
    assert (ts == -7).all() and (seq == 7).all() and (op == 7).all() and (vals == 7).all()


def test_planner_invariants_raise_value_error():
    batch = make_batch([block_of(np.arange(3))])
    bad = make_batch([block_of(np.arange(3))])
    bad.data = bad.data.astype(np.uint16)
    with pytest.raises(ValueError, match="1-D uint8"):
        cpu.decode_batch(bad)
    blocks = batch.blocks.copy()
    blocks["rows"] = 99
    with pytest.raises(ValueError, match="exceed the batch"):
        cpu.identity_columns(blocks, batch.n_rows, True, True)


def test_checksums_default_to_every_chunk():
    batch = make_batch([block_of(np.arange(5), fields=[(0, np.ones(5), None)])])
    flags = np.zeros(len(batch.chunks), np.uint32)
    cpu.xxh64.checksums_ok(batch, flags)
    assert not flags.any()
    batch.chunks["checksum"][2] ^= 1
    cpu.xxh64.checksums_ok(batch, flags)
    assert flags.tolist() == [0, 0, int(F.CHECKSUM_MISMATCH), 0]


def test_thread_pool_grows():
    pool = cpu.parallel.POOL
    small = pool.get(1)
    assert small is pool.get(1)
    bigger = pool.get(pool.size + 1)
    assert bigger is not small and pool.size >= 2
    batch = make_batch([block_of(np.arange(500), compression=1)])
    assert cpu.decode_batch(batch, threads=2).timestamp.tolist() == list(range(500))


def test_decompress_chunk_takes_any_buffer():
    """A buffer of wider items (here uint16) is read as its bytes."""
    raw = next(r for r in (bytes(range(n)) * 4 for n in range(200, 256)) if len(zstd_compress(r)) % 2 == 0)
    frame = zstd_compress(raw)
    assert cpu.decompress_chunk(np.frombuffer(frame, np.uint16), len(raw)) == (raw, 0)
    assert cpu.decompress_chunk(memoryview(np.frombuffer(frame, np.uint16)), len(raw)) == (raw, 0)


def test_intrinsics_reject_non_integers():
    with pytest.raises(TypingError):
        numba.njit(lambda: cpu.intrinsics.pext(1.5, 2))()
    with pytest.raises(TypingError):
        numba.njit(lambda: libzstd.zstd_decompress_into(1.5, 0, 0, 0, 0, 0))()
    with pytest.raises(TypingError):
        numba.njit(lambda a: cpu.intrinsics.ld_u64(a, 0))(np.zeros(8, np.int32))


def test_pext_python_body():
    # pext gathers the bits of x at the mask's set bits, low to high
    assert int(cpu.intrinsics.pext(0b101101, 0b111100)) == 0b1011
    assert int(cpu.intrinsics.pext(0xFFFF_FFFF_FFFF_FFFF, 0x7F7F)) == 0x3FFF
    compiled = numba.njit(lambda x, m: cpu.intrinsics.pext(x, m)) if cpu.intrinsics.HAS_BMI2 else None
    if compiled is not None:
        rng = np.random.default_rng(3)
        for x, m in rng.integers(0, 2**63, (50, 2), dtype=np.uint64):
            assert compiled(np.uint64(x), np.uint64(m)) == cpu.intrinsics.pext(x, m)


def test_decompression_contexts_return_to_the_library_with_their_thread():
    """A thread's context is lent, not freed, when the thread ends: the library owns every
    context for its life (a kernel may still run with one), and the next thread reuses it."""
    z = libzstd.get()
    if z is None:
        pytest.skip("no libzstd loads here")
    import gc

    ptrs = []

    def lend():
        ptrs.append(z.dctx())
        ptrs.append(z.dctx())  # the same context for the thread's life

    th = threading.Thread(target=lend)
    th.start()
    th.join()
    gc.collect()
    assert ptrs[0] == ptrs[1] != 0
    assert ptrs[0] in z.free, "the ended thread's context was not given back"
    created = z.created
    th = threading.Thread(target=lend)
    th.start()
    th.join()
    assert ptrs[2] in (ptrs[0], *z.free) and z.created == created, "a new context was made instead of reusing one"


def test_python_zstandards_libzstd_comes_first():
    """The kernels call the very library python-zstandard uses (so both paths refuse
    the same frames: Debian's libzstd 1.5.4 decompressed a corrupt frame that 1.5.7
    refuses, fuzz finding F7, tests/data/bad/root_page_zstd_corruption)."""
    import zstandard

    z = libzstd.get()
    if z is None:
        pytest.skip("no libzstd loads here")
    assert os.path.dirname(z.path) == os.path.dirname(zstandard.__file__), z.path


def test_system_libzstd_is_the_fallback(monkeypatch):
    """Without python-zstandard's own library the system's libzstd is used (when one exists)."""
    import ctypes.util

    monkeypatch.setattr(libzstd.glob, "glob", lambda pattern: [])
    monkeypatch.setattr(libzstd, "_LIBS", {})  # a fresh search; the process's library stays in the old dict
    z = libzstd.get()
    system = ctypes.util.find_library("zstd")
    if system is None:
        assert z is None
    else:
        assert z is not None and z.path == system
        assert cpu.decompress_chunk(zstd_compress(b"x" * 100), 100) == (b"x" * 100, 0)


_clock_kernel = numba.njit(lambda fn, buf: libzstd.monotonic_ns(fn, buf))


def test_kernel_clock_is_the_monotonic_clock():
    """``monotonic_ns`` in compiled code reads the clock ``time.monotonic_ns`` reads
    (libc's ``clock_gettime`` by address); without an address it reads 0."""
    import time

    if not libzstd.CLOCK_GETTIME_ADDR:
        pytest.skip("no clock_gettime in this libc")
    buf = np.zeros(2, np.int64)
    before = time.monotonic_ns()
    got = _clock_kernel(libzstd.CLOCK_GETTIME_ADDR, buf)
    after = time.monotonic_ns()
    assert before <= got <= after
    assert _clock_kernel(0, buf) == 0


_cpu_clock_kernel = numba.njit(lambda fn, buf: libzstd.thread_cpu_ns(fn, buf))


def test_kernel_cpu_clock_is_the_threads_cpu_time():
    """``thread_cpu_ns`` in compiled code reads this thread's CPU time, the clock
    ``time.thread_time_ns`` reads (it does not advance while the thread sleeps);
    without an address it reads 0."""
    import time

    if not libzstd.CLOCK_GETTIME_ADDR or libzstd.CLOCK_THREAD_CPUTIME < 0:
        pytest.skip("no clock_gettime or no thread CPU clock here")
    buf = np.zeros(2, np.int64)
    before = time.thread_time_ns()
    got = _cpu_clock_kernel(libzstd.CLOCK_GETTIME_ADDR, buf)
    time.sleep(0.05)
    after = _cpu_clock_kernel(libzstd.CLOCK_GETTIME_ADDR, buf)
    assert before <= got <= after <= time.thread_time_ns()
    assert after - got < 40_000_000  # sleeping costs no CPU time
    assert _cpu_clock_kernel(0, buf) == 0


def test_decode_times_its_stages_inside_the_range_kernel():
    """The libzstd path times decompression and decoding inside ``decode_range``:
    ``last_stats`` reports both (CPU time, on one thread here: within the decode stage's
    wall time), the call's CPU time and its counts."""
    if libzstd.get() is None or not libzstd.CLOCK_GETTIME_ADDR:
        pytest.skip("no libzstd or no clock here")
    from ._encode_ref import block_of, make_batch

    cpu.decode_batch(make_batch([block_of(np.arange(5000), compression=1)]), threads=1)
    st = cpu.last_stats()
    assert st["decompress"] > 0 and st["kernel"] > 0
    assert st["decompress"] + st["kernel"] <= st["decode"]
    assert 0 < st["cpu"] and (st["chunks"], st["rows"], st["zstd_chunks"]) == (3, 5000, 3)
    assert st["zstd_bytes"] > 5000


def test_xxh64_matches_is_xxhash_and_never_reads_outside_the_data():
    import xxhash

    data = np.frombuffer(bytes(range(256)) * 3, np.uint8).copy()
    offs = np.array([0, 7, 700, 768, 2**63], np.uint64)
    lens = np.array([0, 100, 68, 1, 4], np.uint32)  # the last two lie outside the 768 bytes
    want = [xxhash.xxh64_intdigest(data[o: o + n].tobytes()) for o, n in zip(offs[:3].tolist(), lens[:3].tolist())]
    expected = np.array(want + [0, 0], np.uint64)
    assert cpu.xxh64.xxh64_matches(data, offs, lens, expected).tolist() == [True, True, True, False, False]
    expected[1] ^= 1
    assert cpu.xxh64.xxh64_matches(data, offs, lens, expected, threads=2).tolist() == [True, False, True, False, False]
