"""Why ``gtsamples.format.manifest`` reads JSON with its own strict ``json`` hooks and
column-wise scanner rather than msgspec, orjson or ijson (issue 15, item 9): the
same probes as tests/format/test_json_strictness.py, on each library, set the
way it would be used -- msgspec decoding into typed Structs (unknown fields
forbidden, integer ranges as ``Meta(ge=, le=)``), orjson and ijson parsing the
document for the manifest's rule checks (tests/format/manifest_reference.py).

It prints, per library, the probes it lets through although a manifest rule
refuses them (an evaluation, not a test: the suite does not depend on these
libraries' releases).  Measured 2026-12-04 (msgspec 0.23.0, orjson 3.13.0, ijson 3.6.0,
yajl2_c): all three accept duplicate keys (the last value wins); msgspec cannot
bound an integer past int64 (no u64 range: 2**64 and larger pass); ijson turns a
lone surrogate escape into "?", and its yajl2_c backend crashes the process on
an integer of 5,000 digits.  So none keeps every rule.  (ijson is not given the
deep-nesting probe: on it the yajl2_c backend ran out of memory, killed at
several GiB, or raised MemoryError under a 4 GiB limit.)

    pip install msgspec orjson ijson && python benchmarks/json_libraries.py
"""

import importlib
import pathlib
import signal
import subprocess
import sys
from typing import Annotated

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import gtsamples as gs  # noqa: E402
from gtsamples.format import constants as C  # noqa: E402
from tests.format import manifest_reference as R  # noqa: E402
from tests.format.json_probes import BASE, PROBES  # noqa: E402

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


def msgspec_typed_structs(msgspec) -> set[str]:
    U32 = Annotated[int, msgspec.Meta(ge=0, le=C.U32_MAX)]
    try:
        msgspec.json.Decoder(Annotated[int, msgspec.Meta(ge=0, le=C.U64_MAX)])
        print("  msgspec takes a u64 upper bound")
    except ValueError as e:
        print(f"  msgspec refuses a u64 upper bound: {e}")
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
    dup = decode(BASE.replace(b'"region_id":1,', b'"region_id":1,"region_id":7,')).region_id
    print(f"  msgspec, region_id given as 1 then 7: {dup}")
    return _let_through(decode)


def orjson_probes(orjson) -> set[str]:
    return _let_through(lambda b: R.check_document(orjson.loads(b)))


def _one_document(items: list):
    assert len(items) == 1
    return items[0]


def ijson_probes(ijson) -> set[str]:
    through = _let_through(lambda b: R.check_document(_one_document(list(ijson.items(b, "")))),
                           skip={"deep-nesting", "int-over-4300-digits"})
    # an integer of 5,000 digits, in a process of its own: the yajl2_c backend has crashed on it
    code = 'import ijson; list(ijson.items(b"{\\"a\\":1" + b"0" * 5000 + b"}", ""))'
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=120)
    crashed = r.returncode == -signal.SIGSEGV
    print(f"  ijson on an integer of 5,000 digits: {'SIGSEGV' if crashed else f'exit {r.returncode}'}")
    return through | ({"int-5000-digits (crash)"} if crashed else set())


def main() -> int:
    print(f"{len(PROBES)} probes; a manifest rule refuses {sum(rule is not None for _, _, rule in PROBES)}")
    for name, probe in (("msgspec", msgspec_typed_structs), ("orjson", orjson_probes), ("ijson", ijson_probes)):
        try:
            mod = importlib.import_module(name)
        except ImportError:
            print(f"{name}: not installed")
            continue
        print(f"{name} {getattr(mod, '__version__', '?')}:")
        through = probe(mod)
        print(f"  lets through: {', '.join(sorted(through)) or 'nothing'}")
        print(f"  keeps every rule: {'yes' if not through else 'no'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
