"""The strict parse of a catalog version, in compiled code (msgspec).

A catalog version is one JSON document that grows with the region: about 1.3 KB
per SST (its record and its artifact's entry), 13 MB for 10,000 SSTs.  Parsing it
with ``json`` and a Python ``object_pairs_hook`` for the duplicate-key rule costs
about 2 us per object (~210 ms for 10,000 SSTs).  Here:

* ``msgspec`` decodes the document against its exact shape (:class:`_Doc`): every
  object has exactly its keys (required ones present, no other), every value its
  type (integers are integers, not floats or booleans);
* duplicate keys: an object whose keys are all known fields holds a duplicate
  exactly when it has more key/value pairs than distinct fields.  The decoded
  document is encoded again (``msgspec.json.encode``: each field once, the same
  strings) and the two texts' ``:`` are counted (``bytes.count``): a duplicate
  adds its pair's ``:`` (and any in its dropped value) to the original only;
  whitespace, numbers and field order add none.  This needs the strings to be the
  same bytes in both texts, so a text with a backslash (an escape) is checked by
  the ``json`` hook instead.
* the SST records' ``schema`` objects, nearly always one text, stay Raw in the
  decode: each distinct text is decoded (and its keys counted) once and its dict
  shared by the records that carry it (:func:`_shared_schemas`);
* the rule checks of each artifact entry stay lazy: ``parse_catalog_entry`` runs
  on the entries a plan keeps (:meth:`Region._parse_entry`), once per version and
  process (:mod:`.catalog`'s version cache).

Whatever this path refuses is parsed again by the reference path
(:func:`~gtsamples.format.manifest.load_strict_json` then
:func:`~.catalog.check_doc`), so a document broken in a way that path knows
gets the same error as before; a document only this path refuses (an unknown
key in an SST record, a size that is not an integer) gets msgspec's message,
which names the place (``$.ssts[3].size``).
"""

from __future__ import annotations

import gc
from typing import Annotated, Union

import msgspec
from msgspec import UNSET, Struct, UnsetType

_K = dict(forbid_unknown_fields=True, omit_defaults=True)


class _Ts(Struct, **_K):
    column_id: int
    name: str
    unit: str


class _Field(Struct, **_K):
    column_id: int
    name: str


class _Schema(Struct, **_K):
    timestamp: _Ts
    fields: list[_Field]


_Pair = Annotated[list[int], msgspec.Meta(min_length=2, max_length=2)]  # a list, as json gives it


class _Stats(Struct, **_K):
    first: _Pair  # (table_id, tsid)
    last: _Pair
    min_timestamp: int
    max_timestamp: int


class _Sst(Struct, **_K):
    file_id: str
    path: str
    size: int
    rows: int
    schema: msgspec.Raw  # nearly always the same text: each distinct one decoded once (_shared_schemas)
    stats: Union[_Stats, None, UnsetType] = UNSET


class _Object(Struct, **_K):
    path: str
    file_size: int


class _Entry(Struct, **_K):
    region_id: int
    file_id: str
    generation: str
    objects: list[_Object]
    file_size: int
    format: Union[str, UnsetType] = UNSET
    version: Union[int, UnsetType] = UNSET
    created_at: Union[str, None, UnsetType] = UNSET


class _Doc(Struct, **_K):
    format: str
    version: int
    region_id: int
    catalog_version: int
    created_at: str
    operation: str
    schema: Union[_Schema, None]
    ssts: list[_Sst]
    artifacts: list[_Entry]
    nonce: Union[str, UnsetType] = UNSET


_DECODER = msgspec.json.Decoder(_Doc)
_SCHEMA_DECODER = msgspec.json.Decoder(_Schema)
_ENCODER = msgspec.json.Encoder()


class ParseRefused(Exception):
    """The fast path refused the document; ``message`` says why (msgspec's words)."""


def decode(data: bytes) -> tuple[dict, bool]:
    """(document, duplicate-free) of a catalog version's bytes: the document as
    ``json`` would give it (dicts, lists, str, int, None).  ``duplicate-free`` is
    False when the count could not decide (a backslash in the text) or found more
    pairs than fields: the caller then runs the ``json`` hook.  Raises
    :class:`ParseRefused` when the text is not the catalog's exact shape."""
    # the collector paused: this makes ~10 objects per SST, all kept, none cyclic; with a
    # large heap (earlier versions cached) its passes cost more than the parse itself
    paused = gc.isenabled()
    if paused:
        gc.disable()
    try:
        try:
            typed = _DECODER.decode(data)
        except (msgspec.ValidationError, msgspec.DecodeError) as e:
            raise ParseRefused(str(e)) from None
        data = bytes(data)
        # the SST records' schemas are Raw: re-encoded as they are, so the count below
        # leaves their keys to _shared_schemas
        clean = b"\\" not in data and data.count(b":") == _ENCODER.encode(typed).count(b":")
        schemas, clean_schemas = _shared_schemas(typed.ssts)
        doc = msgspec.to_builtins(typed)
        del typed
        for rec, sch in zip(doc["ssts"], schemas):
            rec["schema"] = sch
    finally:
        if paused:
            gc.enable()
    for s in doc["ssts"]:  # the identity pairs' length (a rule of the shape, not of values)
        st = s.get("stats")
        if st is not None and (len(st["first"]) != 2 or len(st["last"]) != 2):
            raise ParseRefused("an SST's stats.first and stats.last must be [table_id, tsid] pairs")
    return doc, clean and clean_schemas


def _shared_schemas(ssts) -> tuple[list, bool]:
    """(each SST record's schema as a dict, no duplicate key in them): the records'
    schemas are nearly always one text, so each distinct text is decoded once (its
    exact shape by msgspec, its keys counted as :func:`decode` counts the document's)
    and its dict shared by the records that have it (the documents are never
    modified).  Each record's ``schema`` is set to None (to_builtins then skips it)."""
    by_text: dict[bytes, dict] = {}
    out = []
    clean = True
    for rec in ssts:
        text = bytes(rec.schema)
        d = by_text.get(text)
        if d is None:
            try:
                typed = _SCHEMA_DECODER.decode(text)
            except (msgspec.ValidationError, msgspec.DecodeError) as e:
                raise ParseRefused(f"{e} (an SST record's schema)") from None
            clean = clean and b"\\" not in text and text.count(b":") == _ENCODER.encode(typed).count(b":")
            d = by_text[text] = msgspec.to_builtins(typed)
        rec.schema = None
        out.append(d)
    return out, clean
