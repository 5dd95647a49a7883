"""Helpers for region tests: random SST tables in spec order, corruption, oracles."""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from gtsamples import cache as gcache

REGION_ID = 4398046511104 + 3


def make_sst_table(rng: np.random.Generator, rows: int = 200, series: int = 4, tables=(1, 2), fields=("v", "w"),
                   ts_range: int = 50, dup_p: float = 0.2, delete_p: float = 0.1, null_p: float = 0.1,
                   seq_base: int = 0, unit: str = "ms", ids=None) -> pa.Table:
    """A random SST table in spec order, with duplicate timestamps, equal-sequence
    ties, delete markers, nulls, NaN and -0.0."""
    if ids is None:
        ids = [(int(t), int(s)) for t in tables for s in rng.choice(1000, size=series, replace=False)]
    pick = rng.integers(0, len(ids), rows)
    tid = np.array([ids[k][0] for k in pick], np.uint32)
    tsid = np.array([ids[k][1] for k in pick], np.uint64)
    ts = rng.integers(0, ts_range, rows).astype(np.int64) * 1000
    seq = rng.integers(0, max(2, rows // 4), rows).astype(np.uint64) + np.uint64(seq_base)
    if dup_p:  # force some exact (identity, ts, seq) ties
        k = rng.random(rows) < dup_p
        ts[k] = 0
        seq[k] = np.uint64(seq_base)
    op = (rng.random(rows) >= delete_p).astype(np.uint8)
    order = np.lexsort((~seq, ts, tsid, tid))
    cols = {"__table_id": tid[order], "__tsid": tsid[order], "ts": pa.array(ts[order], pa.timestamp(unit)),
            "__sequence": seq[order], "__op_type": op[order]}
    for f in fields:
        v = rng.normal(size=rows)
        v[rng.random(rows) < 0.05] = np.nan
        v[rng.random(rows) < 0.05] = -0.0
        mask = rng.random(rows) < null_p
        cols[f] = pa.array(v[order], mask=mask[order])
    return pa.table(cols)


def oracle(tables: list[pa.Table], columns=None, series=None, tbls=None, start=None, end=None) -> pa.Table:
    """Independent reference: concatenate the source tables and filter with pyarrow.compute."""
    t = pa.concat_tables(tables)
    mask = None

    def _and(m, x):
        return x if m is None else pc.and_(m, x)

    if series is not None:
        key = pc.add(pc.multiply(pc.cast(t["__table_id"], pa.uint64()), pa.scalar(1 << 40, pa.uint64())), t["__tsid"])
        want = pa.array([(a << 40) + b for a, b in series], pa.uint64())
        mask = _and(mask, pc.is_in(key, value_set=want))
    if tbls is not None:
        mask = _and(mask, pc.is_in(t["__table_id"], value_set=pa.array(list(tbls), pa.uint32())))
    ts = pc.cast(t["ts"], pa.int64())
    if start is not None:
        mask = _and(mask, pc.greater_equal(ts, start))
    if end is not None:
        mask = _and(mask, pc.less(ts, end))
    if mask is not None:
        t = t.filter(mask)
    if columns is not None:
        t = t.select([n for n in t.schema.names if n in set(columns)])
    return t


def dedup_oracle(t: pa.Table, ts_name: str = "ts") -> list[tuple]:
    """Last-write-wins by brute force (Python): sorted rows as tuples."""
    best = {}
    rows = t.to_pylist()
    for i, r in enumerate(rows):
        k = (r["__table_id"], r["__tsid"], r[ts_name])
        if k not in best or r["__sequence"] > rows[best[k]]["__sequence"]:
            best[k] = i
    keep = sorted(best.items())
    return [_row_key(rows[i]) for _, i in keep if rows[i]["__op_type"] != 0]


def _row_key(r: dict) -> tuple:
    out = []
    for k, v in r.items():
        if isinstance(v, float):
            out.append(("f", np.float64(v).view(np.uint64).item()))
        else:
            out.append(v)
    return tuple(out)


def rows_of(t: pa.Table) -> list[tuple]:
    return [_row_key(r) for r in t.to_pylist()]


def flip_byte(path: str, offset: int) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0xFF]))


def catalog_region(root, ssts: int = 2):
    """A region at ``root`` of ``ssts`` small SSTs (30 rows each), every one covered."""
    from gtsamples.region import create_region

    r = create_region(root, REGION_ID)
    rng = np.random.default_rng(11)
    for _ in range(ssts):
        r.add_sst(make_sst_table(rng, rows=30))
    r.build()
    return r


def catalog_path(root, n: int):
    """The path of catalog version ``n`` of the region at ``root`` (a ``pathlib.Path``)."""
    return root / str(REGION_ID) / "samples" / "_catalog" / f"v{n:020d}.json"


def write_next_version(root, r, doc: dict, edit=None, text_edit=None) -> int:
    """Catalog version ``r.version + 1`` of the region at ``root`` written as ``edit(doc)``
    (a document as JSON gives it) and then ``text_edit`` on its compact text; its number."""
    import json

    n = r.version + 1
    doc["catalog_version"] = n
    if edit is not None:
        edit(doc)
    text = json.dumps(doc, separators=(",", ":"))
    if text_edit is not None:
        text = text_edit(text)
    catalog_path(root, n).write_bytes(text.encode("utf-8", "surrogateescape"))
    return n


def set_at(path, value):
    """An edit of a JSON document: the value at ``path`` (keys and indices) set to
    ``value``, or to ``value(old value)`` when it is callable."""
    def edit(doc):
        *outer, last = path
        o = doc
        for k in outer:
            o = o[k]
        o[last] = value(o[last]) if callable(value) else value
    return edit


def assert_open_refuses(root, n: int, match: str) -> None:
    """Opening the region at ``root`` raises a CatalogError matching ``match`` that names
    catalog version ``n``."""
    from gtsamples.region import CatalogError, open_region

    with pytest.raises(CatalogError, match=match) as ei:
        open_region(root, REGION_ID)
    assert f"v{n:020d}.json" in str(ei.value)


def catalog_corruptions_refuse_or_read(data: bytes, region_id: int, number: int, seed: int, flips: int) -> None:
    """Truncations and changed bytes of catalog version ``data``: each a CatalogError
    (naming the version) or a document whose records can be made, never another
    exception; all truncations but (at most) one are refused."""
    from gtsamples.region import CatalogError, catalog

    rng = np.random.default_rng(seed)
    cuts = sorted({int(x) for x in rng.integers(0, len(data), 60)} | {0, 1, len(data) - 2})
    bad = [data[:k] for k in cuts]
    for k in rng.integers(0, len(data), flips):
        b = bytearray(data)
        b[k] = int(rng.integers(0, 256))
        bad.append(bytes(b))
    refused = 0
    for b in bad:
        try:
            doc = catalog.parse_version(b, "v", region_id, number)
        except CatalogError as e:
            assert str(e).startswith("v: ")
            refused += 1
            continue
        catalog.copy_doc(doc)  # whatever is accepted makes its records
    assert refused >= len(cuts) - 1


def corrupt_artifact(root: str, entry: dict, how: str) -> None:
    """Damage an artifact on disk: 'chunk' (first payload byte of part 0), 'truncate'
    (part 0 loses its trailer), 'manifest' (manifest version 1 -> 2: unsupported),
    'missing' (manifest deleted)."""
    prefix = f"{entry['region_id']}/samples/{entry['file_id']}/{entry['generation']}/"
    part0 = os.path.join(root, prefix, "part-0.samples")
    manifest = os.path.join(root, prefix, "manifest.json")
    if how == "chunk":
        flip_byte(part0, 16)
    elif how == "truncate":
        size = os.path.getsize(part0)
        with open(part0, "r+b") as f:
            f.truncate(size - 5)
    elif how == "manifest":
        data = open(manifest, "rb").read()
        assert b'"version": 1' in data
        open(manifest, "wb").write(data.replace(b'"version": 1', b'"version": 2', 1))
    elif how == "missing":
        os.unlink(manifest)
    else:  # pragma: no cover
        raise ValueError(how)


@pytest.fixture(autouse=True)
def _fresh_cache():
    """Every test starts with an empty process-wide page cache."""
    gcache.default_cache().clear()
    yield
    gcache.default_cache().clear()
