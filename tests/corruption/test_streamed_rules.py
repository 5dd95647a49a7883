"""Every corruption case of ``test_rules`` read as a stream of one-block batches.

``Artifact.iter_batches(max_bytes=1)`` cuts a read at every block, so a rule
checked across blocks (sequence order) is checked across batches too.  A case
that breaks a rule raises exactly the error (class, message, flags) that
``read`` raises, in the batch holding the bad chunk, and the batches before it
are the rows of the valid artifact; a boundary case streams to ``read``'s rows.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

import gtsamples as gs

from ..conftest import assert_tables_equal
from .test_rules import CASES, build, opener, written  # noqa: F401  (written: the fixture)

STREAMED = [pytest.param(c, id=c.id) for c in CASES if c.stage in ("meta", "decode")]


def _stream(art, kw):
    """(batches, error) of ``art.iter_batches(max_bytes=1, **kw)``."""
    got = []
    try:
        for b in art.iter_batches(max_bytes=1, **kw):
            got.append(b)
    except gs.SamplesError as e:
        return got, e
    return got, None


def _read(art, kw):
    try:
        return art.read(**kw), None
    except gs.SamplesError as e:
        return None, e


@pytest.mark.parametrize("case", STREAMED)
def test_streamed_rule(case, written, tmp_path):  # noqa: F811
    table, root, entry, gen_dir = build(case, written, tmp_path)
    open_fn = opener(root, entry, gen_dir, case.gen_dir)
    want, want_err = _read(open_fn(), case.read_kw)
    got, err = _stream(open_fn(), case.read_kw)
    if want_err is None:
        assert err is None, f"{case.id}: the stream raised {type(err).__name__}: {err}; read did not"
        assert_tables_equal(pa.Table.from_batches(got, schema=want.schema), want)
        return
    assert err is not None, f"{case.id}: read raised {type(want_err).__name__}: {want_err}; the stream did not"
    assert (type(err), str(err)) == (type(want_err), str(want_err))
    assert getattr(err, "flags", None) == getattr(want_err, "flags", None)
    if got and not case.read_kw:  # the batches before the error are the valid artifact's rows
        prefix = pa.Table.from_batches(got)
        assert_tables_equal(prefix, table.slice(0, prefix.num_rows))
