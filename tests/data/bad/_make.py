"""Regenerate the kept bad files (run from the repository root):

    .venv/bin/python -m tests.data.bad._make

Each case is a directory holding a generation directory's objects
(``manifest.json``, ``part-N.samples``) and ``case.json``: how to open it, the
call, the expected error class and the rule (a regex over the message), and
``open_finding`` while the bug it reproduces is open (the test is then a strict
xfail).  Cases are derived from the smallest interop vector
(``tests/data/vectors/v01_basic_single_field``) with one field forged.
"""

from __future__ import annotations

import json
import pathlib
import shutil

from tests.fuzz import partkit

HERE = pathlib.Path(__file__).resolve().parent
VEC = HERE.parent / "vectors" / "v01_basic_single_field"


def _base():
    entry = json.loads((VEC / "entry.json").read_text())
    mb, parts = partkit.read_artifact_files(VEC / "store", entry)
    return json.loads(mb), parts


def _case(name: str, manifest: dict, parts: list[bytes], case: dict) -> None:
    d = HERE / name
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir()
    (d / "manifest.json").write_bytes(partkit.manifest_bytes(manifest))
    for i, p in enumerate(parts):
        (d / f"part-{i}.samples").write_bytes(p)
    (d / "case.json").write_text(json.dumps(case, indent=1) + "\n")


def main() -> None:
    m, parts = _base()

    f = json.loads(json.dumps(m))
    f["files"][0]["file_size"] = (1 << 64) - 1
    _case("part_file_size_u64_max", f, parts, {
        "what": "manifest files[0].file_size = 2**64-1 (the object is 1 KiB); locating the trailer at "
                "file_size - 112 overflows off_t",
        "call": "read", "error": "CorruptArtifactError",
        "rule": "recorded size|shorter than|exceeds",
        "open_finding": None,
        "finding": "F2 (fixed): os.preadv raised OverflowError (storage.py Store._read_into)",
    })

    f = json.loads(json.dumps(m))
    f["files"][0]["file_size"] = 1 << 63
    _case("part_file_size_2p63", f, parts, {
        "what": "manifest files[0].file_size = 2**63: the trailer read [2**63-112, 2**63) ends past off_t max",
        "call": "read", "error": "CorruptArtifactError",
        "rule": "recorded size|shorter than|exceeds",
        "open_finding": None,
        "finding": "F3 (fixed): preadv EINVAL surfaced as the base SamplesError (storage.py Store._read_into)",
    })

    f = json.loads(json.dumps(m))
    f["files"][0]["file_size"] = (1 << 63) - 1
    _case("part_file_size_2p63_minus_1", f, parts, {
        "what": "manifest files[0].file_size = 2**63-1 (largest off_t): must fail as a short object",
        "call": "read", "error": "CorruptArtifactError", "rule": "shorter than its recorded size",
        "open_finding": None,
    })

    text = partkit.manifest_bytes(m).decode()
    name = m["fields"][0]["name"]
    bad = text.replace(f'"name": "{name}"', '"name": "\\ud800"').encode()
    assert bad != text.encode()
    _case_raw("field_name_lone_surrogate", bad, parts, {
        "what": "manifest fields[0].name is the JSON escape \\ud800, a lone surrogate: valid JSON, but not a "
                "Unicode scalar value, so the name has no UTF-8 form (Arrow cannot name a column with it)",
        "call": "read", "error": "CorruptArtifactError", "rule": "surrogate|UTF-8|Unicode",
        "open_finding": None,
    })
    ts = m["timestamp"]["name"]
    bad = text.replace(f'"name": "{ts}"', '"name": "t\\udfff"').encode()
    assert bad != text.encode()
    _case_raw("timestamp_name_lone_surrogate", bad, parts, {
        "what": "manifest timestamp.name contains the lone surrogate escape \\udfff",
        "call": "read", "error": "CorruptArtifactError", "rule": "surrogate|UTF-8|Unicode",
        "open_finding": None,
    })

    _case_from_fuzz_input("sequence_increase_across_parts", "F6_sequence_order_across_parts.fuzz", {
        "what": "the fuzzer's input (tests/data/bad/_inputs/): series (7, 43) continues from part 0 into part 1; "
                "part 1's first row has part 0's last timestamp (50) and a greater sequence (3 then 419)",
        "call": "read", "error": "CorruptArtifactError",
        "rule": r"part-1\.samples .*ordinal 1\) sequence column: decode failed \[SEQUENCE_ORDER\]: sequences must be "
                r"nonincreasing within equal timestamps.*3 then 419",
        "open_finding": None,
        "finding": "F6 (fixed): read() returned the rows; only validate() checked the order rule",
    })

    _case_from_fuzz_input("root_page_zstd_corruption", "F7_root_page_zstd_corruption.fuzz", {
        "what": "the fuzzer's input (tests/data/bad/_inputs/): the internal root page of part 0 is a Zstd frame "
                "with valid checksums whose compressed block is corrupt: libzstd 1.5.7 (python-zstandard's) "
                "reports data corruption, Debian's libzstd 1.5.4 decompressed it to the declared length",
        "call": "navigate_many", "error": "CorruptArtifactError",
        "rule": r"part-0\.samples root page: Zstd decompression failed: .*Data corruption detected",
        "open_finding": None,
        "finding": "F7 (fixed): with the system libzstd tried first, a region's batched navigation accepted "
                   "a root page that Artifact.navigate (python-zstandard) refused",
    })


def _case_from_fuzz_input(name: str, input_name: str, case: dict) -> None:
    """A case from a kept fuzz input: the files the fuzz target writes for it."""
    from tests.fuzz.targets import Prepared

    prep = Prepared((HERE / "_inputs" / input_name).read_bytes())
    assert not prep.use_entry  # opened as a generation directory, like the other cases
    _case_raw(name, prep.manifest, prep.parts, case)


def _case_raw(name: str, manifest_bytes: bytes, parts: list[bytes], case: dict) -> None:
    d = HERE / name
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir()
    (d / "manifest.json").write_bytes(manifest_bytes)
    for i, p in enumerate(parts):
        (d / f"part-{i}.samples").write_bytes(p)
    (d / "case.json").write_text(json.dumps(case, indent=1) + "\n")


if __name__ == "__main__":
    main()
