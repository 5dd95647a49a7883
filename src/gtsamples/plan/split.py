"""Bounded-memory reads: navigated leaves cut into batches of whole blocks.

A streamed read navigates once (metadata only), then builds, fetches and
decodes one :class:`~gtsamples.batch.ChunkBatch` per group of consecutive
selected blocks, each group holding at most about ``max_bytes`` of decoded
output (estimated from the blocks' row counts and the projected columns; a
block larger than ``max_bytes`` is a group of its own).  Groups keep the
navigation's block order, so the batches concatenate to the whole read.
"""

from __future__ import annotations

import numpy as np

from ..argcheck import is_integer
from .leaves import SelectedLeaf
from ..jit import njit

__all__ = ["DEFAULT_MAX_BYTES", "check_max_bytes", "output_row_bytes", "split_leaves"]

#: ``max_bytes`` default of ``iter_batches``: decoded output per batch.
DEFAULT_MAX_BYTES = 64 << 20

# decoded bytes per row of each fixed column (fields: 8 + 1/8 validity, rounded up)
_FIXED_ROW_BYTES = {"__table_id": 4, "__tsid": 8, "__sequence": 8, "__op_type": 1}
_FIELD_ROW_BYTES = 9


#: The largest ``max_bytes``; a larger one is read as this, which is unbounded in practice.  The
#: batching kernels take an i64 (2**63 raised OverflowError), and a region's batch sizing adds
#: sizes: 2**62 leaves them headroom.
MAX_BYTES_CAP = 1 << 62


def check_max_bytes(max_bytes, name: str = "max_bytes") -> int:
    """``max_bytes`` as an int; ``ValueError`` (naming ``name``) unless it is a positive integer
    (:func:`~gtsamples.argcheck.is_integer`: not a bool, nor a ``numpy.timedelta64``).  Sizes past
    :data:`MAX_BYTES_CAP` are that cap: every batch is far smaller than either."""
    if not is_integer(max_bytes) or max_bytes <= 0:
        raise ValueError(f"{name} must be a positive integer (bytes of decoded output per batch), "
                         f"not {max_bytes!r}")
    return min(int(max_bytes), MAX_BYTES_CAP)


def output_row_bytes(names, ts_name: str) -> int:
    """Decoded bytes one output row of columns ``names`` takes (the timestamp
    always counts: it is decoded to trim and order the rows)."""
    n = 8  # timestamp
    for c in names:
        if c == ts_name:
            continue
        n += _FIXED_ROW_BYTES.get(c, _FIELD_ROW_BYTES)
    return n


@njit(nogil=True)
def _group_ids(sizes, max_bytes):  # pragma: no cover - numba
    """Greedy cut of consecutive sizes into groups of at most ``max_bytes`` (a
    size above it alone in its group): the group number of each."""
    n = sizes.shape[0]
    out = np.empty(n, np.int64)
    g = -1
    acc = 0
    for i in range(n):
        s = sizes[i]
        if g < 0 or acc + s > max_bytes:
            g += 1
            acc = 0
        acc += s
        out[i] = g
    return out


def split_leaves(leaves, row_bytes: int, max_bytes: int) -> list[list[SelectedLeaf]]:
    """The selected blocks of ``leaves`` (navigation order) cut into groups of
    whole consecutive blocks, each decoding to at most about ``max_bytes``
    (``row_bytes`` per row).  Each group is a list of :class:`SelectedLeaf`
    whose masks select only that group's blocks of the leaf."""
    leaves = [sl for sl in leaves if sl.mask.any()]
    if not leaves:
        return []
    sel = [np.flatnonzero(sl.mask) for sl in leaves]
    counts = np.array([s.size for s in sel], np.int64)
    rows = np.concatenate([sl.page.blocks["row_count"][s].astype(np.int64) for sl, s in zip(leaves, sel)])
    gid = _group_ids(rows * np.int64(row_bytes), np.int64(max_bytes))
    leaf_of = np.repeat(np.arange(len(leaves), dtype=np.int64), counts)
    block_of = np.concatenate(sel)
    bounds = np.flatnonzero(np.r_[True, (gid[1:] != gid[:-1]) | (leaf_of[1:] != leaf_of[:-1]), True])
    groups: list[list[SelectedLeaf]] = [[] for _ in range(int(gid[-1]) + 1)]
    for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist()):  # one run per (group, leaf)
        sl = leaves[int(leaf_of[a])]
        mask = np.zeros_like(sl.mask)
        mask[block_of[a:b]] = True
        groups[int(gid[a])].append(SelectedLeaf(sl.part, sl.leaf, sl.page, mask))
    return groups
