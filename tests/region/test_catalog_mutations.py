"""Catalog format 3 against structure-aware mutations: packed columns given other dtypes,
other values, broken or padded base64, ends that decrease or pass their text, dictionary
indices out of range, columns missing, repeated, swapped or replaced by JSON of another
kind.  Each mutated document is refused with a :class:`~gtsamples.region.CatalogError`
naming the version, or it parses, its records are made, and a region whose latest version
it is opens, plans and reads (an artifact it misdescribes is skipped for its SST, a
``SamplesError``): never another exception.  (The byte-level corruptions are in
``test_catalog_packed.py``; this reaches the rules behind valid JSON and valid base64.)"""

from __future__ import annotations

import base64
import copy
import json
import os
import random
import warnings

import numpy as np
import pytest

from gtsamples.errors import SamplesError
from gtsamples.region import CatalogError, catalog, catalog_packed, open_region

from .conftest import REGION_ID, catalog_path, catalog_region

INT_DTYPES = tuple(catalog_packed.INT_DTYPES)  # the packed integer types, by name
EDGE_INTS = (0, 1, -1, 255, 256, 65535, 2**31 - 1, 2**32, 2**63 - 1, -2**63, 2**64 - 1)
BAD_BASE64 = ("", "=", "==", "A", "AA", "AA=", "AAA=", "AAAAA", "A A=", "AA\nAA", "\\u0041AAA", "\u00e9AAA",
              "AAAA====", "-_-_")
OTHER_JSON = (None, 0, -1, 1.5, True, "x", [], [1, 2], {}, {"x": 1})


def _packed(values, dtype: str) -> str:
    """``values`` (any integers: taken modulo the dtype's width) as the base64 of ``dtype``."""
    dt = np.dtype(dtype)
    bits = 8 * dt.itemsize
    raw = np.array([v % (1 << bits) for v in values], dtype=np.uint64).astype(f"<u{dt.itemsize}")
    return base64.b64encode(raw.tobytes()).decode()


def _ints(rng: random.Random, n: int) -> list[int]:
    pick = rng.random()
    if pick < 0.4:
        return [rng.choice(EDGE_INTS) for _ in range(n)]
    return [rng.randint(-3, 300) for _ in range(n)]


def _mutate_ints(col: dict, rng: random.Random, n: int) -> None:
    m = rng.randrange(9)
    if m == 0:
        col["dtype"] = rng.choice(INT_DTYPES + ("<f8", ">u4", "u1", "", "<u16") + OTHER_JSON)
    elif m in (1, 2):  # other values, in its dtype or another, one too few, too many or as many
        dt = col["dtype"] if m == 1 and col["dtype"] in INT_DTYPES else rng.choice(INT_DTYPES)
        col["dtype"], col["data"] = dt, _packed(_ints(rng, max(0, n + rng.choice((-1, 0, 0, 1)))), dt)
    elif m == 3:
        col["data"] = rng.choice(BAD_BASE64 + OTHER_JSON)
    elif m == 4:
        col["data"] = col["data"][: rng.randrange(len(col["data"]) + 1)]
    elif m == 5:
        col["data"] += rng.choice(("A", "AA==", "====", " ", "AAAA"))
    elif m == 6:
        del col[rng.choice(("dtype", "data"))]
    elif m == 7:
        col["unknown"] = 1
    elif col["data"]:
        s = list(col["data"])
        s[rng.randrange(len(s))] = rng.choice("AZaz09+/=-_.")
        col["data"] = "".join(s)


def _mutate_strs(col: dict, rng: random.Random, n: int) -> None:
    m = rng.randrange(9)
    text = col["text"]
    if m == 0:  # ends in order, ending anywhere in the text or at its end
        ends = sorted(rng.randint(0, len(text)) for _ in range(n))
        if ends and rng.random() < 0.5:
            ends[-1] = len(text)
        dt = rng.choice(INT_DTYPES)
        col["ends"] = {"dtype": dt, "data": _packed(ends, dt)}
    elif m == 1:
        _mutate_ints(col["ends"], rng, n)
    elif m == 2:
        col["text"] = text[: rng.randrange(len(text) + 1)]
    elif m == 3:
        col["text"] = text + rng.choice(("x", "\u00e9", "\U0001f600", "\x00", ":", '"', "\\"))
    elif m == 4 and text:
        k = rng.randrange(len(text))
        col["text"] = text[:k] + rng.choice(("-", "g", "\u00e9", "\x00", "Z", "\ud800")) + text[k + 1:]
    elif m == 5:  # a dictionary's indices, some beyond its pieces or negative
        dt = rng.choice(INT_DTYPES)
        col["indices"] = {"dtype": dt, "data": _packed([rng.randint(-2, n + 1) for _ in range(n)], dt)}
    elif m == 6 and "indices" in col:
        _mutate_ints(col["indices"], rng, n)
    elif m == 7:
        col["text"] = rng.choice(OTHER_JSON)
    else:
        del col[rng.choice(("ends", "text", "indices") if "indices" in col else ("ends", "text"))]


def _columns(doc: dict) -> list[tuple[str, str]]:
    return [(part, k) for part in ("ssts", "artifacts") for k, v in doc[part].items() if isinstance(v, dict)]


def mutate(doc: dict, rng: random.Random, rows: dict) -> dict:
    """One to three structure-aware edits of format-3 document ``doc`` (in place)."""
    for _ in range(rng.choice((1, 1, 2, 3))):
        cols = _columns(doc)
        if not cols:
            break
        part, k = rng.choice(cols)
        col, m = doc[part][k], rng.randrange(10)
        if m < 7:
            try:
                (_mutate_ints if "dtype" in col else _mutate_strs)(col, rng, rows[part])
            except (KeyError, TypeError):  # a key an earlier edit deleted, or gave another kind of value
                pass
        elif m == 7:
            doc[part][k] = rng.choice(OTHER_JSON)
        elif m == 8:
            if rng.random() < 0.5:
                del doc[part][k]
            else:
                doc[part]["x_" + k] = copy.deepcopy(col)
        else:  # two columns of a table swap their packed values
            other = [c for c in cols if c[0] == part and c != (part, k)
                     and ("dtype" in doc[part][c[1]]) == ("dtype" in col)]
            if other:
                k2 = rng.choice(other)[1]
                doc[part][k], doc[part][k2] = doc[part][k2], col
    return doc


@pytest.mark.parametrize("seed", range(4))
def test_mutated_v3_documents_refuse_or_read(tmp_path, seed):
    r = catalog_region(tmp_path, 4)
    base = json.loads(catalog_path(tmp_path, r.version).read_bytes())
    assert base["version"] == 3
    n = base["catalog_version"] = r.version + 1
    rows = {"ssts": len(r.ssts), "artifacts": len(r.ssts)}
    rng = random.Random(seed)
    refused = accepted = opened = 0
    for _ in range(400):
        doc = mutate(copy.deepcopy(base), rng, rows)
        data = json.dumps(doc, separators=(",", ":"), ensure_ascii=rng.random() < 0.5).encode("utf-8",
                                                                                                "surrogatepass")
        try:
            parsed = catalog.parse_version(data, "v", REGION_ID, n)
        except CatalogError as e:
            assert str(e).startswith("v: "), e
            refused += 1
            continue
        catalog.copy_doc(parsed)  # every record made
        accepted += 1
        if accepted % 4 == 1:  # and the whole read path, from disk
            path = catalog_path(tmp_path, n)
            path.write_bytes(data)
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # (artifacts skipped for their SSTs)
                    region = open_region(str(tmp_path), REGION_ID)
                    region.coverage()
                    region.read()
                opened += 1
            except SamplesError:
                opened += 1
            finally:
                os.remove(path)
    # the mutations reach both outcomes, and the read path
    assert refused > 100 and accepted > 10 and opened > 3, (refused, accepted, opened)
