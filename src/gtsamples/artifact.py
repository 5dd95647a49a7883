"""Opening, inspecting, reading and validating one artifact.

``open_artifact`` reads and validates the manifest (and the catalog entry when
given).  Parts are opened lazily: a read opens only the parts whose manifest
bounds match, checks each part's header and trailer before any traversal,
loads only the pages it needs (shared through the metadata cache), and hands
one ChunkBatch for the whole query to a backend.
"""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Any, Iterable

import numpy as np

from . import cache as _cache
from .batch import ChunkBatch, DecodedColumns, row_mask
from .errors import CorruptArtifactError, DecodeErrorFlag, SamplesError, UnsupportedError
from .format import constants as C
from .format import manifest as _manifest
from .format.manifest import (
    CatalogEntry,
    _parse_small_manifest,
    Manifest,
    check_entry,
    check_entry_objects,
    parse_catalog_entry,
    parse_manifest,
)
from .format import rules as R
from .format.pages import (
    LeafPage,
    PageRef,
    Trailer,
    check_boundary,
    load_payload,
    parse_head,
    parse_internal_page,
    parse_leaf_page,
)
from .plan import Projection, Selection, SelectedLeaf, build_batch, fetch_batch
from .storage import LOCAL_COALESCE_GAP, ObjectReader, ReadStats, Store

DEVICES = ("cpu", "gpu", "auto")


@dataclasses.dataclass
class _Part:
    """Lazily loaded state of one part (header/trailer and root checked together)."""

    trailer: Trailer
    root_leaf: LeafPage | None  # depth 1
    children: list[PageRef] | None  # depth 2


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
        key = self._keys.get(i)
        if key is None:
            key = self._keys[i] = self.prefix + self.manifest.files[i].name
        return key

    @property
    def part_keys(self) -> list[str]:
        """Store keys of every part, in manifest order."""
        return [self.part_key(i) for i in range(len(self.manifest.files))]

    def _what(self, i: int) -> str:
        return self.store.path(self.part_key(i))

    @property
    def cache(self) -> _cache.PageCache:
        return self._cache if self._cache is not None else _cache.default_cache()

    def _cache_key(self, part: int, offset: int) -> tuple:
        return (self.store.root, self.prefix, self.manifest.generation, part, offset)

    # -- part and page loading ---------------------------------------------------------
    def _part(self, i: int, stats: ReadStats, rd: ObjectReader | None = None) -> _Part:
        """Part ``i``'s checked header, trailer and root page (cached); ``rd``: a
        reader of the part to use for any read (one open file per part)."""
        cache = self.cache
        key = self._cache_key(i, -1)
        state = cache.get(key)
        if state is not None:
            stats.cache_hits += 1
            return state
        stats.cache_misses += 1
        if rd is None:
            with self.store.reader(self.part_key(i), stats) as rd:
                state, nbytes = self._load_part(i, stats, rd)
        else:
            state, nbytes = self._load_part(i, stats, rd)
        cache.put(key, state, nbytes)
        return state

    def _load_part(self, i: int, stats: ReadStats, rd: ObjectReader) -> tuple[_Part, int]:
        size = self.part_sizes[i]
        what = self._what(i)
        # header and trailer: one request only when they are close (small parts)
        header, trailer_bytes = rd.read_ranges([0, size - C.TRAILER_SIZE], [C.HEADER_SIZE, C.TRAILER_SIZE],
                                               LOCAL_COALESCE_GAP)
        stats.metadata_bytes += C.HEADER_SIZE + C.TRAILER_SIZE
        trailer = parse_head(header, trailer_bytes, size, self.manifest.files.array[i], what)
        root = trailer.root
        stored = rd.read(root.offset, root.stored_len)
        stats.metadata_bytes += root.stored_len
        stats.pages_loaded += 1
        data = load_payload(stored, root, f"{what} root page")
        if trailer.depth == 1:
            lw = f"{what} leaf 0 (root)"
            leaf = parse_leaf_page(data, root, self.manifest, trailer.column_area, lw, check_first=True,
                                   prev_last=self._prev_part_last(i))
            return _Part(trailer, leaf, None), leaf.blocks.nbytes + leaf.columns.nbytes * 2 + 512
        children = parse_internal_page(data, root, trailer.metadata_area, f"{what} root page")
        return _Part(trailer, None, children), 200 * len(children) + 512

    def _leaves(self, i: int, part: _Part, wanted: list[int], stats: ReadStats,
                rd: ObjectReader | None = None) -> list[LeafPage]:
        """Load several leaves of a depth-2 part (coalesced reads for the misses)."""
        cache = self.cache
        out: list = []
        missing = []
        for k in wanted:
            v = cache.get(self._cache_key(i, part.children[k].offset))
            if v is None:
                missing.append(len(out))
                stats.cache_misses += 1
            else:
                stats.cache_hits += 1
            out.append(v)
        if missing:
            if rd is None:
                with self.store.reader(self.part_key(i), stats) as rd:
                    self._load_leaves(i, part, wanted, missing, out, stats, rd)
            else:
                self._load_leaves(i, part, wanted, missing, out, stats, rd)
        return out

    def _load_leaves(self, i: int, part: _Part, wanted: list[int], missing: list[int], out: list,
                     stats: ReadStats, rd: ObjectReader) -> None:
        what = self._what(i)
        refs = [part.children[wanted[j]] for j in missing]
        datas = rd.read_ranges([r.offset for r in refs], [r.stored_len for r in refs])
        area = part.trailer.column_area
        for j, r, stored in zip(missing, refs, datas):
            k = wanted[j]
            lw = f"{what} leaf {k}"
            stats.metadata_bytes += r.stored_len
            stats.pages_loaded += 1
            leaf = parse_leaf_page(load_payload(stored, r, lw), r, self.manifest, area, lw, check_first=True,
                                   prev_last=self._prev_part_last(i) if k == 0 else part.children[k - 1].last)
            self.cache.put(self._cache_key(i, r.offset), leaf, leaf.blocks.nbytes + leaf.columns.nbytes * 2 + 512)
            out[j] = leaf

    # -- cross-page checks that need no neighbour page -----------------------------------
    def _prev_part_last(self, i: int):
        """The last identity of part ``i - 1`` (None for the first part): a part's first
        block continues that identity's ordinals or starts its own at zero."""
        if i == 0:
            return None
        r = self.manifest.files.array[i - 1]
        return (int(r["last_table_id"]), int(r["last_tsid"]))

    # -- navigation --------------------------------------------------------------------
    def _part_list(self, parts) -> list[int] | None:
        """``parts`` (part indices, i.e. part IDs) checked, sorted, deduplicated; None: all."""
        if parts is None:
            return None
        if isinstance(parts, (int, np.integer)) and not isinstance(parts, (bool, np.bool_)):
            parts = [parts]
        elif isinstance(parts, (bool, np.bool_, str, bytes)) or not hasattr(parts, "__iter__"):
            raise TypeError(f"parts must be part indices (an integer or an iterable of them), not {parts!r}")
        n = len(self.manifest.files)
        out = set()
        for k in parts:
            if isinstance(k, (bool, np.bool_)) or not isinstance(k, (int, np.integer)):
                raise TypeError(f"parts must be part indices (integers), not {type(k).__name__}")
            if not 0 <= k < n:
                raise ValueError(f"part {int(k)} does not exist: {self.location} has {n} part(s)")
            out.add(int(k))
        return sorted(out)

    def _select_leaves(self, sel: Selection, stats: ReadStats, everything: bool = False,
                       parts_out: dict | None = None, parts: list[int] | None = None) -> list[SelectedLeaf]:
        """The leaves a selection needs, each with its selected blocks (``everything``:
        every leaf and block).  ``parts``: only these parts (checked part indices)."""
        m = self.manifest
        out: list[SelectedLeaf] = []
        if sel.is_empty and not everything:
            return out
        idx = range(len(m.files)) if everything else sel.iter_parts(m.files)
        if parts is not None:
            keep = set(parts)
            idx = (i for i in idx if i in keep)
        n_leaves: dict[int, int] = {}
        for i in idx:
            with self.store.reader(self.part_key(i), stats) as rd:  # opened on the first read only
                part = self._part(i, stats, rd)
                if part.root_leaf is not None:
                    pages = [(0, part.root_leaf)]
                    n_leaves[i] = 1
                else:
                    if everything:
                        wanted = list(range(len(part.children)))
                    else:
                        wanted = [k for k, c in enumerate(part.children)
                                  if sel.selects(c.first, c.last, c.min_timestamp, c.max_timestamp)]
                    pages = list(zip(wanted, self._leaves(i, part, wanted, stats, rd)))
                    n_leaves[i] = len(part.children)
            if parts_out is not None:
                parts_out[i] = part
            self._add_pages(out, i, pages, n_leaves, sel, everything)
        self._check_full_parts(out, n_leaves)
        return out

    def _add_pages(self, out: list[SelectedLeaf], i: int, pages, n_leaves: dict[int, int], sel: Selection,
                   everything: bool = False) -> None:
        """Append part ``i``'s loaded leaves ``[(leaf ordinal, LeafPage)]`` to ``out`` with
        their selected blocks, checking each against the previous leaf when adjacent."""
        for k, leaf in pages:
            mask = np.ones(leaf.blocks.shape[0], bool) if everything else sel.block_mask(leaf.blocks)
            cur = SelectedLeaf(i, k, leaf, mask)
            if out:
                prev = out[-1]
                adjacent_same = prev.part == i and prev.leaf == k - 1
                adjacent_part = prev.part == i - 1 and k == 0 and prev.leaf == n_leaves[prev.part] - 1
                if adjacent_same or adjacent_part:
                    check_boundary(prev.page, cur.page, f"{self._what(i)} leaf {k}", adjacent_same)
            out.append(cur)

    def _check_full_parts(self, leaves: list[SelectedLeaf], n_leaves: dict[int, int]) -> None:
        """When every leaf of a part was loaded, its totals must match the manifest."""
        by_part: dict[int, list[SelectedLeaf]] = {}
        for sl in leaves:
            by_part.setdefault(sl.part, []).append(sl)
        for i, sls in by_part.items():
            if len(sls) != n_leaves[i]:
                continue
            desc = self.manifest.files[i]
            rows = sum(sl.page.num_rows for sl in sls)
            nblocks = sum(sl.page.blocks.shape[0] for sl in sls)
            if rows != desc.num_rows or nblocks != desc.num_blocks:
                raise R.rule_error(R.PART_TOTALS, self._what(i), 0, (nblocks, rows, desc.num_blocks, desc.num_rows))

    # -- public API ----------------------------------------------------------------------
    def navigate(self, selection: Selection, stats: ReadStats | None = None, *, parts=None) -> list[SelectedLeaf]:
        """Navigation only: the leaves a selection needs (loaded and checked, parts'
        headers and trailers first), with each leaf's selected blocks.  ``selection``
        is in this artifact's timestamp unit.  With :func:`gtsamples.plan.build_batch`
        and :func:`~gtsamples.plan.fetch_batch` this is :meth:`plan`; a region builds
        one batch from several artifacts' leaves.  ``parts``: as for :meth:`read`."""
        return self._select_leaves(selection, stats if stats is not None else ReadStats(),
                                   parts=self._part_list(parts))

    def plan(self, columns=None, series=None, tables=None, start=None, end=None,
             stats: ReadStats | None = None, all_fields: bool = False, *, parts=None) -> tuple[ChunkBatch, Projection]:
        """Navigate and fetch: the ChunkBatch a read would decode (data included).
        ``parts``: as for :meth:`read`."""
        stats = stats if stats is not None else ReadStats()
        m = self.manifest
        projection = Projection.build(m, columns)
        sel = Selection.build(series, tables, start, end, m.timestamp.unit)
        leaves = self._select_leaves(sel, stats, parts=self._part_list(parts))
        batch = build_batch(leaves, m, sel, projection, source=self.location, all_fields=all_fields)
        fetch_batch(self.store, self.part_keys, batch, stats)
        stats.blocks_decoded += int(batch.blocks.shape[0])
        stats.chunks_decoded += int(batch.chunks.shape[0])
        return batch, projection

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
        from . import frames

        if device not in DEVICES:
            raise ValueError(f"device must be one of {DEVICES}, not {device!r}")
        backend = _resolve_device(device)
        if backend == "gpu":  # before any I/O or CUDA work
            from .frames_gpu import require_cudf

            require_cudf()
            _require_gpu()
        stats = ReadStats()
        batch, projection = self.plan(columns, series, tables, start, end, stats, parts=parts)
        if backend == "gpu":
            from .decode import gpu

            dev = gpu.decode_batch_gpu(batch)
            result = dev.to_cudf(self.manifest, projection)
        else:
            from .decode import cpu

            cols = cpu.decode_batch(batch)
            result = frames.to_arrow(self.manifest, projection, batch, cols)
        self.last_stats = stats
        return result, stats

    def read_device(self, columns=None, series=None, tables=None, start=None, end=None, *, parts=None):
        """Like :meth:`read` on the GPU, without cuDF: a
        :class:`gtsamples.frames_gpu.DeviceTable` of CuPy columns (same rows,
        names, types and validity as the CPU read; ``.to_arrow()`` copies it to
        the host, ``.to_cudf()`` wraps it without copying).  Needs CuPy and a
        CUDA device (libnvcomp for Zstd chunks)."""
        _require_gpu()
        stats = ReadStats()
        batch, projection = self.plan(columns, series, tables, start, end, stats, parts=parts)
        from .decode import gpu

        table = gpu.decode_batch_gpu(batch).select(self.manifest, projection)
        self.last_stats = stats
        return table

    def inspect(self) -> dict:
        """Open every part's header, trailer and pages (no chunk payload); a summary."""
        stats = ReadStats()
        states: dict[int, _Part] = {}
        leaves = self._select_leaves(Selection(), stats, everything=True, parts_out=states)
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
        timestamps of a series, across blocks and parts).  Raises on the first broken rule."""
        from .decode import cpu

        stats = ReadStats()
        leaves = self._select_leaves(Selection(), stats, everything=True)
        projection = Projection.build(self.manifest, None)
        sel = Selection()
        prev_row = None  # (table_id, tsid, ts, seq) of the last row checked
        group: list[SelectedLeaf] = []
        size = 0
        for sl in leaves + [None]:
            if sl is not None:
                group.append(sl)
                size += int(sl.page.columns["ref"]["decoded_len"].sum(dtype=np.uint64))
            if group and (sl is None or size >= batch_bytes):
                batch = build_batch(group, self.manifest, sel, projection, source=self.location, all_fields=True)
                fetch_batch(self.store, self.part_keys, batch, stats)
                cols = cpu.decode_batch(batch)
                prev_row = _check_sequence_order(batch, cols, prev_row)
                stats.blocks_decoded += int(batch.blocks.shape[0])
                stats.chunks_decoded += int(batch.chunks.shape[0])
                group, size = [], 0
        return {"valid": True, "rows": self.manifest.num_rows, "stats": stats.as_dict()}


def _check_sequence_order(batch: ChunkBatch, cols: DecodedColumns, prev_row):
    """Sequences are nonincreasing within equal timestamps of one identity, across
    the boundary between two validation groups (the decoder checks the rule inside
    a batch: ``DecodeErrorFlag.SEQUENCE_ORDER``).  ``prev_row``: (table_id, tsid,
    timestamp, sequence) of the previous group's last row, or None."""
    b = batch.blocks
    if b.shape[0] == 0:
        return prev_row
    first = (int(b["table_id"][0]), int(b["tsid"][0]), int(cols.timestamp[0]), int(cols.sequence[0]))
    if prev_row is not None and prev_row[:3] == first[:3] and first[3] > prev_row[3]:
        err = CorruptArtifactError(
            f"{batch.source}: series (table {first[0]}, tsid {first[1]}) at timestamp {first[2]}: "
            f"sequences must be nonincreasing within equal timestamps: {prev_row[3]} then {first[3]}"
        )
        err.flags = DecodeErrorFlag.SEQUENCE_ORDER  # type: ignore[attr-defined]  # as the decoder's
        raise err
    return (int(b["table_id"][-1]), int(b["tsid"][-1]), int(cols.timestamp[-1]), int(cols.sequence[-1]))


def _resolve_device(device: str) -> str:
    if device == "cpu":
        return "cpu"
    try:
        from .decode import gpu
    except ImportError as e:  # pragma: no cover - depends on the install
        if device == "gpu":
            raise SamplesError(f"device='gpu' needs the gpu extra (pip install 'gtsamples[gpu]'): {e}") from None
        return "cpu"
    if device == "auto":  # the GPU only when it can return its cudf.DataFrame
        import importlib.util

        return "gpu" if importlib.util.find_spec("cudf") is not None and gpu.is_gpu_available() else "cpu"
    return "gpu"


def _require_gpu() -> None:
    from .decode import gpu

    if not gpu.is_gpu_available(require_nvcomp=False):
        raise UnsupportedError("GPU decoding needs CuPy and a CUDA device; none is usable here "
                               "(use device='cpu')")


def open_artifact(path, entry: CatalogEntry | dict | None = None, storage_options: dict | None = None,
                  cache: _cache.PageCache | None = None) -> Artifact:
    """Open an artifact: a generation directory, or a store root plus a catalog entry."""
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
    manifest = _parse_small_manifest(data) if len(data) <= _manifest.SMALL_MANIFEST_BYTES else None
    if manifest is None:  # (the checked parse, with the object's name for the message)
        manifest = parse_manifest(data, store.path(key))
    check_entry(entry, manifest, len(data))
    art = Artifact(store, entry.prefix, manifest, entry, manifest.files.column("file_size").tolist(), cache)
    art.open_stats = stats
    return art


def read_artifact(path, entry=None, storage_options=None, **kw):
    """``open_artifact(path, entry, storage_options).read(**kw)``."""
    return open_artifact(path, entry=entry, storage_options=storage_options).read(**kw)
