"""The plan layer: what a query selects, where it lies, and the batch that reads it.

* :mod:`.query`: :class:`Query`, a read's arguments as one frozen value, checked once;
* :mod:`.selection`: :class:`Selection` (the normalised query and its one overlap
  predicate) and :func:`to_unit` (time bounds in the manifest unit);
* :mod:`.navigator`: the batch-first navigator (parts -> pages -> blocks) of one
  or many artifacts, with the page cache;
* :mod:`.warm`: :class:`~.warm.WarmIndex`, a region query whose pages are all cached
  navigated in one numba pass over a catalog version's flat tables;
* :mod:`.split`: a streamed read's leaves cut into batches of about ``max_bytes``;
* :mod:`.leaves`: :class:`Projection`, :class:`SelectedLeaf` and the
  :class:`~gtsamples.batch.ChunkBatch` built and fetched from navigated leaves.
"""

from .leaves import PartNames, Projection, SelectedLeaf, build_batch, fetch_batch
from .query import Query, part_indices
from .selection import FEW_PARTS, IDENTITY, Selection, selects_range, to_unit

__all__ = ["FEW_PARTS", "IDENTITY", "PartNames", "Projection", "Query", "SelectedLeaf", "Selection", "build_batch",
           "fetch_batch", "part_indices", "selects_range", "to_unit"]
