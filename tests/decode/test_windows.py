"""Decoding in bounded scratch windows gives the same rows as one window."""

import uuid

import gtsamples as gs
from gtsamples.decode import cpu
from gtsamples.demo import synthetic_metrics

from ..conftest import assert_tables_equal


def test_small_scratch_windows_equal_one_window(tmp_path, monkeypatch):
    t = synthetic_metrics(6, 3000, fields=("a", "b"))
    e = gs.write_artifact(t, tmp_path, region_id=1, source_file_id=str(uuid.uuid4()), timestamp_column_id=0,
                          field_column_ids=[1, 2], row_limit=500)
    art = gs.open_artifact(tmp_path, entry=e)
    whole = art.read()
    monkeypatch.setattr(cpu, "WINDOW_BYTES", 3000)  # many windows, some holding one chunk
    assert_tables_equal(art.read(), whole)
    assert_tables_equal(whole, t.cast(whole.schema))
