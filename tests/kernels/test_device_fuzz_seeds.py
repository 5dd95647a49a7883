"""The fuzz seed corpus (tests/fuzz/corpus.py) read through the kernel
emulator: every seed artifact reads on the emulated device exactly as on the
CPU, in full and with the selection its parameters name (the fuzz
selection target's ``selection_of``).  A quick subset here; every seed with
``GTS_EMU_FULL=1`` (as ``make kernels-sanitize`` runs it, under ASan)."""

from __future__ import annotations

import functools
import os

import pytest

from tests.fuzz import corpus, targets
from tests.gpu import artifact_cases as A
from tests.kernels.test_artifact_device import emu_read  # noqa: F401  (fixture)

FULL = os.environ.get("GTS_EMU_FULL") == "1"


@functools.lru_cache(maxsize=1)
def device_seeds() -> list[tuple[str, bytes]]:
    """One seed per artifact layout: the corpus's flag variants open the same
    bytes differently, which the device never sees."""
    seeds = [(n, d) for n, d in corpus.build_seeds(quick=not FULL) if n.endswith(f"_f{targets.FLAG_FIX_CHECKSUMS}")]
    return seeds if FULL else seeds[::2]


def test_seed_corpus_reads_on_the_device_as_on_the_cpu(emu_read):  # noqa: F811
    seeds = device_seeds()
    assert len(seeds) >= (40 if FULL else 6), len(seeds)
    ws = targets.workspace()
    for name, data in seeds:
        prep = targets.Prepared(data)
        ws.write(prep)
        art = ws.open(prep)
        A.assert_same_read(art, emu_read, {}, f"{name} (full read)")
        kw = targets.selection_of(prep.params, art.manifest)
        A.assert_same_read(ws.open(prep), emu_read, kw, f"{name} {kw}")
    assert len(emu_read.devices) >= len(seeds)  # the device decoded them
