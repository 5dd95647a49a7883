"""The GPU backend's safety rules, on the host emulator (no GPU):

* nvCOMP never gets a frame whose decoded size the headers do not prove: a
  frame without a content size holding compressed blocks is decompressed on
  the host as the CPU backend does, with the CPU backend's verdict.  The
  emulated nvCOMP fails a test (``NvcompOverrun``) when it is handed a frame
  that decodes past its capacity, as the code before this rule did;
* buffers an enqueued nvCOMP call uses live until the stream has run it
  (``TrackedEmuDevice`` queues the call and tracks every allocation);
* without libnvcomp, Zstd chunks raise an ``UnsupportedError`` naming the
  ``gpu`` extra;
* errors equal the CPU backend's: class, flags, per-chunk flags and message.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import pytest
import zstandard

from gtsamples.decode import cpu, gpu
from gtsamples.decode.gpu import driver
from gtsamples.decode.gpu import nvcomp as nv
from gtsamples.errors import DecodeErrorFlag, UnsupportedError
from tests.gpu import frame_cases as FC
from tests.gpu import scenarios as S

emu = pytest.importorskip("tests.kernels.emu_device")
if emu.compiler() is None:  # pragma: no cover
    pytest.skip("no C++ compiler for the kernel emulator", allow_module_level=True)
from tests.kernels import emu_nvcomp as EN  # noqa: E402

F = DecodeErrorFlag


@pytest.fixture(scope="module", autouse=True)
def _emulator():
    emu.load_library()


DEVICES = {"emu": emu.EmuDevice, "tracked": EN.TrackedEmuDevice}


# ----------------------------------------------------------------------------- frames without a proven size

UNPROVEN = FC.UNPROVEN
unproven_case, check_same_as_cpu, no_fcs = FC.unproven_case, FC.check_same_as_cpu, FC.no_fcs


def test_the_frames_are_what_the_cases_say():
    """The premise: these frames pass the host frame check, and their size is not proven."""
    for name in UNPROVEN:
        b, i = unproven_case(name)
        o, n = int(b.chunks["src_offset"][i]), int(b.chunks["stored_len"][i])
        flags, exact = nv.check_frames(b.data, np.array([o]), np.array([n]), b.chunks["decoded_len"][i : i + 1],
                                       exact=True)  # fmt: skip
        assert flags[0] == 0 and not exact[0], name


@pytest.mark.parametrize("device", list(DEVICES))
@pytest.mark.parametrize("hash_on", ["device", "host"])
@pytest.mark.parametrize("name", UNPROVEN)
def test_unproven_frames_never_reach_nvcomp(name, hash_on, device):
    b, i = unproven_case(name)
    dev = DEVICES[device]()
    check_same_as_cpu(b, dev, hash_on=hash_on)
    assert not getattr(dev, "overruns", [])
    want_flags = {"exact": 0, "more": F.DECODED_LENGTH_MISMATCH, "much-more": F.DECODED_LENGTH_MISMATCH,
                  "less": F.DECODED_LENGTH_MISMATCH, "more-bad-checksum": F.CHECKSUM_MISMATCH}  # fmt: skip
    if name in want_flags:  # the CPU verdict the GPU now matches
        _, flags, _ = cpu.decode_batch_flags(b, threads=1)
        assert flags[i] == want_flags[name]


def test_an_unproven_valid_frame_decodes_on_the_host():
    b, i = unproven_case("exact")
    dev = EN.TrackedEmuDevice()
    dt = S.decode(b, dev)
    S.assert_same(S.host_columns(dt), S.cpu_columns(b))
    # nvCOMP got every other Zstd chunk, not this one
    n_zstd = int(np.count_nonzero(b.chunks["compression"] == 1))
    assert sum(dev.lib.calls) == n_zstd - 1


@pytest.mark.parametrize("name", ["more", "much-more"])
def test_the_emulated_nvcomp_catches_the_overrun_the_old_check_let_through(name, monkeypatch):
    """Control: with every passing frame treated as proven (the code before the
    size proof), the frame reaches nvCOMP and the emulation reports the overrun."""
    real = nv.frame_verdicts

    def all_proven(chunks, data, flags, *, checksums):
        proven = real(chunks, data, flags, checksums=checksums)
        proven[(chunks["compression"] == 1) & (flags == 0)] = True
        return proven

    monkeypatch.setattr(nv, "frame_verdicts", all_proven)
    b, _ = unproven_case(name)
    for device in DEVICES.values():
        with pytest.raises(EN.NvcompOverrun, match="decodes to more"):
            S.decode(b, device())


def test_check_fits():
    raw = bytes(1000)
    frame = no_fcs(raw)
    EN.check_fits(frame, 1000, 0)
    log = []
    with pytest.raises(EN.NvcompOverrun):
        EN.check_fits(frame, 999, 5, log)
    assert log == [(5, 999)]
    EN.check_fits(zstandard.compress(raw), 1000, 0)
    assert EN.decoded_size(frame[:-3], 10_000) < 1000  # a truncated frame: what it produced


def test_decoded_buffer_has_slack():
    assert gpu.DECODED_SLACK >= 128 << 10  # one Zstd block past the last chunk


# ----------------------------------------------------------------------------- the corruption scenarios: messages too


@pytest.mark.parametrize("name,mutate", S.corruption_cases(), ids=[c[0] for c in S.corruption_cases()])
def test_corruption_same_message_as_cpu(name, mutate):
    check_same_as_cpu(S.corrupted_batch(name, mutate), EN.TrackedEmuDevice())


@pytest.mark.parametrize("name,corrupt", S.descriptor_cases(), ids=[c[0] for c in S.descriptor_cases()])
@pytest.mark.parametrize("hash_on", ["host", "device"])
def test_descriptor_corruption_same_message_as_cpu(name, corrupt, hash_on):
    b = S.descriptor_batch()
    corrupt(b)
    check_same_as_cpu(b, EN.TrackedEmuDevice(), hash_on=hash_on)


@pytest.mark.parametrize("where", ["outside", "too_big"])
def test_bad_length_same_message_as_cpu(where):
    b = S.descriptor_batch()
    if where == "outside":
        b.chunks["stored_len"][2] = len(b.data) + 5
    else:
        b.chunks["decoded_len"][4] = (1 << 20) + 1
    check_same_as_cpu(b, EN.TrackedEmuDevice())


# ----------------------------------------------------------------------------- lifetimes

_SMALL_BUDGET = 300_000  # several nvCOMP sub-batches


def _zstd_built(seed=41):
    return S.random_built(seed, n_blocks=10, n_fields=2, max_rows=200, compression="zstd")


@pytest.mark.parametrize("hash_on", ["device", "host"])
def test_nvcomp_buffers_live_until_the_stream_ran_the_calls(hash_on):
    dev = EN.TrackedEmuDevice()
    S.check_parity(_zstd_built(), dev, hash_on=hash_on, temp_budget=_SMALL_BUDGET)
    dev.finish()
    assert len(dev.lib.calls) >= 2 and not dev.violations and not dev.overruns


def test_lifetime_check_fails_without_stream_ordered_keepalive(monkeypatch):
    """Control: freeing the temp memory and tables when the call returns (as
    before) is caught when the stream runs the queued call."""
    monkeypatch.setattr(EN.TrackedEmuDevice, "keep_until_done", lambda self, objs: None)
    dev = EN.TrackedEmuDevice()
    with pytest.raises(EN.LifetimeViolation, match="freed before the stream ran the call"):
        S.decode(_zstd_built(42).batch, dev, temp_budget=_SMALL_BUDGET)


def test_keep_until_done_releases_after_the_stream_passed():
    dev = EN.TrackedEmuDevice()
    a = dev.empty(64, np.uint8)
    ptr = a.ctypes.data
    ran = []
    dev.enqueue(lambda: ran.append(1), [(ptr, 64, "probe")])
    dev.keep_until_done((a,))
    del a
    assert dev.alive(ptr, 64) is True  # held for the queued call
    dev.finish()
    assert ran == [1] and dev.alive(ptr, 64) is False


class _FoldFails(EN.TrackedEmuDevice):
    """The launch after nvCOMP fails: an exception while nvCOMP is still queued."""

    def kernel(self, file, name):
        if name == "gts_fold_nvcomp_status":
            raise RuntimeError("launch failed")
        return super().kernel(file, name)


def test_failed_decode_keeps_enqueued_buffers_alive():
    """An error raised while nvCOMP is enqueued: the driver hands the stored
    bytes, the decoded buffer and its tables to keep_until_done on the way out,
    so the queued call runs on live memory."""
    dev = _FoldFails()
    with pytest.raises(RuntimeError, match="launch failed"):
        S.decode(_zstd_built(43).batch, dev, temp_budget=_SMALL_BUDGET)
    dev.finish()
    assert not dev.violations and dev.lib.calls


def test_failed_decode_without_keepalive_is_caught(monkeypatch):
    """Control: without the driver's keepalive on the way out, the queued call
    finds its frames or outputs freed."""
    monkeypatch.setattr(driver, "_settle", lambda dev, staging, keep, host_buf, fetch=None: None)
    dev = _FoldFails()
    with pytest.raises(RuntimeError, match="launch failed"):
        S.decode(_zstd_built(43).batch, dev, temp_budget=_SMALL_BUDGET)
    with pytest.raises(EN.LifetimeViolation, match="(frame|output) .* freed"):
        dev.finish()


# ----------------------------------------------------------------------------- no libnvcomp


@pytest.fixture
def no_libnvcomp(monkeypatch):
    """Every way _open_library finds libnvcomp fails."""
    monkeypatch.setattr(nv, "_LIB", None)
    monkeypatch.setenv("GTSAMPLES_NVCOMP_LIBRARY", "/nonexistent/libnvcomp.so")
    for mod in ("nvidia.libnvcomp", "nvidia.libnvcomp.load"):
        monkeypatch.setitem(sys.modules, mod, None)

    def cdll(name, *a, **k):
        raise OSError(f"{name}: cannot open shared object file")

    monkeypatch.setattr(nv.ctypes, "CDLL", cdll)


def test_missing_libnvcomp_is_unsupported_naming_the_gpu_extra(no_libnvcomp):
    with pytest.raises(UnsupportedError) as info:
        nv.load_nvcomp()
    err = info.value
    assert isinstance(err, nv.NvcompUnavailableError) and isinstance(err, nv.NvcompError)
    assert "pip install 'gtsamples[gpu]'" in str(err) and "libnvcomp could not be loaded" in str(err)


class _RealNvcompEmuDevice(EN.TrackedEmuDevice):
    """Looks libnvcomp up as CupyDevice does."""

    def nvcomp(self):
        return nv.load_nvcomp()


def test_zstd_chunks_without_libnvcomp_raise_unsupported_before_device_work(no_libnvcomp):
    b = _zstd_built(44).batch
    dev = _RealNvcompEmuDevice()
    with pytest.raises(UnsupportedError, match=re.escape("pip install 'gtsamples[gpu]'")):
        S.decode(b, dev)
    assert not dev.launches and not dev.lib.calls
    # raw chunks need no nvCOMP
    raw = S.random_built(45, n_blocks=3, n_fields=1, compression="raw")
    S.check_parity(raw, _RealNvcompEmuDevice())


# ----------------------------------------------------------------------------- nvCOMP 6.0 status names


def _header() -> Path | None:
    try:
        import nvidia.libnvcomp as pkg
    except ImportError:
        return None
    for d in pkg.__path__:
        p = Path(d) / "include" / "nvcomp" / "shared_types.h"
        if p.is_file():
            return p
    return None


def test_status_names_match_the_nvcomp_header():
    h = _header()
    if h is None:
        pytest.skip("nvidia-libnvcomp-cu13 headers not installed (make setup installs the kernels-test extra)")
    body = re.search(r"typedef enum nvcompStatus_t\s*\{(.*?)\}\s*nvcompStatus_t;", h.read_text(), re.S).group(1)
    enum = {int(v): name for name, v in re.findall(r"(nvcomp\w+)\s*=\s*(\d+)", body)}
    assert {22, 23, 24} <= set(enum)
    assert nv.NVCOMP_STATUS_NAMES == enum
