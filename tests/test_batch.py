"""The ChunkBatch rules across blocks (gtsamples.batch): which blocks continue their
series, and the sequence order rule at those boundaries, against numpy oracles."""

from __future__ import annotations

import numpy as np
import pytest

from gtsamples.batch import (
    BLOCK_DTYPE,
    CHUNK_DTYPE,
    SLOT_SEQUENCE,
    SLOT_TIMESTAMP,
    ChunkBatch,
    block_chunks,
    flag_sequence_boundaries,
    sequence_continuations,
)
from gtsamples.errors import DecodeErrorFlag

ORDER = int(DecodeErrorFlag.SEQUENCE_ORDER)


def _oracle_block_chunks(batch, slot):
    out = np.full(len(batch.blocks), -1, np.int64)
    idx = np.flatnonzero(batch.chunks["slot"] == slot)
    out[batch.chunks["block"][idx].astype(np.int64)] = idx
    return out


def _oracle_continuations(batch):
    """The rule as whole-array numpy: same identity, ordinal + 1 (no wrap), same
    artifact, and all four chunks present."""
    b = batch.blocks
    seq_of, ts_of = _oracle_block_chunks(batch, SLOT_SEQUENCE), _oracle_block_chunks(batch, SLOT_TIMESTAMP)
    tid, tsid, ordn = b["table_id"], b["tsid"], b["ordinal"]
    cont = ((tid[1:] == tid[:-1]) & (tsid[1:] == tsid[:-1]) & (ordn[:-1] != np.uint64(2**64 - 1))
            & (ordn[1:] == ordn[:-1] + np.uint64(1)))
    if batch.part_artifact is not None:
        owner = np.asarray(batch.part_artifact, np.int64)[b["part"].astype(np.int64)]
        cont &= owner[1:] == owner[:-1]
    k = np.flatnonzero(cont) + 1
    k = k[(seq_of[k] >= 0) & (seq_of[k - 1] >= 0) & (ts_of[k] >= 0) & (ts_of[k - 1] >= 0)]
    return k, seq_of[k], seq_of[k - 1], ts_of[k], ts_of[k - 1]


def _random_batch(rng, n_blocks: int, merged: bool) -> ChunkBatch:
    """Blocks of a few series with runs of consecutive ordinals (and gaps, wraps,
    other artifacts' parts); per block a timestamp and a sequence chunk, some missing."""
    b = np.zeros(n_blocks, BLOCK_DTYPE)
    b["table_id"] = rng.integers(1, 3, n_blocks)
    b["tsid"] = rng.integers(0, 2, n_blocks)
    ords = np.cumsum(rng.integers(0, 3, n_blocks)).astype(np.uint64)
    ords[rng.random(n_blocks) < 0.05] = np.uint64(2**64 - 1)
    b["ordinal"] = ords
    b["part"] = np.sort(rng.integers(0, 4, n_blocks))
    b["rows"] = rng.integers(1, 4, n_blocks)
    b["out_row"] = np.concatenate([[0], np.cumsum(b["rows"][:-1])])
    chunks = []
    for k in range(n_blocks):
        for slot in (SLOT_TIMESTAMP, SLOT_SEQUENCE):
            if rng.random() < 0.1:
                continue  # (a chunk left out)
            c = np.zeros(1, CHUNK_DTYPE)
            c["block"], c["slot"], c["rows"], c["out_row"] = k, slot, b["rows"][k], b["out_row"][k]
            chunks.append(c)
    ch = np.concatenate(chunks) if chunks else np.zeros(0, CHUNK_DTYPE)
    n_rows = int(b["rows"].sum())
    batch = ChunkBatch(ch, b, np.zeros(0, np.uint8), n_rows, ())
    if merged:
        batch.part_artifact = rng.integers(0, 2, 4)
    return batch


@pytest.mark.parametrize("merged", [False, True])
def test_continuations_and_boundary_flags_match_numpy(merged):
    rng = np.random.default_rng(7 + merged)
    for trial in range(200):
        batch = _random_batch(rng, int(rng.integers(0, 40)), merged)
        for slot in (SLOT_TIMESTAMP, SLOT_SEQUENCE):
            assert block_chunks(batch, slot).tolist() == _oracle_block_chunks(batch, slot).tolist()
        got, want = sequence_continuations(batch), _oracle_continuations(batch)
        assert [g.tolist() for g in got] == [w.tolist() for w in want], trial
        n = batch.n_rows
        ts = rng.integers(0, 3, n).astype(np.int64)
        seq = rng.integers(0, 5, n).astype(np.uint64)
        flags = np.where(rng.random(len(batch.chunks)) < 0.1, np.uint32(rng.integers(1, 1 << 12)), 0).astype(np.uint32)
        mine = flags.copy()
        flag_sequence_boundaries(batch, mine, ts, seq)
        ref = flags.copy()
        k, sc, psc, tc, ptc = want
        if k.size:
            other = np.uint32(~ORDER & 0xFFFFFFFF)
            clean = ((flags[sc] | flags[psc] | flags[tc] | flags[ptc]) & other) == 0
            r = batch.blocks["out_row"][k].astype(np.int64)
            bad = clean & (ts[r] == ts[r - 1]) & (seq[r] > seq[r - 1])
            ref[sc[bad]] |= np.uint32(ORDER)
        assert mine.tolist() == ref.tolist(), trial


def test_a_chunk_naming_no_block_is_left_out():
    """A chunk whose block is past the block table (a planner bug) is not written past
    the per-block table: it has no block to belong to."""
    batch = _random_batch(np.random.default_rng(1), 5, False)
    batch.chunks["block"][0] = 1000
    out = block_chunks(batch, int(batch.chunks["slot"][0]))
    assert out.shape == (5,) and 0 not in out.tolist()
