"""A store written outside gtsamples: one ``Store`` subclass, its scheme registered,
and an artifact opened, read and streamed through it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import gtsamples as gs
from gtsamples import storage
from gtsamples.errors import CorruptArtifactError
from gtsamples.storage import store as store_module

from ..conftest import assert_tables_equal

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "golden" / "g2_depth2"
OBJECTS: dict[str, bytes] = {}  # "name/key" -> bytes: the whole "remote" side


class DictStore(storage.Store):
    """Objects held in a dict, read-only: the five methods a store must define."""

    calls = 0

    def __init__(self, root, storage_options=None):
        super().__init__(root, storage_options)
        self.name = self.root.split("://", 1)[1].rstrip("/")

    def path(self, key):
        return f"{self.name}/{key}" if key else self.name

    def getsize(self, key):
        try:
            return len(OBJECTS[self.path(key)])
        except KeyError:
            raise FileNotFoundError(self.path(key)) from None

    def exists(self, key):
        p = self.path(key)
        return p in OBJECTS or any(k.startswith(p + "/") for k in OBJECTS)

    def read_into(self, key, ranges, out, out_pos, stats):
        p = self.path(key)
        storage.check_object_end(p, ranges)
        data = OBJECTS.get(p)
        if data is None:
            raise CorruptArtifactError(f"{p}: object is missing")
        for (off, n), pos in zip(ranges, out_pos):
            if off + n > len(data):
                raise CorruptArtifactError(f"{p}: object is shorter than its recorded size")
            out[pos: pos + n] = np.frombuffer(data, np.uint8, n, off)
        type(self).calls += 1
        if stats is not None:
            stats.requests += len(ranges)
            stats.bytes_read += sum(int(n) for _, n in ranges)

    def list(self, key):
        p = self.path(key.rstrip("/")) + "/"
        kids = {k[len(p):].split("/", 1)[0]: "/" in k[len(p):] for k in OBJECTS if k.startswith(p)}
        return sorted(kids.items())


@pytest.fixture
def dict_store(monkeypatch):
    monkeypatch.setitem(store_module._SCHEMES, "gtsdict", None)  # removed again after the test
    storage.register_store("gtsdict", DictStore)
    root = GOLDEN / "store"
    OBJECTS.clear()
    for f in root.rglob("*"):
        if f.is_file():
            OBJECTS["g2/" + f.relative_to(root).as_posix()] = f.read_bytes()
    DictStore.calls = 0
    yield "gtsdict://g2"
    OBJECTS.clear()


def test_an_artifact_reads_through_a_third_party_store(dict_store):
    entry = json.loads((GOLDEN / "entry.json").read_text())
    want = gs.open_artifact(GOLDEN / "store", entry=entry).read()
    art = gs.open_artifact(dict_store, entry=entry)
    assert type(art.store) is DictStore
    got, st = art.read_with_stats()
    assert_tables_equal(got, want)
    assert DictStore.calls > 0 and st.requests > 0 and st.chunk_bytes > 0
    streamed = list(art.iter_batches(max_bytes=1))  # the smallest batches
    assert sum(b.num_rows for b in streamed) == want.num_rows
    art.validate()


def test_registering_needs_a_store_class():
    with pytest.raises(TypeError, match="not a Store subclass"):
        storage.register_store("gtsbad", dict)
