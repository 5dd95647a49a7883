"""Fuzz targets for the CPU read path.

One fuzz input is a small *container* holding a whole artifact::

    flags: u8        bit 0: repair every checksum (partkit.fix_checksums)
                     bit 1: repair sizes (manifest part file_size, entry sizes)
                     bit 2: open through the catalog entry (else the generation dir)
    params: 8 bytes  selection parameters (selection target only)
    sections:        u32 LE length + bytes, repeated: manifest.json text,
                     catalog entry JSON text, part-0 bytes, part-1 bytes, ...

Parsing is lenient (a short or overlong length just takes what is there), so
every byte string is a valid input.  :func:`mutate` is a structure-aware
custom mutator: it mutates one section at a time (libFuzzer's own mutator on
the section, or a field-level "forge" of an integer to an interesting value,
or a JSON-aware edit of the manifest/entry) and re-frames the container.

Each target writes the artifact into a private temporary store and calls the
public API.  The only allowed outcomes are rows or a ``gs.SamplesError``;
anything else (another exception, a failed oracle assertion) propagates and
is a finding.  Oracles:

* full read: on success, the row count equals the manifest's and
  ``validate()`` agrees;
* selection read: when the full read of the same bytes succeeds, the selection
  must succeed too and equal a brute-force filter of the full read (bit for
  bit);
* navigation: a region's batched navigation (``navigate_many``) returns what
  ``Artifact.navigate`` returns or raises (leaves, selected blocks, error class
  and message, read statistics).
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import struct
import tempfile

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

import gtsamples as gs
from gtsamples.cache import PageCache

from . import partkit

FLAG_FIX_CHECKSUMS = 1
FLAG_FIX_SIZES = 2
FLAG_ENTRY = 4
N_PARAMS = 8
MAX_PARTS = 8

DEFAULT_REGION = 4398046511104
DEFAULT_FILE_ID = "5a3c0000-0000-4000-8000-000000000001"
DEFAULT_GENERATION = "5a3c0000-0000-4000-8000-000000000002"
_FILE_ID_RE = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


# --- container ------------------------------------------------------------------------


def pack(flags: int, params: bytes, manifest: bytes, entry: bytes, parts: list[bytes]) -> bytes:
    params = (bytes(params) + bytes(N_PARAMS))[:N_PARAMS]
    out = bytearray([flags & 0xFF]) + params
    for s in [manifest, entry, *parts]:
        out += struct.pack("<I", len(s)) + bytes(s)
    return bytes(out)


def unpack(data: bytes) -> tuple[int, bytes, bytes, bytes, list[bytes]]:
    """(flags, params, manifest, entry, parts); never fails."""
    flags = data[0] if data else 0
    params = (bytes(data[1: 1 + N_PARAMS]) + bytes(N_PARAMS))[:N_PARAMS]
    pos = 1 + N_PARAMS
    secs: list[bytes] = []
    while pos < len(data) and len(secs) < 2 + MAX_PARTS:
        if pos + 4 > len(data):
            secs.append(bytes(data[pos:]))
            break
        (n,) = struct.unpack_from("<I", data, pos)
        pos += 4
        secs.append(bytes(data[pos: pos + n]))
        pos += n
    while len(secs) < 2:
        secs.append(b"")
    return flags, params, secs[0], secs[1], secs[2:]


# --- preparing and writing one input ---------------------------------------------------------


def _json_or_none(b: bytes):
    try:
        return json.loads(b.decode("utf-8"))
    except Exception:  # noqa: BLE001 - any garbage
        return None


def _prefix_of(entry) -> str:
    """Store prefix to write to: from the entry when it names a safe one, else the default."""
    if isinstance(entry, dict):
        r, f, g = entry.get("region_id"), entry.get("file_id"), entry.get("generation")
        if (type(r) is int and 0 <= r < 1 << 64 and isinstance(f, str) and isinstance(g, str)
                and _FILE_ID_RE.match(f) and _FILE_ID_RE.match(g)):
            return f"{r}/samples/{f}/{g}/"
    return f"{DEFAULT_REGION}/samples/{DEFAULT_FILE_ID}/{DEFAULT_GENERATION}/"


class Prepared:
    """The artifact of one input as files, plus how to open it."""

    def __init__(self, data: bytes):
        flags, params, manifest, entry_text, parts = unpack(data)
        self.flags, self.params = flags, params
        if flags & FLAG_FIX_CHECKSUMS:
            parts = [partkit.fix_checksums(p) for p in parts]
        entry = _json_or_none(entry_text)
        if flags & FLAG_FIX_SIZES:
            m = _json_or_none(manifest)
            if isinstance(m, dict) and isinstance(m.get("files"), list):
                changed = False
                for i, p in enumerate(m["files"]):
                    if isinstance(p, dict) and i < len(parts) and p.get("file_size") != len(parts[i]):
                        p["file_size"] = len(parts[i])
                        changed = True
                if changed:
                    manifest = partkit.manifest_bytes(m)
            if isinstance(entry, dict) and isinstance(entry.get("objects"), list):
                sizes = {"manifest.json": len(manifest)}
                sizes.update({f"part-{i}.samples": len(p) for i, p in enumerate(parts)})
                total = 0
                for o in entry["objects"]:
                    if isinstance(o, dict) and isinstance(o.get("path"), str):
                        name = o["path"].rsplit("/", 1)[-1]
                        if name in sizes:
                            o["file_size"] = sizes[name]
                        if type(o.get("file_size")) is int:
                            total += o["file_size"]
                entry["file_size"] = total
        self.manifest, self.parts, self.entry = manifest, parts, entry
        self.use_entry = bool(flags & FLAG_ENTRY) and isinstance(entry, dict)
        self.prefix = _prefix_of(entry)


class Workspace:
    """A private store root (tmpfs when available) reused across inputs."""

    def __init__(self):
        base = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
        self.root = tempfile.mkdtemp(prefix="gtsamples-fuzz-", dir=base)
        self._written: list[str] = []

    def close(self):
        shutil.rmtree(self.root, ignore_errors=True)

    def write(self, prep: Prepared) -> None:
        shutil.rmtree(os.path.join(self.root, "_g"), ignore_errors=True)
        for d in self._written:
            shutil.rmtree(d, ignore_errors=True)
        self._written = []
        d = os.path.join(self.root, prep.prefix)
        os.makedirs(d, exist_ok=True)
        self._written.append(os.path.join(self.root, prep.prefix.split("/", 1)[0]))
        with open(os.path.join(d, "manifest.json"), "wb") as f:
            f.write(prep.manifest)
        for i, p in enumerate(prep.parts):
            with open(os.path.join(d, f"part-{i}.samples"), "wb") as f:
                f.write(p)
        self.gen_dir = d

    def open(self, prep: Prepared):
        """A fresh Artifact (fresh metadata cache: inputs reuse paths and generations)."""
        if prep.use_entry:
            return gs.open_artifact(self.root, entry=prep.entry, cache=PageCache())
        return gs.open_artifact(self.gen_dir, cache=PageCache())


_WS: Workspace | None = None


def workspace() -> Workspace:
    global _WS
    if _WS is None:
        _WS = Workspace()
    return _WS


# --- selections ---------------------------------------------------------------------------


def selection_of(params: bytes, manifest) -> dict:
    """A valid query derived from ``params`` and the manifest's bounds."""
    p = list(params)
    ids = []
    for part in manifest.files:
        ids += [part.first, part.last]
    times = [t for part in manifest.files for t in (part.min_timestamp, part.max_timestamp)]
    kw: dict = {}
    mode = p[0] % 5
    if ids and mode in (0, 3):
        k = 1 + p[1] % 3
        kw["series"] = [ids[(p[1] + 7 * j) % len(ids)] for j in range(k)]
        if p[1] & 0x80:
            kw["series"].append((ids[0][0], (ids[0][1] + 1) & ((1 << 64) - 1)))
    if ids and mode in (1, 3):
        kw["tables"] = sorted({ids[(p[2] + j) % len(ids)][0] for j in range(1 + p[2] % 2)})
    if mode == 4:
        kw["series"] = []
    if times and p[3] % 3:
        lo, hi = min(times), max(times)
        span = max(hi - lo, 1)
        s = lo + (span * p[4]) // 255 - (1 if p[3] & 4 else 0)
        kw["start"] = max(min(s, (1 << 63) - 1), -(1 << 63))
        if p[3] % 3 == 2:
            e = kw["start"] + 1 + (span * p[5]) // 128
            kw["end"] = max(min(e, (1 << 63) - 1), -(1 << 63))
    names = list(manifest.column_names)
    if p[6] & 1:
        keep = [n for i, n in enumerate(names) if (p[7] >> (i % 8)) & 1 or i == 2]
        kw["columns"] = keep
    return kw


def brute_filter(full: pa.Table, manifest, kw: dict) -> pa.Table:
    """The spec's selection semantics applied row by row to a full read."""
    t = full
    mask = np.ones(t.num_rows, dtype=bool)
    tid = t.column("__table_id").to_numpy()
    tsid = t.column("__tsid").to_numpy()
    if kw.get("series") is not None:
        allowed_tables = set(kw["tables"]) if kw.get("tables") is not None else None
        want = {(int(a), int(b)) for a, b in kw["series"] if allowed_tables is None or a in allowed_tables}
        mask &= np.array([(int(a), int(b)) in want for a, b in zip(tid, tsid)], dtype=bool)
    elif kw.get("tables") is not None:
        mask &= np.isin(tid, np.array(kw["tables"], dtype=np.uint32))
    ts = t.column(manifest.timestamp.name).cast(pa.int64()).to_numpy()
    if kw.get("start") is not None:
        mask &= ts >= kw["start"]
    if kw.get("end") is not None:
        mask &= ts < kw["end"]
    t = t.filter(pa.array(mask))
    if kw.get("columns") is not None:
        t = t.select([n for n in manifest.column_names if n in set(kw["columns"])])
    return t


def tables_identical(a: pa.Table, b: pa.Table) -> bool:
    if a.schema != b.schema or a.num_rows != b.num_rows:
        return False
    for name in a.schema.names:
        x, y = a.column(name).combine_chunks(), b.column(name).combine_chunks()
        if pa.types.is_floating(x.type):
            vx = np.asarray(x.is_valid().to_numpy(zero_copy_only=False), bool)
            vy = np.asarray(y.is_valid().to_numpy(zero_copy_only=False), bool)
            bx = x.fill_null(0.0).to_numpy(zero_copy_only=False).view(np.uint64)
            by = y.fill_null(0.0).to_numpy(zero_copy_only=False).view(np.uint64)
            if not (np.array_equal(vx, vy) and np.array_equal(np.where(vx, bx, 0), np.where(vy, by, 0))):
                return False
        elif not x.equals(y):
            return False
    return True


# --- the targets ----------------------------------------------------------------------------


def target_inspect(data: bytes) -> str:
    """open + inspect.  Returns 'ok' or the SamplesError class name."""
    ws = workspace()
    prep = Prepared(data)
    ws.write(prep)
    try:
        art = ws.open(prep)
        s = art.inspect()
        assert s["rows"] == art.manifest.num_rows
        return "ok"
    except gs.SamplesError as e:
        return type(e).__name__


def target_read(data: bytes) -> str:
    """open + full read (+ validate must agree)."""
    ws = workspace()
    prep = Prepared(data)
    ws.write(prep)
    try:
        art = ws.open(prep)
        t = art.read()
    except gs.SamplesError as e:
        return type(e).__name__
    assert t.num_rows == art.manifest.num_rows, (t.num_rows, art.manifest.num_rows)
    assert t.schema.names == list(art.manifest.column_names)
    art2 = ws.open(prep)
    art2.validate()  # must not raise when the full read succeeded
    return "ok"


def _open_input(data: bytes):
    """``(workspace, prepared input, opened artifact)``, or the SamplesError class name
    when the artifact does not open."""
    ws = workspace()
    prep = Prepared(data)
    ws.write(prep)
    try:
        return ws, prep, ws.open(prep)
    except gs.SamplesError as e:
        return type(e).__name__


def target_select(data: bytes) -> str:
    """open + a selection read; equal to a brute-force filter of the full read when that succeeds."""
    opened = _open_input(data)
    if isinstance(opened, str):
        return opened
    ws, prep, art = opened
    kw = selection_of(prep.params, art.manifest)
    sel_err = None
    try:
        got = art.read(**kw)
    except gs.SamplesError as e:
        sel_err = e
    try:
        full = ws.open(prep).read()
    except gs.SamplesError:
        return "ok" if sel_err is None else type(sel_err).__name__
    if sel_err is not None:
        raise AssertionError(f"selection {kw} raised {sel_err!r} but the full read of the same bytes succeeded")
    want = brute_filter(full, art.manifest, kw)
    if not tables_identical(got, want):
        raise AssertionError(f"selection {kw}: {got.num_rows} rows differ from the brute-force filter "
                             f"({want.num_rows} rows)")
    return "ok"


def navigation_outcome(res) -> tuple:
    """A navigation's result (its SelectedLeafs, or the SamplesError it raised) as a
    comparable value: the leaves' bytes and selected blocks, or the error's class and
    message."""
    if isinstance(res, gs.SamplesError):
        return ("error", type(res).__name__, str(res))
    return ("ok", [(sl.part, sl.leaf, sl.page.blocks.tobytes(), sl.page.columns.tobytes(),
                    sl.page.col_start.tobytes(), sl.mask.tobytes()) for sl in res])


def target_navigate(data: bytes) -> str:
    """open + navigation (:func:`gtsamples.plan.navigator.navigate_many`: trailers,
    internal roots and leaf pages checked by the numba rules of
    ``gtsamples.format.pages``, messages from their rule codes) against the
    rule-by-rule reference navigation (``tests/format/reference.py``) of the same
    artifact: the same leaves and selected blocks, or the same error class and
    message; the same read statistics when it succeeds.  A params bit sends the leaf
    pages through the helper thread."""
    from gtsamples.plan import Selection, loading
    from gtsamples.plan.navigator import navigate_many
    from gtsamples.storage import ReadStats

    from ..format import reference

    opened = _open_input(data)
    if isinstance(opened, str):
        return opened
    ws, prep, art = opened
    kw = selection_of(prep.params, art.manifest)
    sel = Selection.build(kw.get("series"), kw.get("tables"), kw.get("start"), kw.get("end"),
                          art.manifest.timestamp.unit)
    want_stats = ReadStats()
    try:
        want = navigation_outcome(reference.navigate(art, sel, want_stats))
    except gs.SamplesError as e:
        want = navigation_outcome(e)
    helper = bool(prep.params and prep.params[6] & 2)
    saved = loading.HELPER_PAGE_BYTES
    loading.HELPER_PAGE_BYTES = 0 if helper else saved
    try:
        stats = ReadStats()
        res = navigate_many([ws.open(prep)], sel, [stats])[0]
    finally:
        loading.HELPER_PAGE_BYTES = saved
    got = navigation_outcome(res)
    if got != want:
        raise AssertionError(f"navigate_many ({'helper' if helper else 'here'}) {got[0]} {got[1:2] if got[0] == 'error' else ''}"
                             f" differs from the reference navigation: {want[0]} {want[1:] if want[0] == 'error' else ''}")
    if want[0] == "ok" and stats != want_stats:
        raise AssertionError(f"navigate_many read statistics {stats} differ from the reference's {want_stats}")
    return "ok" if want[0] == "ok" else want[1]


TARGETS = {"inspect": target_inspect, "read": target_read, "select": target_select, "navigate": target_navigate}


# --- structure-aware mutation ----------------------------------------------------------------

_INTERESTING = [0, 1, 2, 3, 4, 7, 8, 11, 12, 16, 31, 32, 44, 56, 64, 72, 88, 100, 104, 112, 127, 128, 255, 256,
                910, 911, 1023, 1024, 1025, 4096, 8191, 8192, 8193, 65535, 65536, 65537, 131072, 131073,
                262144, (1 << 20), (1 << 20) + 1, (1 << 20) + (64 << 10) + 1, (1 << 31) - 1, 1 << 31,
                (1 << 32) - 1, 1 << 32, (1 << 63) - 1, 1 << 63, (1 << 64) - 1, (1 << 64) - 112, (1 << 64) - 16]
_JSON_VALUES = [0, 1, -1, 2, 1024, 1025, (1 << 32) - 1, 1 << 32, (1 << 63) - 1, 1 << 63, (1 << 64) - 1, 1 << 64,
                -(1 << 63), -(1 << 63) - 1, 1.0, 0.5, True, False, None, "", "x", "__tsid", "ts",
                "float64", "millisecond", "nanosecond", "fortnight", [], {}, [1], {"a": 1}, 1e308,
                "\ud800", "a\udfffb", "\x00", "\u00e9t\u00e9", "ts\n"]


def _forge_int(b: bytearray, rng: random.Random, at: int | None = None) -> None:
    if not b:
        return
    width = rng.choice((1, 2, 4, 8))
    if at is None:
        at = rng.randrange(len(b))
        if rng.random() < 0.5:
            at -= at % width
    at = max(0, min(at, len(b) - 1))
    v = rng.choice(_INTERESTING)
    if rng.random() < 0.2:
        v = (len(b) + rng.choice((-113, -112, -16, -1, 0, 1, 16))) & ((1 << 64) - 1)
    v &= (1 << (8 * width)) - 1
    chunk = v.to_bytes(width, "little")[: len(b) - at]
    b[at: at + len(chunk)] = chunk


def _forge_part(part: bytes, rng: random.Random) -> bytes:
    b = bytearray(part)
    if len(b) >= 128 and rng.random() < 0.4:
        # a trailer or root-reference field
        t = len(b) - 112
        fields = [0, 4, 12, 16, 24, 32, 40, 48, 52, 56, 64, 66, 68, 72, 76, 80, 88, 96]
        _forge_int(b, rng, t + rng.choice(fields))
    else:
        _forge_int(b, rng)
    return bytes(b)


def _json_paths(doc, path=()):
    yield path
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _json_paths(v, path + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from _json_paths(v, path + (i,))


def _mutate_json(text: bytes, rng: random.Random) -> bytes | None:
    doc = _json_or_none(text)
    if doc is None:
        return None
    paths = list(_json_paths(doc))
    path = rng.choice(paths)
    if not path:
        return None
    parent = doc
    for k in path[:-1]:
        parent = parent[k]
    key = path[-1]
    r = rng.random()
    if r < 0.6:
        parent[key] = rng.choice(_JSON_VALUES)
    elif r < 0.7 and isinstance(parent[key], int) and not isinstance(parent[key], bool):
        parent[key] = parent[key] + rng.choice((-1, 1))
    elif r < 0.8:
        if isinstance(parent, dict):
            del parent[key]
        else:
            parent.pop(key)
    elif r < 0.9 and isinstance(parent, list):
        parent.insert(key, json.loads(json.dumps(parent[key])))
    elif isinstance(parent, dict):
        parent[rng.choice(["extra", "format", "version", "nullable"])] = rng.choice(_JSON_VALUES)
    else:
        parent[key] = rng.choice(_JSON_VALUES)
    return (json.dumps(doc, indent=rng.choice((None, 1)), allow_nan=True) + ("\n" if rng.random() < 0.5 else "")).encode()


def mutate(data: bytes, max_size: int, seed: int, lib_mutate=None) -> bytes:
    """Structure-aware mutation of one container section (see module doc)."""
    rng = random.Random(seed)
    flags, params, manifest, entry, parts = unpack(data)
    secs = [manifest, entry, *parts]
    r = rng.random()
    if r < 0.04:
        flags ^= 1 << rng.randrange(3)
    elif r < 0.10:
        pb = bytearray(params)
        pb[rng.randrange(N_PARAMS)] = rng.randrange(256)
        params = bytes(pb)
    else:
        if parts and rng.random() < 0.7:
            i = 2 + rng.randrange(len(parts))
        else:
            i = rng.choice((0, 0, 1))
        s = secs[i]
        q = rng.random()
        if i >= 2 and q < 0.3:
            s = _forge_part(s, rng)
        elif i < 2 and q < 0.4:
            s = _mutate_json(s, rng) or s
        elif i >= 2 and q < 0.33 and len(parts) > 1:
            # splice: a part from another position, or drop/duplicate one
            j = 2 + rng.randrange(len(parts))
            s = secs[j]
        elif lib_mutate is not None:
            budget = max(len(s) * 2 + 64, 256)
            s = lib_mutate(s, budget)
        else:
            s = _random_mutate(s, rng)
        secs[i] = s
        if rng.random() < 0.02 and len(secs) > 3:
            secs.pop()  # drop the last part
    out = pack(flags, params, secs[0], secs[1], secs[2:])
    if len(out) > max_size:
        return data[:max_size]
    return out


def _random_mutate(s: bytes, rng: random.Random) -> bytes:
    """A libFuzzer-like byte mutation (used when atheris is not installed)."""
    b = bytearray(s)
    for _ in range(1 + rng.randrange(3)):
        op = rng.randrange(6)
        if op == 0 and b:
            b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
        elif op == 1 and b:
            b[rng.randrange(len(b))] = rng.randrange(256)
        elif op == 2 and b:
            del b[rng.randrange(len(b))]
        elif op == 3:
            b.insert(rng.randrange(len(b) + 1), rng.randrange(256))
        elif op == 4 and len(b) > 4:
            i, j = sorted(rng.sample(range(len(b)), 2))
            del b[i:j]
        else:
            _forge_int(b, rng)
    return bytes(b)
