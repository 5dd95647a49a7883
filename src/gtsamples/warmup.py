"""`gtsamples warmup`: compile the kernels that reads and writes use, into the package's cache.

Run once at install time (the Docker images and ``make setup`` do): it writes a small
synthetic artifact and reads it back the ways the library reads (a full read, a series and
time query, a column subset, streamed batches, per-table stats, one part, a deep
validation; a region's series, table and SST reads), once as a small read runs and once
with the decoder's parallel paths forced (small reads take the serial kernels, large ones
the parallel ones).  Every kernel
compiled on the way is saved by :mod:`gtsamples.jit`: in the package's cache when the
package is writable (later processes, and a read-only copy of the install, load it from
there), else in the user's cache.  A second run compiles nothing.  ``--portable`` (the
Docker images) compiles for the portable targets instead of this CPU.
"""

from __future__ import annotations

import shutil
import tempfile
import time
import uuid

from . import jit
from .decode.cpu import parallel as _parallel

#: the decoder's size thresholds above which it takes its parallel kernels (forced to 0
#: for the second pass); names that a version of the decoder lacks are skipped
_PACKAGE = __name__.rpartition(".")[0]
_THRESHOLDS = ("PARALLEL_ZSTD_MIN_BYTES", "PARALLEL_MIN_ITEMS", "PARALLEL_MIN_VALUES", "PARALLEL_HASH_MIN_BYTES")


def _reads(art, table) -> None:
    first = (int(table["__table_id"][0].as_py()), int(table["__tsid"][0].as_py()))
    ts = table["ts"].cast("int64")
    lo, hi = int(ts[0].as_py()), int(ts[len(ts) // 2].as_py())
    art.read()
    art.read(series=[first], start=lo, end=hi, columns=["__tsid", "ts", "cpu_usage"])
    art.read_with_stats(tables=[first[0]])
    art.read(parts=[0])
    for _ in art.iter_batches(max_bytes=1 << 16):
        pass
    art.validate()
    art.inspect()


def _region_reads(root: str, table) -> None:
    """A region of two SSTs whose artifacts have internal roots (small pages): a series
    read navigated and then from the version's warm index, a table read (many leaves),
    and an SST read without its artifact."""
    from .region import create_region

    r = create_region(root, 4398046511104)
    half = table.num_rows // 2
    r.replace_ssts(add=[table.slice(0, half), table.slice(half)])
    r.build(verify=None, max_page_bytes=1024)
    first = (int(table["__table_id"][0].as_py()), int(table["__tsid"][0].as_py()))
    for _ in range(2):
        r.read(series=[first], columns=["__tsid", "ts", "cpu_usage"])
    r.read(tables=[first[0]])
    r.read(series=[first], use_artifacts=False)


def warmup(n_series: int = 24, rows_per_series: int = 600) -> list[tuple[str, str]]:
    """Compile what reads and writes need; returns :func:`gtsamples.jit.compiled` (the
    kernels this process compiled: none when the caches were already warm)."""
    import gtsamples as gs

    from .demo import FIELDS, synthetic_metrics

    tmp = tempfile.mkdtemp(prefix="gtsamples-warmup-")
    try:
        table = synthetic_metrics(n_series, rows_per_series)
        arts = [  # one level of metadata, then small blocks and pages: two levels, internal pages
            gs.open_artifact(tmp, entry=gs.write_artifact(
                table, tmp, region_id=4398046511104, source_file_id=str(uuid.uuid4()), timestamp_column_id=0,
                field_column_ids=list(range(1, len(FIELDS) + 1)), **knobs))
            for knobs in ({}, {"row_limit": 100, "max_page_bytes": 1024, "max_leaves_per_root": 2})
        ]
        for art in arts:
            _reads(art, table)
        _region_reads(tmp + "/region", table)
        saved = {name: getattr(_parallel, name) for name in _THRESHOLDS if hasattr(_parallel, name)}
        try:
            for name in saved:
                setattr(_parallel, name, 0)
            for art in arts:
                _reads(art, table)
        finally:
            for name, value in saved.items():
                setattr(_parallel, name, value)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return jit.compiled()


def warm_portable(out=print) -> int:
    """:func:`warmup` once per portable target this CPU runs (``jit.PORTABLE_TARGETS``),
    each in a process of its own (numba's target is fixed per process): entries that
    serve any CPU of the architecture (an image built on one machine, run on others)."""
    import os
    import subprocess
    import sys

    for name, features in jit.host_portable_targets():
        env = dict(os.environ, NUMBA_CPU_NAME=name, NUMBA_CPU_FEATURES=features)
        out(f"target {name}:")
        r = subprocess.run([sys.executable, "-m", _PACKAGE, "warmup"], env=env)
        if r.returncode:
            return r.returncode
    return 0


def run(portable: bool = False, out=print) -> int:
    if portable:
        return warm_portable(out)
    t0 = time.perf_counter()
    done = warmup()
    where = jit.PACKAGE_CACHE if jit.writable(jit.PACKAGE_CACHE) else jit.user_cache_dir()
    out(f"gtsamples warmup: {len(done)} kernel specialisation(s) compiled in {time.perf_counter() - t0:.1f} s, "
        f"{len(jit.kernels())} kernels; cache: {where}")
    return 0
