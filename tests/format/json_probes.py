"""JSON strictness probes: one valid manifest changed in one way each, with the
outcome the manifest rules require (tests/format/test_json_strictness.py runs
them on ``parse_manifest``, benchmarks/json_libraries.py on the JSON
libraries considered for it)."""

from __future__ import annotations

from ..test_bad_files import many_parts_manifest

BASE = many_parts_manifest(2)
assert BASE.count(b'"region_id":1,') == 1 and BASE.count(b'"name":"ts"') == 1


def _sub(old: bytes, new: bytes):
    return lambda b: b.replace(old, new, 1)


def _region_id(text: bytes):
    return _sub(b'"region_id":1,', b'"region_id":' + text + b",")


#: (id, change to BASE, None if the result is a valid manifest else a regex of the error message)
PROBES = [
    ("duplicate-key", _sub(b'"region_id":1,', b'"region_id":1,"region_id":1,'), r"not strict JSON: duplicate key 'region_id'"),
    ("duplicate-key-in-part", _sub(b'"num_rows":1,', b'"num_rows":1,"num_rows":1,'), r"not strict JSON: duplicate key 'num_rows'"),
    ("lone-surrogate", _sub(b'"name":"ts"', b'"name":"t\\ud800"'),
     r"timestamp.name: string is not valid Unicode text \(surrogates not allowed at index 1\)"),
    ("control-character", _sub(b'"name":"ts"', b'"name":"t\x01"'), r"not strict JSON: Invalid control character"),
    ("invalid-utf8", _sub(b'"name":"ts"', b'"name":"t\xff"'), r"not valid UTF-8 \(invalid start byte at byte \d+\)"),
    ("float-1.0", _region_id(b"1.0"), r"region_id: expected an integer \(u64\), found float 1.0"),
    ("float-1e3", _region_id(b"1e3"), r"region_id: expected an integer \(u64\), found float 1000.0"),
    ("minus-zero", _region_id(b"-0"), None),  # the JSON integer -0 is 0
    ("bool", _region_id(b"true"), r"region_id: expected an integer \(u64\), found bool True"),
    ("u64-max", _region_id(b"18446744073709551615"), None),
    ("u64-max+1", _region_id(b"18446744073709551616"), r"region_id: 18446744073709551616 is out of range for u64"),
    ("negative", _region_id(b"-1"), r"region_id: -1 is out of range for u64"),
    ("huge-int", _region_id(b"1" + b"0" * 30), r"region_id: 1000000000000000000000000000000 is out of range for u64"),
    ("int-over-4300-digits", _region_id(b"1" + b"0" * 5000), r"not strict JSON: Exceeds the limit \(4300 digits\)"),
    ("i64-min-1-in-part", _sub(b'"min_timestamp":0', b'"min_timestamp":-9223372036854775809'),
     r"files\[0\].min_timestamp: -9223372036854775809 is out of range for i64"),
    ("u32-max+1-in-part", _sub(b'"table_id":1', b'"table_id":4294967296'),
     r"files\[0\].first.table_id: 4294967296 is out of range for u32"),
    ("leading-zero", _region_id(b"01"), r"not strict JSON: Expecting ',' delimiter"),
    ("NaN", _sub(b'"min_timestamp":0', b'"min_timestamp":NaN'), r"not strict JSON: non-standard JSON constant NaN"),
    ("Infinity", _sub(b'"max_timestamp":0', b'"max_timestamp":Infinity'), r"non-standard JSON constant Infinity"),
    ("-Infinity", _sub(b'"min_timestamp":0', b'"min_timestamp":-Infinity'), r"non-standard JSON constant -Infinity"),
    ("trailing-data", lambda b: b + b" x", r"not strict JSON: Extra data"),
    ("second-document", lambda b: b + b"{}", r"not strict JSON: Extra data"),
    ("trailing-whitespace", lambda b: b + b"\r\n\t ", None),
    ("bom", lambda b: b"\xef\xbb\xbf" + b, r"not strict JSON: Unexpected UTF-8 BOM"),
    ("deep-nesting", _region_id(b"[" * 100_000 + b"]" * 100_000), r"not strict JSON: maximum recursion depth exceeded"),
    ("unknown-key", _sub(b'"region_id":1,', b'"region_id":1,"extra":1,'), r"top level: unknown key\(s\) 'extra'"),
    ("unknown-key-in-part", _sub(b'"num_rows":1,', b'"num_rows":1,"x":1,'), r"files\[0\]: unknown key\(s\) 'x'"),
    ("missing-key", _sub(b'"region_id":1,', b""), r"top level: missing key\(s\) region_id"),
]
