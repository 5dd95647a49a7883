import importlib
import os
import pathlib
import pkgutil

import numpy as np
import pyarrow as pa
import pytest

DATA = pathlib.Path(__file__).parent / "data"
SHARED = pathlib.Path(os.environ.get("GTSAMPLES_SHARED", pathlib.Path(__file__).resolve().parents[2] / "shared"))


def kernels_as_python(monkeypatch, *modules) -> set[str]:
    """Swap every numba dispatcher bound in ``modules`` -- and in every submodule of a package
    among them, where callers look their callees up -- for its ``py_func``: the kernels then run
    as Python (same source, interpreted).  Returns the swapped names."""
    import numba

    swapped = set()
    for top in modules:
        subs = pkgutil.walk_packages(getattr(top, "__path__", []), top.__name__ + ".")
        for mod in [top, *(importlib.import_module(s.name) for s in subs)]:
            for name, obj in list(vars(mod).items()):
                if isinstance(obj, numba.core.registry.CPUDispatcher):
                    monkeypatch.setattr(mod, name, obj.py_func)
                    swapped.add(name)
    return swapped


def float_bits(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(validity, uint64 bits of valid values) of a float64 array."""
    arr = arr.combine_chunks() if isinstance(arr, pa.ChunkedArray) else arr
    valid = np.asarray(arr.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    vals = np.asarray(arr.fill_null(0.0).to_numpy(zero_copy_only=False), dtype=np.float64).view(np.uint64)
    return valid, np.where(valid, vals, 0)


def assert_tables_equal(got: pa.Table, want: pa.Table) -> None:
    """Schema equal; fixed columns equal; floats equal bit for bit with equal validity."""
    assert got.schema.names == want.schema.names, (got.schema, want.schema)
    for f_got, f_want in zip(got.schema, want.schema):
        assert f_got.type == f_want.type, (f_got, f_want)
    assert got.num_rows == want.num_rows, (got.num_rows, want.num_rows)
    for name in want.schema.names:
        g, w = got.column(name), want.column(name)
        if pa.types.is_floating(w.type):
            gv, gb = float_bits(g)
            wv, wb = float_bits(w)
            np.testing.assert_array_equal(gv, wv, err_msg=f"validity of {name}")
            np.testing.assert_array_equal(gb, wb, err_msg=f"bits of {name}")
        else:
            assert g.null_count == 0
            assert g.combine_chunks().equals(w.combine_chunks()), name


@pytest.fixture
def shared_dir():
    if not SHARED.is_dir():
        pytest.skip("../shared is absent (a user's fresh clone)")
    return SHARED


@pytest.fixture
def other_user():
    """The command prefix that runs a process as another user, for tests of a read-only
    install: ``[]`` when not root (the files are read-only for us already), else
    ``setpriv`` to uid/gid 65534 (root writes through any mode).  That user must reach
    this interpreter's environment: a folder above ``sys.prefix`` that others cannot
    enter (a checkout in ``mktemp -d``'s private folder) is opened for traversal only
    (``o+x``, no listing) while the test runs, and restored after."""
    import shutil
    import stat
    import sys

    if os.geteuid() != 0:
        yield []
        return
    if shutil.which("setpriv") is None:
        pytest.skip("running as root without setpriv: cannot make a read-only install")
    closed = []
    p = pathlib.Path(sys.prefix).resolve()
    for d in [p, *p.parents]:
        mode = d.stat().st_mode
        if not mode & stat.S_IXOTH:
            closed.append((d, stat.S_IMODE(mode)))
    try:
        for d, mode in closed:
            d.chmod(mode | stat.S_IXOTH)
        yield ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    finally:
        for d, mode in closed:
            d.chmod(mode)
