"""The package's structure rules (docs/architecture.md), checked on the source:

* the layer contract in pyproject.toml ([tool.importlinter]) holds (lint-imports);
* no module of src/gtsamples imports a private name (``_name``) of another, neither
  ``from X import _name`` nor ``X._name`` on an imported module (tests may);
* no module reaches for a private attribute (``obj._name``) that it does not define
  itself: another module's objects are used through their public names;
* no function is longer than MAX_FUNCTION_LINES, except the numba kernels named in
  KERNELS (a kernel is one function on purpose: it compiles to one loop nest).
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
PACKAGE = SRC / "gtsamples"
MAX_FUNCTION_LINES = 120
#: numba kernels allowed over MAX_FUNCTION_LINES: "path relative to src/gtsamples::name"
KERNELS = {"format/pages.py::leaf_page_rules"}


def _modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _resolve(path: Path, node: ast.ImportFrom) -> str | None:
    """The absolute module an ImportFrom reads from (None: outside gtsamples)."""
    if node.level == 0:
        mod = node.module or ""
        return mod if mod == "gtsamples" or mod.startswith("gtsamples.") else None
    package = _module_name(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    base = package[: len(package) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _is_module(name: str) -> bool:
    rel = Path(*name.split("."))
    return (SRC / rel).with_suffix(".py").is_file() or (SRC / rel / "__init__.py").is_file()


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def private_imports(path: Path, text: str | None = None) -> list[str]:
    """``file:line: what`` for each private name ``path`` takes from another module."""
    tree = ast.parse(path.read_text() if text is None else text)
    rel = path.relative_to(SRC)
    found, modules = [], set()  # modules: local names bound to gtsamples modules
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            src = _resolve(path, node)
            if src is None:
                continue
            for a in node.names:
                if _is_module(f"{src}.{a.name}"):
                    modules.add(a.asname or a.name)
                elif _private(a.name):
                    found.append(f"{rel}:{node.lineno}: from {src} import {a.name}")
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("gtsamples"):
                    modules.add(a.asname or a.name.split(".")[0])
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            base = node.value
            while isinstance(base, ast.Attribute):
                base = base.value
            if isinstance(base, ast.Name) and base.id in modules:
                found.append(f"{rel}:{node.lineno}: {ast.unparse(node)}")
    return found


def _defined_names(tree: ast.AST) -> set[str]:
    """The names a module defines: functions, classes, and attributes it assigns."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.attr)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
    return names


def foreign_private_attributes(path: Path, text: str | None = None) -> list[str]:
    """``file:line: what`` for each ``obj._name`` in ``path`` whose ``_name`` the module
    does not define (a private attribute of another module's object)."""
    tree = ast.parse(path.read_text() if text is None else text)
    rel = path.relative_to(SRC)
    own = _defined_names(tree)
    return [f"{rel}:{node.lineno}: {ast.unparse(node)}" for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and _private(node.attr) and node.attr not in own]


def long_functions(path: Path, limit: int = MAX_FUNCTION_LINES) -> list[tuple[str, int, list[str]]]:
    """``(path::name, lines, decorators)`` of each function over ``limit`` lines."""
    rel = path.relative_to(PACKAGE).as_posix()
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            n = node.end_lineno - node.lineno + 1
            if n > limit:
                out.append((f"{rel}::{node.name}", n, [ast.unparse(d) for d in node.decorator_list]))
    return out


def test_the_layer_contract_holds():
    env = dict(os.environ, PYTHONPATH=str(SRC))
    lint = Path(sys.executable).with_name("lint-imports")
    r = subprocess.run([str(lint), "--no-cache"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert "Contracts: 1 kept, 0 broken." in r.stdout, r.stdout[-2000:]


def test_no_private_name_crosses_a_module():
    found = [f for p in _modules() for f in private_imports(p)]
    assert not found, "private names imported across modules:\n" + "\n".join(found)


def test_the_private_import_check_sees_both_forms():
    path = PACKAGE / "decode" / "gpu" / "driver.py"
    code = "from .staging import _per_device\nfrom . import nvcomp as nv\nx = nv._private\nfrom . import staging\n" \
           "y = staging._PER_DEVICE.get\nz = nv.__name__\nfrom .layout import GTS_BLOCK\n"  # fmt: skip
    assert private_imports(path, code) == [
        "gtsamples/decode/gpu/driver.py:1: from gtsamples.decode.gpu.staging import _per_device",
        "gtsamples/decode/gpu/driver.py:3: nv._private",
        "gtsamples/decode/gpu/driver.py:5: staging._PER_DEVICE",
    ]


def test_no_private_attribute_of_another_module_is_used():
    found = [f for p in _modules() for f in foreign_private_attributes(p)]
    assert not found, "private attributes of other modules' objects:\n" + "\n".join(found)


def test_the_private_attribute_check_sees_a_foreign_one():
    path = PACKAGE / "region" / "execute.py"
    code = "class A:\n    def _mine(self):\n        self._x = 1\n\ndef f(region, a):\n" \
           "    a._mine()\n    a._x\n    region._artifact(1)\n    return region.schema.conform\n"  # fmt: skip
    assert foreign_private_attributes(path, code) == ["gtsamples/region/execute.py:8: region._artifact"]


def test_no_function_is_over_the_limit_but_the_numba_kernels():
    long = [f for p in _modules() for f in long_functions(p)]
    over = [f"{name}: {n} lines" for name, n, _ in long if name not in KERNELS]
    assert not over, f"functions over {MAX_FUNCTION_LINES} lines (split them):\n" + "\n".join(over)
    for name, _, decorators in long:  # the allow-list names kernels only
        assert any(d.startswith(("numba.njit", "njit", "numba.jit")) for d in decorators), name
    assert {name for name, _, _ in long} == KERNELS  # no stale entry


def import_cycles(graph) -> list[list[str]]:
    """The strongly connected components of more than one module of ``graph`` (a
    grimp ImportGraph): every import counts, function-level ones too, and a
    package's ``__init__`` is a module of its own."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    for root in sorted(graph.modules):
        if root in index:
            continue
        # iterative Tarjan: (module, its remaining imports)
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph.find_modules_directly_imported_by(w)))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
    return out


def _graph():
    import grimp

    sys.path.insert(0, str(SRC))  # grimp reads the package's files (as lint-imports does)
    try:
        return grimp.build_graph("gtsamples", include_external_packages=False, cache_dir=None)
    finally:
        sys.path.remove(str(SRC))


def test_no_import_cycle_between_modules():
    assert import_cycles(_graph()) == []


def test_the_cycle_check_sees_a_function_level_cycle():
    import grimp

    g = grimp.ImportGraph()
    for m in ("p", "p.a", "p.b", "p.c"):
        g.add_module(m)
    g.add_import(importer="p.a", imported="p.b")
    g.add_import(importer="p.b", imported="p.c")
    assert import_cycles(g) == []
    g.add_import(importer="p.c", imported="p.a")  # e.g. an import inside a function
    assert import_cycles(g) == [["p.a", "p.b", "p.c"]]
    g.add_import(importer="p", imported="p.a")
    g.add_import(importer="p.a", imported="p")  # a package's __init__ counts as a module
    assert import_cycles(g) == [["p", "p.a", "p.b", "p.c"]]
