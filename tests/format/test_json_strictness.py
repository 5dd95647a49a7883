"""Every JSON strictness rule of the manifest (duplicate keys, lone surrogates,
integer types and ranges, non-standard constants, trailing data, BOM, depth),
proven on ``parse_manifest`` both ways it reads a document: whole by ``json``
(small documents) and with the ``files`` array read column-wise (large ones)."""

from __future__ import annotations

import re

import pytest

import gtsamples as gs
from gtsamples.format import manifest as M
from gtsamples.format.manifest import parse

from .json_probes import BASE, PROBES


@pytest.mark.parametrize("scan", [False, True], ids=["whole", "files-column-wise"])
@pytest.mark.parametrize("change,rule", [pytest.param(c, r, id=i) for i, c, r in PROBES])
def test_manifest_json_strictness(monkeypatch, change, rule, scan):
    if scan:
        monkeypatch.setattr(parse, "SCAN_FILES_BYTES", -1)
    data = change(BASE)
    assert data != BASE
    if rule is None:
        m = M.parse_manifest(data)
        assert len(m.files) == 2 and m.timestamp.name == "ts"
    else:
        with pytest.raises(gs.CorruptArtifactError) as ei:
            M.parse_manifest(data)
        assert re.search(rule, str(ei.value)), str(ei.value)
        assert str(ei.value).startswith("manifest.json: ")
