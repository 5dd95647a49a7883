"""Data races in the kernels, which only the ThreadSanitizer build of the
emulator sees (``make kernels-sanitize`` runs this file under it; other
builds skip it): status words that a launch ORs flags into while other
threads of the same launch read them must be read atomically."""

from __future__ import annotations

import pytest

from tests.gpu import scenarios as S

emu = pytest.importorskip("tests.kernels.emu_device")
pytestmark = pytest.mark.skipif(emu.build_kind() != "thread" or emu.sanitizer_log_reports() is None,
                                reason="needs the ThreadSanitizer build with TSAN_OPTIONS=log_path=...")  # fmt: skip

FLAGGED = {"ts1_bounds", "seq3_bad_length", "op6_invalid", "f_kind"}


@pytest.mark.parametrize("name,mutate", [c for c in S.corruption_cases() if c[0] in FLAGGED],
                         ids=sorted(FLAGGED, key=[c[0] for c in S.corruption_cases()].index))  # fmt: skip
def test_chunk_flagged_by_its_own_block_is_race_free(name, mutate):
    """Thread 0 ORs the chunk's flags into its status word while the block's
    other threads may still be reading it (already_failed)."""
    before = emu.sanitizer_log_reports()
    S.check_same_error(S.corrupted_batch(name, mutate), emu.EmuDevice())
    assert emu.sanitizer_log_reports() == before


@pytest.mark.parametrize("name,make,must", [c for c in S.sequence_order_cases() if c[0] in {"across_blocks", "both"}],
                         ids=["across_blocks", "both"])  # fmt: skip
def test_sequence_order_flags_of_a_neighbour_are_race_free(name, make, must):
    """A block ORs SEQUENCE_ORDER into its status word while the next block
    reads it as its predecessor's (check_sequence_order)."""
    before = emu.sanitizer_log_reports()
    S.check_same_error(make(), emu.EmuDevice())
    assert emu.sanitizer_log_reports() == before
