"""Decoding in bounded scratch windows gives the same rows as one window."""

import threading
import uuid

import pytest

import gtsamples as gs
from gtsamples.decode import cpu
from gtsamples.format import libzstd
from gtsamples.demo import synthetic_metrics

from ..conftest import assert_tables_equal


@pytest.mark.parametrize("lib", ["libzstd", "python-zstandard"])
def test_small_scratch_windows_equal_one_window(tmp_path, monkeypatch, lib):
    if lib == "python-zstandard":
        monkeypatch.setenv(libzstd.ENV_VAR, "off")
    t = synthetic_metrics(6, 3000, fields=("a", "b"))
    e = gs.write_artifact(t, tmp_path, region_id=1, source_file_id=str(uuid.uuid4()), timestamp_column_id=0,
                          field_column_ids=[1, 2], row_limit=500)
    art = gs.open_artifact(tmp_path, entry=e)
    whole = art.read()
    monkeypatch.setattr(cpu.window, "WINDOW_BYTES", 3000)  # many windows, some holding one chunk
    assert_tables_equal(art.read(), whole)
    assert_tables_equal(whole, t.cast(whole.schema))


def test_window_grows_for_a_large_chunk(tmp_path, monkeypatch):
    """A thread's first window is WINDOW_BYTES; a larger chunk grows it (in a fresh thread)."""
    t = synthetic_metrics(2, 3000, fields=("a",))
    e = gs.write_artifact(t, tmp_path, region_id=1, source_file_id=str(uuid.uuid4()), timestamp_column_id=0,
                          field_column_ids=[1])
    art = gs.open_artifact(tmp_path, entry=e)
    whole = art.read()
    monkeypatch.setattr(cpu.window, "WINDOW_BYTES", 1000)  # smaller than the float chunks
    out = {}
    th = threading.Thread(target=lambda: out.update(t=art.read(), w=cpu.window.thread_state()[1].shape[0]))
    th.start()
    th.join()
    assert out["w"] > 1000
    assert_tables_equal(out["t"], whole)
