"""Every ```python block of README.md and docs/**/*.md runs here, like doctests.

Conventions (README.md, "Examples in this README"):

* An info string of exactly ``python`` runs.  The blocks of one file run in order
  in one namespace, like a notebook, in a scratch working directory (relative
  paths such as ``"store/"`` land there).  A test runs the file's earlier blocks
  first if they have not run (``pytest -k 'README.md:120'`` works alone).
* ``python gpu``: runs only where a GPU with cuDF is usable (what ``device="auto"``
  would pick); elsewhere it is skipped with that reason.  Later blocks must not
  depend on it.
* ``python norun``: compiled, not run (fragments, placeholders).
* Anything else after ``python``, or another Python info string (``py``,
  ``python3``, ``pycon``, ``ipython``, ``Python`` ...), fails: a typo must not
  silently stop an example from running.

Substitutions, applied to a block's text before it runs (:func:`substitute`):

* the path prefix ``/data/`` -> ``<scratch>/data/``, which holds
  ``ssts/6f0c7d2e-0b1a-4c3e-9f5d-2a8b4c6d8e01.parquet``: a real SST (Parquet,
  samples schema, spec order) of ``synthetic_metrics(100, 1000, seed=8)``;
* ``Client(...)`` -> ``Client(n_workers=2, threads_per_worker=1, processes=False,
  dashboard_address=None)``, the small in-process cluster tests/region/test_dask.py
  uses; clients left open are closed after the file.

A block is refused if, after substitution, a string constant in it is an absolute
path outside the scratch directory: examples must not write to the machine.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
import os
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
SST_NAME = "6f0c7d2e-0b1a-4c3e-9f5d-2a8b4c6d8e01.parquet"
SMALL_CLIENT = "Client(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None)"

_OPEN = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
# the first word of an info string that means Python, however spelled
_PYTHONISH = re.compile(r"(?i)\{?\.?(python\d*(\.\d+)?|py\d*|pycon|ipython\d*|ipy)\b.*")
MARKERS = ("gpu", "norun")


@dataclasses.dataclass(frozen=True)
class Block:
    path: pathlib.Path
    line: int  # 1-based line of the block's first code line
    kind: str  # "run", "gpu", "norun", or "bad"
    code: str
    problem: str = ""

    @property
    def id(self) -> str:
        return f"{self.path.relative_to(ROOT).as_posix()}:{self.line}"


def classify(info: str) -> tuple[str | None, str]:
    """(kind, problem) of a fence's info string; kind None: not a Python block."""
    words = info.split()
    if not words:
        return None, ""
    if words[0] == "python":
        rest = words[1:]
        if not rest:
            return "run", ""
        if len(rest) == 1 and rest[0] in MARKERS:
            return rest[0], ""
        return "bad", (f"unknown marker(s) {' '.join(rest)!r}: write ```python (runs), ```python gpu or "
                       f"```python norun (see tests/test_docs_examples.py)")
    if _PYTHONISH.fullmatch(info.strip()):
        return "bad", f"info string {info.strip()!r}: write ```python (or ```python gpu / ```python norun)"
    return None, ""


def fenced(text: str) -> list[tuple[int, str, str | None]]:
    """(line of the first code line, info string, code or None when never closed) of every
    fenced code block (CommonMark fences: three or more backticks or tildes, closed by the
    same character at least as many times; the opening indent is removed from the code)."""
    lines = text.splitlines()
    out = []
    i = 0
    while i < len(lines):
        m = _OPEN.match(lines[i])
        if m is None or (m["fence"][0] == "`" and "`" in m["info"]):
            i += 1
            continue
        fence, indent = m["fence"], len(m["indent"])
        close = re.compile(rf"^ {{0,3}}{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$")
        j = i + 1
        while j < len(lines) and not close.match(lines[j]):
            j += 1
        body = [ln[min(indent, len(ln) - len(ln.lstrip(" "))):] for ln in lines[i + 1:j]]
        out.append((i + 2, m["info"], "\n".join(body) + "\n" if j < len(lines) else None))
        i = j + 1
    return out


def parse_blocks(path: pathlib.Path, text: str) -> list[Block]:
    """The Python blocks of a Markdown text, classified."""
    out = []
    for line, info, code in fenced(text):
        kind, problem = classify(info)
        if kind is None:
            continue
        if code is None:
            kind, problem, code = "bad", "the code block is never closed", ""
        out.append(Block(path, line, kind, code, problem))
    return out


def doc_files() -> list[pathlib.Path]:
    docs = ROOT / "docs"
    return [ROOT / "README.md"] + (sorted(docs.rglob("*.md")) if docs.is_dir() else [])


BLOCKS = [b for p in doc_files() for b in parse_blocks(p, p.read_text(encoding="utf-8"))]

_CLIENT = re.compile(r"\bClient\([^()]*\)")


def substitute(code: str, scratch: pathlib.Path) -> str:
    """The documented substitutions; each keeps the line count (tracebacks point at the file's lines)."""
    code = code.replace('"/data/', f'"{scratch}/data/').replace("'/data/", f"'{scratch}/data/")
    return _CLIENT.sub(SMALL_CLIENT, code)


def check_paths(code: str, scratch: pathlib.Path, where: str) -> None:
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("/") \
                and not node.value.startswith(f"{scratch}/"):
            raise AssertionError(f"{where}: the absolute path {node.value!r} is outside the example's scratch "
                                 f"directory: write it under /data/ (substituted) or as a relative path")


def gpu_reason() -> str | None:
    """Why ``python gpu`` blocks cannot run here (None: they can)."""
    if importlib.util.find_spec("cudf") is None:
        return "cuDF is not installed"
    try:
        from gtsamples.decode import gpu
    except ImportError as e:
        return f"the gpu extra is not installed ({e})"
    return None if gpu.is_gpu_available() else "no usable GPU (CuPy, a CUDA device, nvCOMP)"


class Session:
    """One file's namespace and scratch directory; runs its blocks in order."""

    def __init__(self, path: pathlib.Path, scratch: pathlib.Path):
        self.blocks = [b for b in BLOCKS if b.path == path]
        self.scratch = scratch
        self.ns: dict = {"__name__": "__docs__"}
        self.done: set[int] = set()
        self.failed: dict[int, str] = {}
        (scratch / "data" / "ssts").mkdir(parents=True)
        _write_sst(scratch / "data" / "ssts" / SST_NAME)

    def run_through(self, block: Block) -> None:
        k = self.blocks.index(block)
        for b in self.blocks[:k]:
            if b.kind == "run" or (b.kind == "gpu" and gpu_reason() is None):
                self._run(b)
        self._run(block)

    def _run(self, b: Block) -> None:
        if b.line in self.failed:
            raise AssertionError(f"{b.id} failed: {self.failed[b.line]}")
        if b.line in self.done:
            return
        code = substitute(b.code, self.scratch)
        try:
            check_paths(code, self.scratch, b.id)
            compiled = compile("\n" * (b.line - 1) + code, str(b.path), "exec")
            cwd = os.getcwd()
            os.chdir(self.scratch)
            try:
                exec(compiled, self.ns)
            finally:
                os.chdir(cwd)
        except BaseException as e:
            self.failed[b.line] = f"{type(e).__name__}: {e}"
            raise
        self.done.add(b.line)

    def close(self) -> None:
        for v in list(self.ns.values()):
            if type(v).__module__.startswith("distributed") and type(v).__name__ == "Client":
                v.close()


def _write_sst(path: pathlib.Path) -> None:
    import pyarrow.parquet as pq

    from gtsamples.demo import synthetic_metrics

    pq.write_table(synthetic_metrics(n_series=100, rows_per_series=1000, seed=8), path, row_group_size=20_000)


@pytest.fixture(scope="module")
def sessions(tmp_path_factory):
    made: dict[pathlib.Path, Session] = {}

    def get(path: pathlib.Path) -> Session:
        if path not in made:
            made[path] = Session(path, tmp_path_factory.mktemp("docs"))
        return made[path]

    yield get
    for s in made.values():
        s.close()


@pytest.mark.parametrize("block", BLOCKS, ids=[b.id for b in BLOCKS])
def test_doc_example(block: Block, sessions):
    if block.kind == "bad":
        pytest.fail(f"{block.id}: {block.problem}", pytrace=False)
    if block.kind == "norun":
        compile(block.code, block.id, "exec")
        return
    if block.kind == "gpu":
        reason = gpu_reason()
        if reason is not None:
            pytest.skip(f"{block.id} needs a GPU with cuDF: {reason}")
    sessions(block.path).run_through(block)


# --- the harness's own rules ------------------------------------------------------------------


def test_the_readme_has_runnable_examples():
    kinds = [b.kind for b in BLOCKS if b.path.name == "README.md"]
    assert kinds.count("run") >= 4 and "bad" not in kinds
    assert kinds.count("gpu") <= 2  # GPU-only blocks are the exception


def test_fences_and_markers(tmp_path):
    md = "\n".join([
        "# t", "```python", "a = 1", "```",  # runs
        "```python gpu", "b = 2", "```",
        "```python norun", "c(", "```",
        "```python no-run", "d = 4", "```",  # a typo fails
        "```py", "e = 5", "```",
        "~~~ Python3", "f = 6", "~~~",
        "```{python}", "g = 7", "```",
        "```console", "$ gtsamples demo", "```",  # not Python: ignored
        "````markdown", "```python", "h = 8", "```", "````",  # a fence inside a longer fence is text
        "  ```python", "  i = 9", "   j = 10", "  ```",  # indented: the indent is removed
        "```", "plain", "```",
        "```python", "k = 11",  # never closed
    ])
    got = [(b.line, b.kind, b.code) for b in parse_blocks(tmp_path / "x.md", md)]
    assert got[:3] == [(3, "run", "a = 1\n"), (6, "gpu", "b = 2\n"), (9, "norun", "c(\n")]
    assert [g[:2] for g in got[3:7]] == [(12, "bad"), (15, "bad"), (18, "bad"), (21, "bad")]
    assert got[7] == (32, "run", "i = 9\n j = 10\n")
    assert got[8][:2] == (39, "bad") and len(got) == 9
    assert classify("python no-run")[1].startswith("unknown marker(s) 'no-run'")
    assert classify("python gpu norun")[0] == "bad"
    assert classify("pycon")[1] == "info string 'pycon': write ```python (or ```python gpu / ```python norun)"
    assert classify("python3")[0] == "bad" and classify("ipython")[0] == "bad"
    assert classify("pyproject")[0] is None and classify("text")[0] is None


def test_substitutions_and_the_path_guard(tmp_path):
    code = 'r = open_region("/data/store", 1)\nc = Client(n_workers=8)\nd = Client()\nx = "/data"\n'
    got = substitute(code, tmp_path)
    assert got.count("\n") == code.count("\n")
    assert f'open_region("{tmp_path}/data/store", 1)' in got
    assert got.count(SMALL_CLIENT) == 2
    with pytest.raises(AssertionError, match="the absolute path '/data' is outside"):
        check_paths(got, tmp_path, "x.md:1")
    check_paths(substitute('p = "/data/ssts/a.parquet"\n', tmp_path), tmp_path, "x.md:1")
    with pytest.raises(AssertionError, match="'/etc/passwd' is outside"):
        check_paths('open("/etc/passwd")\n', tmp_path, "x.md:1")


def test_a_failing_block_fails_its_test_and_the_later_ones(tmp_path, monkeypatch):
    md = "```python\nx = 1\n```\n```python\nraise KeyError('boom')\n```\n```python\ny = x + 1\n```\n"
    p = ROOT / "docs" / "_harness_check.md"  # never written: only the path names the blocks
    blocks = parse_blocks(p, md)
    monkeypatch.setitem(globals(), "BLOCKS", blocks)
    s = Session(p, tmp_path)
    with pytest.raises(KeyError, match="boom"):
        s.run_through(blocks[1])
    with pytest.raises(AssertionError, match=r"docs/_harness_check.md:5 failed: KeyError: 'boom'"):
        s.run_through(blocks[2])
    assert s.ns["x"] == 1 and "y" not in s.ns


def test_tracebacks_point_at_the_markdown_line(tmp_path, monkeypatch):
    md = "text\n\n```python\nok = 1\n\nundefined_name\n```\n"
    p = ROOT / "docs" / "_harness_check.md"
    blocks = parse_blocks(p, md)
    monkeypatch.setitem(globals(), "BLOCKS", blocks)
    with pytest.raises(NameError) as e:
        Session(p, tmp_path).run_through(blocks[0])
    tb = [f for f in e.traceback if str(f.path) == str(p)]
    assert tb and tb[-1].lineno + 1 == 6  # pytest's lineno is 0-based


def test_the_readme_command_synopses_match_the_parser():
    """Every option a ``gtsamples ...`` synopsis line of the README names exists on that command."""
    from gtsamples.cli import build_parser

    def subparsers(p):
        return next(a for a in p._actions if a.__class__.__name__ == "_SubParsersAction").choices

    top = subparsers(build_parser())
    seen = 0
    for _, info, code in fenced((ROOT / "README.md").read_text(encoding="utf-8")):
        if info.strip() or code is None:
            continue
        options = None
        for ln in code.splitlines():
            text = ln.split("#")[0]
            words = text.split()
            if len(words) >= 2 and words[0] == "gtsamples":
                p = top[words[1]]
                if words[1] == "region":
                    p = subparsers(p)[words[2]]
                options = {o for a in p._actions for o in a.option_strings}
                seen += 1
            elif not (ln[:1].isspace() and options):  # an indented line continues the synopsis above
                options = None
                continue
            named = set(re.findall(r"(--[a-z][a-z-]*|-[a-z])\b", text))
            assert named <= options, (ln, sorted(named - options))
    assert seen >= 9


def test_docs_markdown_is_collected_at_any_depth(tmp_path, monkeypatch):
    (tmp_path / "docs" / "deep").mkdir(parents=True)
    for name in ("README.md", "docs/gpu.md", "docs/deep/format.md", "docs/notes.txt"):
        (tmp_path / name).write_text("```python\nx = 1\n```\n")
    monkeypatch.setitem(globals(), "ROOT", tmp_path)
    assert [p.relative_to(tmp_path).as_posix() for p in doc_files()] == \
        ["README.md", "docs/deep/format.md", "docs/gpu.md"]
