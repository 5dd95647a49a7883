"""README.md and the docs: every relative link resolves, and README points at the docs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), *sorted((ROOT / "benchmarks").glob("*.md"))]
# [text](target) and [text](target "title"); images too; not inside code spans
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")


def relative_links(path: Path) -> list[tuple[int, str]]:
    """``(line, target)`` of each link that is not a URL or a pure #anchor,
    outside fenced code blocks and code spans."""
    out, fence = [], None
    for n, line in enumerate(path.read_text().splitlines(), 1):
        m = FENCE.match(line)
        if m:
            fence = None if fence and m.group(1)[0] == fence else (fence or m.group(1)[0])
            continue
        if fence:
            continue
        for target in LINK.findall(re.sub(r"`[^`]*`", "", line)):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I) or target.startswith("#"):
                continue
            out.append((n, target))
    return out


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(doc):
    broken = [f"{doc.relative_to(ROOT)}:{n}: {t}" for n, t in relative_links(doc)
              if not (doc.parent / t.split("#", 1)[0]).exists()]  # fmt: skip
    assert not broken, "links to nothing:\n" + "\n".join(broken)


def test_the_link_check_sees_links(tmp_path):
    doc = tmp_path / "x.md"
    doc.write_text("[a](docs/a.md) ![i](img.png \"t\") [u](https://x.org) [h](#top) `[c](no.md)`\n"
                   "```\n[f](fenced.md)\n```\n[b](b.md#part)\n")  # fmt: skip
    assert relative_links(doc) == [(1, "docs/a.md"), (1, "img.png"), (5, "b.md#part")]


def test_readme_points_at_the_docs_and_the_sanitizer():
    text = (ROOT / "README.md").read_text()
    links = {t for _, t in relative_links(ROOT / "README.md")}
    assert {"docs/format.md", "docs/gpu.md", "docs/architecture.md"} <= links
    assert "make kernels-sanitize" in text
