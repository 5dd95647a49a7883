"""Artifact-level GPU parity cases, shared by the real-device tests
(tests/gpu/test_gpu_artifacts.py) and their host-emulated run
(tests/kernels/test_artifact_device.py).

Every case opens an artifact, reads it with the CPU backend
(``Artifact.read``) and through the GPU path (``read_device(art, **kw)``:
``Artifact.read_device(...).to_arrow()`` on a device), and requires equal
tables bit for bit, or the same error class, message rule, ``err.flags`` and
per-chunk flag words.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

import numpy as np
import pyarrow as pa
import pytest

import gtsamples as gs
from gtsamples.cache import PageCache
from tests.conftest import DATA, assert_tables_equal

VECTORS = sorted(p for p in (DATA / "vectors").iterdir() if p.is_dir())
GOLDEN = sorted(p for p in (DATA / "golden").iterdir() if p.is_dir() and (p / "case.json").exists())
FIXED = ["__table_id", "__tsid", "__sequence", "__op_type"]

ReadDevice = Callable[..., pa.Table]


def open_case(d: Path) -> gs.Artifact:
    entry = json.loads((d / "entry.json").read_text())
    return gs.open_artifact(d / "store", entry=entry, cache=PageCache())


def vector_queries(vec: Path) -> list[tuple[str, dict]]:
    """(id, read kwargs): the full read and every case.json query."""
    case = json.loads((vec / "case.json").read_text())
    out = [("full", {})]
    art = open_case(vec)
    for i, q in enumerate(case.get("queries", [])):
        kw = {
            "columns": None if q["columns"] is None else FIXED + [art.manifest.timestamp.name] + q["columns"],
            "series": None if q["series"] is None else [tuple(s) for s in q["series"]],
            "tables": q["tables"],
            "start": q["start"],
            "end": q["end"],
        }
        out.append((f"q{i}", kw))
    return out


def golden_queries(d: Path, quick: bool = False) -> list[tuple[str, dict]]:
    """(id, read kwargs): the full read and test_golden.py's selections
    (series x time windows cutting blocks), plus a projection."""
    art = open_case(d)
    t = art.read()
    ts_name = art.manifest.timestamp.name
    ts = t.column(ts_name).cast(pa.int64()).to_numpy()
    ids = sorted({(int(a), int(b)) for a, b in zip(t.column("__table_id").to_numpy(), t.column("__tsid").to_numpy())})
    lo, hi = int(ts.min()), int(ts.max())
    mid = (lo + hi) // 2
    out = [("full", {})]
    series_opts = (None, ids[::2]) if quick else (None, ids[:1], ids[-1:], ids[::2])
    windows = ((mid, None), (lo + 1, hi)) if quick else (
        (mid, None), (None, mid), (mid, mid + 1), (lo, hi + 1), (hi, lo), (lo + 1, hi))
    for si, series in enumerate(series_opts):
        for wi, (start, end) in enumerate(((None, None),) + windows):
            if si == 0 and wi == 0:
                continue
            out.append((f"s{si}w{wi}", {"series": series, "start": start, "end": end}))
    fields = [f.name for f in art.manifest.fields]
    out.append(("proj", {"columns": [ts_name, fields[-1]], "start": mid}))
    return out


def assert_same_read(art: gs.Artifact, read_device: ReadDevice, kw: dict, what: str = "") -> None:
    """CPU read == GPU read bit for bit, or both fail alike."""
    try:
        want = art.read(**kw)
        cpu_err = None
    except gs.SamplesError as e:
        cpu_err = e
    try:
        got = read_device(art, **kw)
        gpu_err = None
    except gs.SamplesError as e:
        gpu_err = e
    if cpu_err is not None:
        assert gpu_err is not None, f"{what}: CPU raised {cpu_err!r}, GPU read {got.num_rows} rows"
        assert_same_error(gpu_err, cpu_err, what)
        return
    assert gpu_err is None, f"{what}: GPU raised {gpu_err!r}, CPU read {want.num_rows} rows"
    assert_tables_equal(got, want)
    assert got.schema == want.schema, (what, got.schema, want.schema)


def assert_same_error(gpu_err: BaseException, cpu_err: BaseException, what: str = "") -> None:
    assert type(gpu_err) is type(cpu_err), (what, gpu_err, cpu_err)
    assert getattr(gpu_err, "flags", None) == getattr(cpu_err, "flags", None), (what, gpu_err, cpu_err)
    gf, cf = getattr(gpu_err, "chunk_flags", None), getattr(cpu_err, "chunk_flags", None)
    if cf is not None:
        assert gf is not None, what
        np.testing.assert_array_equal(np.asarray(gf), np.asarray(cf), err_msg=what)


# ----------------------------------------------------------------------------- NAB


def nab_artifact(shared_dir: Path, tmp_path: Path) -> tuple[gs.Artifact, pa.Table]:
    """The NAB data (../shared/data/nab-real.tar.xz) written as in tests/test_nab.py."""
    from tests.test_nab import load_nab

    archive = shared_dir / "data" / "nab-real.tar.xz"
    if not archive.exists():
        pytest.skip(f"{archive} is absent")
    table, _ = load_nab(str(archive), str(tmp_path / "nab"))
    root = tmp_path / "store"
    entry = gs.write_artifact(table, root, region_id=1, source_file_id="00000000-0000-4000-8000-0000000000ab",
                              generation="00000000-0000-4000-8000-0000000000ac", timestamp_column_id=0,
                              field_column_ids=[1])  # fmt: skip
    return gs.open_artifact(root, entry=entry, cache=PageCache()), table


def nab_queries(table: pa.Table) -> list[tuple[str, dict]]:
    ts = table.column("timestamp").cast(pa.int64()).to_numpy()
    tid = table.column("__table_id").to_numpy()
    tsid = table.column("__tsid").to_numpy()
    mid = int(np.median(ts))
    return [
        ("full", {}),
        ("series-first", {"series": [(int(tid[0]), int(tsid[0]))]}),
        ("series-last-window", {"series": [(int(tid[-1]), int(tsid[-1]))], "start": mid}),
        ("window", {"start": mid, "end": mid + 86_400_000 * 3}),
        ("table-1", {"tables": [int(tid[0])], "columns": ["timestamp", "value"]}),
    ]


# ----------------------------------------------------------------------------- corruption cases


def decode_stage_cases() -> list:
    """tests/corruption/test_rules.py cases that reach decoding: the stage
    "decode" failures and the "decode-*-ok" boundaries that must still read."""
    from tests.corruption.test_rules import CASES

    return [c for c in CASES if c.stage == "decode" or c.id.startswith("decode-")]


def check_corruption_case(case, written, tmp_path, read_device: ReadDevice) -> None:
    """The corrupted artifact reads on the GPU exactly as on the CPU: same
    rows, or the same error class / flags / chunk flags, and the error also
    satisfies the case's own rule (class, message, flags)."""
    from tests.corruption.test_rules import build, check_error, opener

    table, root, entry, gen_dir = build(case, written, tmp_path)
    open_fn = opener(root, entry, gen_dir, case.gen_dir)
    art = open_fn()
    if case.err is None:
        got = read_device(art, **case.read_kw)
        want = open_fn().read(**case.read_kw)
        assert_tables_equal(got, want)
        if case.same and not case.read_kw:
            assert_tables_equal(got, table)
        return
    with pytest.raises(gs.SamplesError) as cpu_info:
        open_fn().read(**case.read_kw)
    with pytest.raises(gs.SamplesError) as gpu_info:
        read_device(art, **case.read_kw)
    assert_same_error(gpu_info.value, cpu_info.value, case.id)
    check_error(gpu_info.value, case)
