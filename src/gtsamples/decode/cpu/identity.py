"""``__table_id`` and ``__tsid``, broadcast from the block table.

Spec ("Column payloads and row semantics"): each block contains exactly one
``(table_id, tsid)``; identity is stored once in its descriptor, never as a
chunk.  Every output row of a block gets the block's identity.  Mirrors
``kernels/gts_identity.cuh``.
"""

from __future__ import annotations

import numba
import numpy as np

from ...buffers import pool_array
from .parallel import run_kernel, stage_threads
from ...jit import njit


@njit(nogil=True, inline="always")
def _fill_block(k, blocks, table_id, tsid):
    """``__table_id``/``__tsid`` of block ``k``'s output rows (either output may be empty)."""
    b = blocks[k]
    o = np.int64(b["out_row"])
    n = np.int64(b["rows"])
    if table_id.shape[0]:
        t = b["table_id"]
        for r in range(o, o + n):
            table_id[r] = t
    if tsid.shape[0]:
        s = b["tsid"]
        for r in range(o, o + n):
            tsid[r] = s


@njit(nogil=True)
def _rows_fit(blocks, n_rows):
    """Every block's rows lie within the batch's ``n_rows`` output rows."""
    for k in range(blocks.shape[0]):
        if np.uint64(blocks[k]["out_row"]) + np.uint64(blocks[k]["rows"]) > np.uint64(n_rows):
            return False
    return True


@njit(parallel=True, nogil=True)
def _fill_identity(blocks, table_id, tsid):
    """``__table_id``/``__tsid`` of every output row from its block, on numba's threads."""
    for k in numba.prange(blocks.shape[0]):
        _fill_block(k, blocks, table_id, tsid)


@njit(nogil=True)
def _fill_identity_serial(blocks, table_id, tsid):
    """:func:`_fill_identity` on the calling thread (:func:`.parallel.run_kernel`)."""
    for k in range(blocks.shape[0]):
        _fill_block(k, blocks, table_id, tsid)


def identity_columns(blocks: np.ndarray, n_rows: int, want_table_id: bool, want_tsid: bool):
    """``(__table_id, __tsid)`` of every output row from the batch's block table, in
    pool memory (:func:`pool_array`); None for a column not wanted."""
    blocks = np.ascontiguousarray(blocks)
    if not _rows_fit(blocks, n_rows):
        raise ValueError(f"block rows exceed the batch's {n_rows} output rows")  # a planner bug, not bad input
    tid = pool_array(n_rows if want_table_id else 0, np.uint32)
    tsid = pool_array(n_rows if want_tsid else 0, np.uint64)
    if want_table_id or want_tsid:
        run_kernel(stage_threads(None, values=n_rows), _fill_identity, _fill_identity_serial, blocks, tid, tsid)
    return (tid if want_table_id else None), (tsid if want_tsid else None)
