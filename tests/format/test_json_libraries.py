"""Why ``gtsamples.format.manifest`` reads JSON with its own strict ``json`` hooks and
column-wise scanner rather than msgspec, orjson or ijson (issue 15, item 9): the
same probes as tests/format/test_json_strictness.py, on each library, set the
way it would be used -- msgspec decoding into typed Structs (unknown fields
forbidden, integer ranges as ``Meta(ge=, le=)``), orjson and ijson parsing the
document for the manifest's rule checks (tests/format/manifest_reference.py).

Each test pins the probes a library lets through although a manifest rule
refuses them.  All three accept duplicate keys (the last value wins); msgspec
cannot bound an integer past int64 (no u64 range: 2**64 and larger pass);
ijson turns a lone surrogate escape into "?", and its yajl2_c backend crashes
the process on an integer of 5,000 digits.  So none keeps every rule.  If a
new release closes a gap, the test fails: that is the time to look again.
(ijson is not given the deep-nesting probe: on it the yajl2_c backend ran out of
memory, killed at several GiB, or raised MemoryError under a 4 GiB limit.)
"""

import signal
import subprocess
import sys
from typing import Annotated

import pytest

import gtsamples as gs
from gtsamples.format import constants as C

from . import manifest_reference as R
from .json_probes import BASE, PROBES

DUPLICATE_KEYS = {"duplicate-key", "duplicate-key-in-part"}


def _let_through(parse, skip=()) -> set[str]:
    """The probes that ``parse`` accepts although a manifest rule refuses them;
    every valid probe must be accepted."""
    through = set()
    for pid, change, rule in PROBES:
        if pid in skip:
            continue
        try:
            parse(change(BASE))
            accepted = True
        except gs.SamplesError:
            accepted = False
        except Exception:  # noqa: BLE001 - the library's own errors: refused
            accepted = False
        if rule is None:
            assert accepted, pid
        elif accepted:
            through.add(pid)
    return through


def test_msgspec_typed_structs():
    msgspec = pytest.importorskip("msgspec")
    U32 = Annotated[int, msgspec.Meta(ge=0, le=C.U32_MAX)]
    with pytest.raises(ValueError, match="don't fit in an int64 are currently not supported"):
        msgspec.json.Decoder(Annotated[int, msgspec.Meta(ge=0, le=C.U64_MAX)])
    U64 = Annotated[int, msgspec.Meta(ge=0)]  # no upper bound can be given: u64 is unchecked
    I64 = Annotated[int, msgspec.Meta(ge=C.I64_MIN, le=C.I64_MAX)]

    class Identity(msgspec.Struct, forbid_unknown_fields=True):
        table_id: U32
        tsid: U64

    class Part(msgspec.Struct, forbid_unknown_fields=True):
        part_id: U32
        file_size: U64
        num_rows: U64
        num_blocks: U64
        first: Identity
        last: Identity
        min_timestamp: I64
        max_timestamp: I64

    class Timestamp(msgspec.Struct, forbid_unknown_fields=True):
        column_id: U32
        name: str
        unit: str

    class Field(msgspec.Struct, forbid_unknown_fields=True):
        column_id: U32
        name: str
        type: str
        nullable: bool

    class Document(msgspec.Struct, forbid_unknown_fields=True):
        format: str
        version: int
        region_id: U64
        source_file_id: str
        generation: str
        timestamp: Timestamp
        fields: list[Field]
        files: list[Part]

    decode = msgspec.json.Decoder(Document).decode
    assert decode(BASE).files[1].part_id == 1
    assert _let_through(decode) == DUPLICATE_KEYS | {"u64-max+1", "huge-int"}
    # the last of two values wins, silently
    assert decode(BASE.replace(b'"region_id":1,', b'"region_id":1,"region_id":7,')).region_id == 7


def test_orjson():
    orjson = pytest.importorskip("orjson")
    assert _let_through(lambda b: R.check_document(orjson.loads(b))) == DUPLICATE_KEYS


def _one_document(items: list):
    assert len(items) == 1
    return items[0]


def test_ijson():
    ijson = pytest.importorskip("ijson")
    through = _let_through(lambda b: R.check_document(_one_document(list(ijson.items(b, "")))),
                           skip={"deep-nesting", "int-over-4300-digits"})
    assert through == DUPLICATE_KEYS | {"lone-surrogate"}


def test_ijson_crashes_on_an_integer_of_5000_digits():
    """The yajl2_c backend kills the process (SIGSEGV) where ``json`` raises ValueError."""
    pytest.importorskip("ijson")
    code = 'import ijson; list(ijson.items(b"{\\"a\\":1" + b"0" * 5000 + b"}", ""))'
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=120)
    assert r.returncode == -signal.SIGSEGV, (r.returncode, r.stderr[-300:])
