"""Opening, inspecting, reading and validating one artifact.

``open_artifact`` reads and validates the manifest (and the catalog entry when
given).  Parts are opened lazily: a read opens only the parts whose manifest
bounds match, checks each part's header and trailer before any traversal,
loads only the pages it needs (shared through the metadata cache), and hands
one ChunkBatch for the whole query to a backend.
"""

from __future__ import annotations

import dataclasses
from typing import Iterable

import numpy as np

from . import cache as _cache
from .argcheck import is_integer, is_items
from .backends import CPU, DEVICE_TABLE, Backend, get_backend
from .batch import ChunkBatch
from .errors import SamplesError
from .format import constants as C
from .format.manifest import (
    CatalogEntry,
    Manifest,
    check_entry,
    check_entry_objects,
    parse_catalog_entry,
    parse_manifest,
)
from .frames import arrow_schema, batch_reader
from .plan import Projection, Query, Selection, SelectedLeaf, build_batch, fetch_batch, part_indices
from .plan.navigator import Navigation
from .plan.split import DEFAULT_MAX_BYTES, check_max_bytes, output_row_bytes, split_leaves
from .storage import ReadStats, Store, root_arg


def columns_arg(columns):
    """A read's ``columns``, checked once: None (every column), one name, or an iterable of
    names made a list (a generator is read once), naming at least one column (as a
    region's reads require: a table of no columns has no rows to count).  ``TypeError``
    for anything else (bytes would be read as their byte values, an int is not iterable)."""
    if columns is None or isinstance(columns, str):
        return columns
    if not is_items(columns):
        raise TypeError(f"columns must be a column name or an iterable of names, not "
                        f"{type(columns).__name__} {columns!r}")
    columns = list(columns)
    if not columns:
        raise ValueError("columns must name at least one column")
    return columns


def stats_arg(stats) -> ReadStats:
    """A reader's ``stats``: a :class:`ReadStats` to add to, or None (a new one)."""
    if stats is None:
        return ReadStats()
    if not isinstance(stats, ReadStats):
        raise TypeError(f"stats must be a gtsamples.ReadStats or None, not {type(stats).__name__} {stats!r}")
    return stats


class Artifact:
    """An opened columnar-samples artifact.  Thread-safe for concurrent reads."""

    def __init__(self, store: Store, prefix: str, manifest: Manifest, entry: CatalogEntry | None,
                 part_sizes: list[int], cache: _cache.PageCache | None = None):
        self.store = store
        self.prefix = prefix
        self.manifest = manifest
        self.entry = entry
        self.part_sizes = part_sizes
        self._cache = cache
        self.last_stats = ReadStats()
        self.open_stats = ReadStats()
        self._keys: dict[int, str] = {}  # part index -> store key (memo)

    # -- naming ----------------------------------------------------------------------
    @property
    def location(self) -> str:
        return self.store.path(self.prefix.rstrip("/"))

    def __repr__(self) -> str:
        m = self.manifest
        return (f"<gtsamples.Artifact {self.location} parts={len(m.files)} rows={m.num_rows} "
                f"fields={len(m.fields)} unit={m.timestamp.unit}>")

    def part_key(self, i: int) -> str:
        """The store key of part ``i`` (0 <= i < the manifest's part count)."""
        key = self._keys.get(i) if type(i) is int else None  # (True and 1.0 hash as 1)
        if key is None:
            n = len(self.manifest.files)
            if not is_integer(i):
                raise TypeError(f"part index must be an integer, not {type(i).__name__} {i!r}")
            if not 0 <= i < n:  # (numpy would take -1 as the last part)
                raise IndexError(f"part {int(i)} does not exist: {self.location} has {n} part(s)")
            key = self._keys[int(i)] = self.prefix + self.manifest.files[int(i)].name
        return key

    @property
    def part_keys(self) -> list[str]:
        """Store keys of every part, in manifest order."""
        return [self.part_key(i) for i in range(len(self.manifest.files))]

    @property
    def cache(self) -> _cache.PageCache:
        return self._cache if self._cache is not None else _cache.default_cache()

    # -- public API ----------------------------------------------------------------------
    def navigate(self, selection: Selection, stats: ReadStats | None = None, *, parts=None) -> list[SelectedLeaf]:
        """Navigation only: the leaves a selection needs (loaded and checked, parts'
        headers and trailers first), with each leaf's selected blocks.  ``selection``
        is in this artifact's timestamp unit.  With :func:`gtsamples.plan.build_batch`
        and :func:`~gtsamples.plan.fetch_batch` this is :meth:`fetch_batch`; a region
        builds one batch from several artifacts' leaves.  ``parts``: as for :meth:`read`."""
        if not isinstance(selection, Selection):
            raise TypeError(f"selection must be a gtsamples.plan.Selection (Selection.build(series, tables, start, "
                            f"end, unit)), not {type(selection).__name__}")
        stats = stats_arg(stats)
        parts = part_indices(parts, len(self.manifest.files), self.location)
        return self._navigate(selection, stats, parts)[0]

    def _navigate(self, sel: Selection, stats: ReadStats, parts=None) -> tuple[list, Navigation]:
        """:class:`~gtsamples.plan.navigator.Navigation` of this artifact alone (a batch of
        one): its leaves (raising its error) and the navigation (its part states)."""
        nav = Navigation(sel)
        nav.add([self], [stats], None if parts is None else [list(parts)])
        res = nav.finish()[0]
        if isinstance(res, SamplesError):
            raise res
        return res, nav

    def query(self, columns=None, series=None, tables=None, start=None, end=None, parts=None) -> Query:
        """A read's arguments as a :class:`~gtsamples.plan.Query` over this artifact:
        the columns, selection (in its timestamp unit) and parts checked once."""
        return Query.build(columns_arg(columns), series, tables, start, end, parts, manifest=self.manifest,
                           location=self.location)

    # -- the read pipeline: Query -> plan (navigate) -> fetch -> decode -> assemble --------
    def plan(self, query: Query, stats: ReadStats) -> list[SelectedLeaf]:
        """The pipeline's plan step: the leaves ``query`` needs, navigated (metadata
        only: parts' headers and trailers, pages)."""
        return self._navigate(query.selection, stats, query.parts)[0]

    def build(self, query: Query, leaves, all_fields: bool = False) -> ChunkBatch:
        """The :class:`ChunkBatch` of navigated ``leaves`` (not fetched yet)."""
        return build_batch(leaves, self.manifest, query.selection, query.projection_for(self.manifest),
                           source=self.location, all_fields=all_fields)

    def read_batch(self, backend: Backend, query: Query, batch: ChunkBatch, stats: ReadStats, **decode_kw):
        """The pipeline's fetch, decode and assemble steps for one batch: ``backend``'s frame."""
        decoded = backend.fetch_decode(self.store, self.part_keys, batch, stats, **decode_kw)
        return backend.assemble(self.manifest, query.projection_for(self.manifest), batch, decoded)

    def run(self, query: Query, backend: Backend, stats: ReadStats, **decode_kw):
        """One whole read of ``query`` through the pipeline: ``backend``'s frame."""
        return self.read_batch(backend, query, self.build(query, self.plan(query, stats)), stats, **decode_kw)

    def stream(self, query: Query, backend: Backend, max_bytes: int, stats: ReadStats):
        """``query`` read through the pipeline as a stream of ``backend``'s batches
        (:meth:`iter_batches`): planned once, then built, fetched, decoded and
        assembled one group of about ``max_bytes`` of output at a time."""
        m = self.manifest
        projection = query.projection_for(m)
        leaves = self.plan(query, stats)
        groups = split_leaves(leaves, output_row_bytes(projection.names, m.timestamp.name), max_bytes)
        if not groups:  # one empty batch: the schema (and type) of the read's result
            groups = [[]]
        out = None
        emitted = False
        for k, group in enumerate(groups):
            batch = self.build(query, group)
            if k and batch.want_sequence:
                self._check_cut(groups[k - 1][-1], group[0], query)
            out = backend.stream_unit(self.read_batch(backend, query, batch, stats))
            self.last_stats = stats
            if len(out):  # batches whose rows all fall outside [start, end) are left out
                emitted = True
                yield out
                out = None  # the consumer's now: not held here while the next batch decodes
        if not emitted:
            yield out

    def fetch_batch(self, columns=None, series=None, tables=None, start=None, end=None,
                    stats: ReadStats | None = None, all_fields: bool = False, *,
                    parts=None) -> tuple[ChunkBatch, Projection]:
        """Plan and fetch: the ChunkBatch a read would decode (data included) and its
        projection.  ``parts``: as for :meth:`read`."""
        stats = stats_arg(stats)
        query = self.query(columns, series, tables, start, end, parts)
        batch = self.build(query, self.plan(query, stats), all_fields)
        fetch_batch(self.store, self.part_keys, batch, stats)
        return batch, query.projection_for(self.manifest)

    def read(self, columns: Iterable[str] | None = None, series=None, tables=None, start=None, end=None,
             device: str = "cpu", *, parts=None):
        """Rows of the selection, in file order: a pyarrow.Table ("cpu") or cudf.DataFrame ("gpu").

        ``parts``: an iterable of part indices (part IDs, manifest order), or one
        index: read only the selection's rows in those parts (None: every part).
        Each part is checked as in a whole read -- its first block against the
        previous part's last identity, which the manifest records -- so reading
        the parts of an artifact one by one (e.g. one Dask partition each) and
        concatenating gives the rows of one read.  A part index outside the
        manifest is a ``ValueError``."""
        table, stats = self.read_with_stats(columns, series, tables, start, end, device, parts=parts)
        return table

    def read_with_stats(self, columns=None, series=None, tables=None, start=None, end=None, device: str = "cpu",
                        *, parts=None):
        """Like :meth:`read`, also returning the :class:`ReadStats` of this read."""
        backend = get_backend(device)
        backend.require()  # before any I/O or CUDA work
        query = self.query(columns, series, tables, start, end, parts)
        stats = ReadStats()
        result = self.run(query, backend, stats)
        self.last_stats = stats
        return result, stats

    def iter_batches(self, columns: Iterable[str] | None = None, series=None, tables=None, start=None, end=None,
                     *, max_bytes: int = DEFAULT_MAX_BYTES, device: str = "cpu", parts=None,
                     stats: ReadStats | None = None):
        """The rows of :meth:`read` as a stream of batches in bounded memory.

        Navigates once (metadata only), then builds, fetches (coalesced ranged
        reads) and decodes one group of consecutive selected blocks at a time,
        each decoding to at most about ``max_bytes`` of output (a block is the
        unit: one larger than ``max_bytes`` is a batch of its own).  Batches
        come in the order of :meth:`read` and concatenate to exactly its result
        (same schema, same rows); batches whose rows all fall outside
        ``[start, end)`` are left out, and an empty selection yields one empty
        batch (so the schema is always known).  Arguments as for :meth:`read`.

        Yields ``pyarrow.RecordBatch`` on the CPU; on the GPU (``device="gpu"``,
        or ``"auto"`` when it picks the GPU) ``cudf.DataFrame`` batches, or
        :class:`gtsamples.decode.gpu.table.DeviceTable` when cuDF is not installed.
        Errors are :meth:`read`'s, raised by the batch that holds the bad chunk
        (the earlier batches are correct).  ``stats``: a :class:`ReadStats` the
        stream adds to as it goes (else a new one); :attr:`last_stats` is it too.
        """
        max_bytes = check_max_bytes(max_bytes)
        stats = stats_arg(stats)
        backend = get_backend(device).stream_backend()  # on the GPU without cuDF: DeviceTables
        backend.require()  # before any I/O or CUDA work
        query = self.query(columns, series, tables, start, end, parts)
        return self.stream(query, backend, max_bytes, stats)

    def to_reader(self, columns: Iterable[str] | None = None, series=None, tables=None, start=None, end=None,
                  *, max_bytes: int = DEFAULT_MAX_BYTES, parts=None, stats: ReadStats | None = None):
        """The rows of :meth:`read` as a ``pyarrow.RecordBatchReader`` over
        :meth:`iter_batches` (CPU batches; arguments as for it).

        Lazy (nothing is navigated or fetched before the first batch is asked
        for), bounded in memory (one batch of about ``max_bytes`` at a time) and
        read once: a consumer that reads it exhausts it.  It implements the Arrow
        C stream (``__arrow_c_stream__``), so ``duckdb.sql("SELECT ... FROM
        reader")``, ``polars.from_arrow(reader)``, pandas'
        ``DataFrame.from_arrow`` and DataFusion's ``from_arrow`` consume it
        without copying the batches.  The schema is known before any I/O."""
        columns = columns_arg(columns)  # (once: the batches and the schema both need it)
        batches = self.iter_batches(columns, series, tables, start, end, max_bytes=max_bytes, parts=parts,
                                    stats=stats)
        return batch_reader(arrow_schema(self.manifest, Projection.build(self.manifest, columns).names), batches)

    def _check_cut(self, before: SelectedLeaf, after: SelectedLeaf, query: Query) -> None:
        """The sequence order rule across a cut between two batches of one read (a
        stream's, or :meth:`validate`'s groups); the decoders check it within a batch
        (``gtsamples.batch.flag_sequence_boundaries`` across its blocks), and this
        hands them the cut.  When the blocks on either side of the cut are of one
        identity and meet at one timestamp (their prefixes say so), the two blocks
        are decoded together on the CPU: a greater sequence after the cut raises the
        decoder's own error, as the whole read raises it."""
        i = int(np.flatnonzero(before.mask)[-1])
        j = int(np.flatnonzero(after.mask)[0])
        a, b = before.page.blocks[i], after.page.blocks[j]
        if (int(a["table_id"]), int(a["tsid"]), int(a["max_timestamp"])) != (
                int(b["table_id"]), int(b["tsid"]), int(b["min_timestamp"])):
            return
        last = np.zeros_like(before.mask)
        last[i] = True
        head = np.zeros_like(after.mask)
        head[j] = True
        if (before.part, before.leaf) == (after.part, after.leaf):
            pair = [SelectedLeaf(before.part, before.leaf, before.page, last | head)]
        else:
            pair = [SelectedLeaf(before.part, before.leaf, before.page, last),
                    SelectedLeaf(after.part, after.leaf, after.page, head)]
        CPU.fetch_decode(self.store, self.part_keys, self.build(query, pair), ReadStats())  # raises the SEQUENCE_ORDER error of the pair, if any

    def read_device(self, columns=None, series=None, tables=None, start=None, end=None, *, parts=None):
        """Like :meth:`read` on the GPU, without cuDF: a
        :class:`gtsamples.decode.gpu.table.DeviceTable` of CuPy columns (same rows,
        names, types and validity as the CPU read; ``.to_arrow()`` copies it to
        the host, ``.to_cudf()`` wraps it without copying).  Needs CuPy and a
        CUDA device (libnvcomp for Zstd chunks)."""
        DEVICE_TABLE.require()
        query = self.query(columns, series, tables, start, end, parts)
        stats = ReadStats()
        table = self.run(query, DEVICE_TABLE, stats)
        self.last_stats = stats
        return table

    def inspect(self) -> dict:
        """Open every part's header, trailer and pages (no chunk payload); a summary."""
        stats = ReadStats()
        leaves, nav = self._navigate(Selection(), stats)
        states = nav.part_states(0)
        m = self.manifest
        parts = []
        enc_counts: dict[str, int] = {}
        stored_total = decoded_total = 0
        for i, p in enumerate(m.files):
            part = states[i]
            sls = [sl for sl in leaves if sl.part == i]
            cols = np.concatenate([sl.page.columns for sl in sls])
            r = cols["ref"]
            st = int(r["stored_len"].sum(dtype=np.uint64))
            dc = int(r["decoded_len"].sum(dtype=np.uint64))
            stored_total += st
            decoded_total += dc
            for rl in C.KNOWN_ROLES:
                sub = r[cols["role"] == rl]
                for e in np.unique(sub["encoding"]):
                    for comp in np.unique(sub["compression"][sub["encoding"] == e]):
                        key = f"{C.ROLE_NAMES[rl]}:enc{int(e)}/{'zstd' if comp == 1 else 'raw' if comp == 0 else comp}"
                        enc_counts[key] = enc_counts.get(key, 0) + int(((sub["encoding"] == e) & (sub["compression"] == comp)).sum())
            parts.append({
                "part_id": p.part_id, "file_size": p.file_size, "depth": part.trailer.depth,
                "leaves": len(sls), "blocks": p.num_blocks, "rows": p.num_rows,
                "first": p.first, "last": p.last, "min_timestamp": p.min_timestamp, "max_timestamp": p.max_timestamp,
                "payload_bytes": part.trailer.payload_end - C.HEADER_SIZE,
                "metadata_bytes": part.trailer.file_length - C.TRAILER_SIZE - part.trailer.payload_end,
            })
        total_size = sum(p.file_size for p in m.files)
        rows = m.num_rows
        return {
            "location": self.location,
            "format": m.format, "version": m.version, "region_id": m.region_id,
            "source_file_id": m.source_file_id, "generation": m.generation,
            "timestamp": dataclasses.asdict(m.timestamp),
            "fields": [f.name for f in m.fields],
            "rows": rows, "blocks": m.num_blocks, "parts": parts,
            "bytes": total_size,
            "bytes_per_sample": (total_size / rows) if rows else 0.0,
            "chunk_stored_bytes": stored_total, "chunk_decoded_bytes": decoded_total,
            "compression_ratio": (decoded_total / stored_total) if stored_total else 1.0,
            "encodings": dict(sorted(enc_counts.items())),
            "stats": stats.as_dict(),
        }

    def validate(self, batch_bytes: int = 256 * 1024 * 1024) -> dict:
        """Deep check: every page loaded, every chunk (all fields) decoded, and the
        row order rules that need decoded rows (sequences nonincreasing within equal
        timestamps of a series, across blocks and parts).  Raises on the first broken rule.
        ``batch_bytes``: decoded bytes per group of leaves (a positive integer)."""
        batch_bytes = check_max_bytes(batch_bytes, "batch_bytes")
        stats = ReadStats()
        query = self.query()
        leaves = self.plan(query, stats)
        group: list[SelectedLeaf] = []
        last = None  # the previous group's last leaf
        size = 0
        for sl in leaves + [None]:
            if sl is not None:
                group.append(sl)
                size += int(sl.page.columns["ref"]["decoded_len"].sum(dtype=np.uint64))
            if group and (sl is None or size >= batch_bytes):
                if last is not None:  # the rules across the cut between two groups
                    self._check_cut(last, group[0], query)
                CPU.fetch_decode(self.store, self.part_keys, self.build(query, group, all_fields=True), stats)
                last, group, size = group[-1], [], 0
        return {"valid": True, "rows": self.manifest.num_rows, "stats": stats.as_dict()}


def open_artifact(path, entry: CatalogEntry | dict | None = None, storage_options: dict | None = None,
                  cache: _cache.PageCache | None = None) -> Artifact:
    """Open an artifact: a generation directory, or a store root plus a catalog entry.
    ``path``: a local path (``str``, ``bytes`` or ``os.PathLike``) or an fsspec URL;
    ``cache``: a :class:`~gtsamples.cache.PageCache`, or None (the process's)."""
    path = root_arg("path", path)
    cache = _cache.cache_arg(cache)
    stats = ReadStats()
    if entry is None:
        store = Store(path, storage_options)
        prefix = ""
        msize = None
        what = store.path(C.MANIFEST_NAME)
        data = store.read_whole(C.MANIFEST_NAME, None, C.MAX_MANIFEST_BYTES, stats)
        manifest = parse_manifest(data, what)
        parsed_entry = None
        part_sizes = manifest.files.column("file_size").tolist()
    else:
        store = Store(path, storage_options)
        parsed_entry = parse_catalog_entry(entry)
        msize = check_entry_objects(parsed_entry)
        prefix = parsed_entry.prefix
        what = store.path(prefix + C.MANIFEST_NAME)
        data = store.read_whole(prefix + C.MANIFEST_NAME, msize, C.MAX_MANIFEST_BYTES, stats)
        manifest = parse_manifest(data, what)
        check_entry(parsed_entry, manifest, len(data))
        part_sizes = manifest.files.column("file_size").tolist()
    art = Artifact(store, prefix, manifest, parsed_entry, part_sizes, cache)
    art.open_stats = stats
    return art


def open_parsed_entry(store: Store, entry: CatalogEntry, cache: _cache.PageCache | None = None) -> Artifact:
    """:func:`open_artifact` for a catalog entry already parsed by
    :func:`~gtsamples.format.manifest.parse_catalog_entry`, on an open store
    (a region's: no second parse of the entry, no store set up per artifact).
    The manifest is read, parsed and checked against the entry as there."""
    if not isinstance(entry, CatalogEntry):
        raise TypeError(f"entry must be a parsed CatalogEntry, not {type(entry).__name__}")
    stats = ReadStats()
    msize = check_entry_objects(entry)
    key = entry.prefix + C.MANIFEST_NAME
    data = store.read_whole(key, msize, C.MAX_MANIFEST_BYTES, stats)
    manifest = parse_manifest(data, store.path(key))
    check_entry(entry, manifest, len(data))
    art = Artifact(store, entry.prefix, manifest, entry, manifest.files.column("file_size").tolist(), cache)
    art.open_stats = stats
    return art


def read_artifact(path, entry=None, storage_options=None, **kw):
    """``open_artifact(path, entry, storage_options).read(**kw)``."""
    return open_artifact(path, entry=entry, storage_options=storage_options).read(**kw)
