"""What a region read's executors need from the region, handed down to them.

:class:`ReadContext` is built by :class:`~gtsamples.region.Region` for one read
(:mod:`gtsamples.region.execute`, :mod:`gtsamples.region.stream`): the store,
the region's schema and page cache, and how a planned source's artifact is
opened and checked.  The executors import nothing from ``region.region`` and
return their statistics; the region records them.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

from ..errors import warn_skipped

__all__ = ["LOCAL_WORKERS", "REMOTE_WORKERS", "ReadContext", "skip_note", "warn_skipped_artifact"]

#: Threads that open and navigate a region's artifacts and scan its SSTs (``max_workers``'s
#: default).  Locally one: navigation is mostly interpreter work under the GIL (and
#: python-zstandard keeps the GIL while it decompresses a page), and a second thread
#: cost more CPU in GIL hand-offs than it overlapped (2-core VM: cold query 48 -> 69 ms).
#: Remote reads wait on the network, so they overlap.
LOCAL_WORKERS = 1
REMOTE_WORKERS = 8


@dataclasses.dataclass(frozen=True)
class ReadContext:
    """One region read's view of its region.

    ``usable_artifact(source, need, stats, opened=None)``: the opened artifact serving a
    planned source, checked against its SST and the columns ``need`` (raises the reason
    it cannot serve); ``opened``: the one ``cached_artifacts(sources)`` found for it,
    which looks up the covered sources' artifacts in the page cache at once (None for
    those not there).  ``warm_index(need)``: the version's
    :class:`~gtsamples.plan.warm.WarmIndex` for the columns ``need`` in this read's page
    cache (None: navigate every time)."""

    store: object
    schema: object  # RegionSchema (None: the region has no SST yet)
    cache: object  # PageCache
    region_id: int
    usable_artifact: Callable
    cached_artifacts: Callable
    warm_index: Callable | None = None

    def default_workers(self) -> int:
        """``max_workers``' default: :data:`LOCAL_WORKERS` locally, else :data:`REMOTE_WORKERS`."""
        return LOCAL_WORKERS if self.store.is_local else REMOTE_WORKERS


def skip_note(rec: dict, entry: dict, e: BaseException) -> str:
    """The warning for an artifact skipped (its SST scanned instead)."""
    return (f"artifact {entry.get('file_id')}/{entry.get('generation')} covering SST "
            f"{rec['file_id']} skipped ({type(e).__name__}: {e}); scanning the SST instead")


def warn_skipped_artifact(rec: dict, entry: dict, e: BaseException, stacklevel: int) -> None:
    """Warn (:class:`~gtsamples.ArtifactSkippedWarning`) that an artifact was skipped;
    ``stacklevel`` as ``warnings.warn`` takes it where this function is called."""
    warn_skipped(skip_note(rec, entry, e), stacklevel + 1)
