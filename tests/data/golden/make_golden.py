"""Generate the golden artifacts in this folder (run once; the bytes are then frozen).

    python tests/data/golden/make_golden.py [OUT_DIR]

Each case folder holds

- ``store/<region_id>/samples/<source_file_id>/<generation>/`` — the artifact our
  writer produced (``manifest.json``, ``part-N.samples``);
- ``entry.json`` — its catalog entry without ``created_at``;
- ``expected.arrow`` — the input table, which is also the expected full read
  (Arrow IPC file, exact logical schema);
- ``case.json`` — the writer's keyword arguments and a SHA-256 of every object.

``tests/test_golden.py`` never regenerates anything: it reads the committed
artifacts and compares a fresh write of ``expected.arrow`` with the committed
bytes.  A change to those bytes is a format or writer change; it needs a new
case folder (and a reason), never an overwrite.  This script therefore refuses
to write into an existing case folder.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import struct
import sys

import pyarrow as pa
import pyarrow.ipc as ipc

HERE = os.path.dirname(os.path.abspath(__file__))
REGION = 4398046511111
FILE_ID = "601de000-0000-4000-8000-0000000000f1"


def _table(rows, unit="ms", names=("v",)):
    cols = list(zip(*rows))
    t = {
        "__table_id": pa.array(cols[0], pa.uint32()),
        "__tsid": pa.array(cols[1], pa.uint64()),
        "ts": pa.array(cols[2], pa.timestamp(unit)),
        "__sequence": pa.array(cols[3], pa.uint64()),
        "__op_type": pa.array(cols[4], pa.uint8()),
    }
    for k, name in enumerate(names):
        t[name] = pa.array(cols[5 + k], pa.float64())
    return pa.table(t)


def _f(bits: int) -> float:
    return struct.unpack("<d", struct.pack("<Q", bits))[0]


def depth1():
    """One part, one leaf, one series; constant step, constant sequence, all puts."""
    rows = [(1, 42, 1_600_000_000_000 + 15_000 * i, 9, 1, 20.0 + (i % 3) * 0.5) for i in range(12)]
    return _table(rows), dict(timestamp_column_id=0, field_column_ids=[1])


def depth2():
    """One part at depth 2 (small leaves): two series, row limit 8, microseconds."""
    rows = []
    for tsid, n in ((7, 30), (8, 9)):
        for i in range(n):
            ts = 1_000_000 * i + (i * i % 5) * 37
            rows.append((3, tsid, ts, 1000 - i, 1, math.sin(i / 3) * 100 if i % 7 else None))
    return _table(rows, unit="us"), dict(timestamp_column_id=5, field_column_ids=[6], row_limit=8,
                                         max_page_bytes=12 + 220 * 2)


def multipart():
    """Three parts (two leaves per root), all seven encodings, raw and Zstd chunks,
    validity kinds 0 and 1, an all-null field, delete markers, duplicate timestamps,
    NaN payloads, -0.0, infinities, subnormals, equal TSIDs in two tables."""
    rows = []
    specials = [_f(0x7FF8000000000001), -0.0, math.inf, -math.inf, _f(1), _f(0xFFF0000000000123), 0.0]
    # (1, 5): 200 rows: compressible fields (Zstd), raw operation types with deletes
    for i in range(200):
        ts = 10_000 + 1000 * i if i < 100 else 110_000 + 1000 * (i - 100) + (i % 3) * 7
        rows.append((1, 5, ts, 5000 - i, 0 if i % 17 == 0 else 1,
                     [1.25, 2.5, 1.25, 3.75][i % 4], None if i % 3 else float(i), None))
    # (1, 6): duplicate timestamps with conflicting values, sequence descending on ties
    for i in range(12):
        rows.append((1, 6, 50 + i // 3, 900 - i, 1, specials[i % 7], float(-i), None))
    # (2, 5): same TSID in another table; all deletes; negative timestamps
    for i in range(20):
        rows.append((2, 5, -20_000 + 500 * i, 77, 0, float(i) * 1e-310, None, None))
    # (2, 9): one row
    rows.append((2, 9, 0, 1, 1, 1.0, 2.0, None))
    return _table(rows, unit="ns", names=("a", "b", "c")), dict(
        timestamp_column_id=10, field_column_ids=[11, 12, 13], row_limit=32,
        max_page_bytes=12 + 264 * 2, max_leaves_per_root=2)


CASES = {
    "g1_depth1": (depth1, "601de000-0000-4000-8000-0000000000a1"),
    "g2_depth2": (depth2, "601de000-0000-4000-8000-0000000000a2"),
    "g3_multipart": (multipart, "601de000-0000-4000-8000-0000000000a3"),
}


def write_case(name: str, out_dir: str) -> None:
    import gtsamples as gs

    make, generation = CASES[name]
    table, kw = make()
    case_dir = os.path.join(out_dir, name)
    if os.path.exists(case_dir):
        raise SystemExit(f"{case_dir} exists: golden bytes are frozen; add a new case instead")
    store = os.path.join(case_dir, "store")
    os.makedirs(store)
    entry = gs.write_artifact(table, store, region_id=REGION, source_file_id=FILE_ID, generation=generation, **kw)
    d = entry.to_dict()
    d.pop("created_at", None)
    with open(os.path.join(case_dir, "entry.json"), "w") as f:
        json.dump(d, f, indent=1)
        f.write("\n")
    with pa.OSFile(os.path.join(case_dir, "expected.arrow"), "wb") as f:
        with ipc.new_file(f, table.schema) as w:
            w.write_table(table)
    sha = {}
    for o in d["objects"]:
        with open(os.path.join(store, o["path"]), "rb") as f:
            sha[o["path"].rsplit("/", 1)[1]] = hashlib.sha256(f.read()).hexdigest()
    case = {"description": make.__doc__.strip(), "region_id": REGION, "source_file_id": FILE_ID,
            "generation": generation, "writer_kwargs": kw, "sha256": sha}
    with open(os.path.join(case_dir, "case.json"), "w") as f:
        json.dump(case, f, indent=1)
        f.write("\n")
    print(f"{case_dir}: {len(d['objects'])} objects, {d['file_size']} bytes, {table.num_rows} rows")


def main(argv) -> None:
    out_dir = argv[1] if len(argv) > 1 else HERE
    for name in CASES:
        write_case(name, out_dir)


if __name__ == "__main__":
    sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "src"))
    main(sys.argv)
