"""No import cycles in the package (docs/DEVELOPING.md, "Import direction").

The graph is read from the source with ``ast`` (nothing is imported, so the test takes well
under a second): every ``import`` and ``from ... import`` of every module, at the top level and
inside functions alike, relative imports resolved against the importing module. A cycle held
open by a function-level import is still a cycle: it only moves the failure from import time to
the first call and hides the dependency from readers.

An edge ``a -> b`` means module ``a`` names module ``b`` (``from pkg import sub`` names the module
``pkg.sub`` when it is one, else ``pkg``). A package's ``__init__`` importing its own modules is
not an edge back from those modules: importing ``pkg.sub`` runs ``pkg/__init__`` first in any
case, so that ordering is Python's, not a dependency of ``sub``. Imports under ``if
TYPE_CHECKING:`` are not edges either: they never run, and type checkers resolve cycles.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "panelpack"
# the repository root is the package (pyproject [tool.setuptools] package-dir); these are not in it
NOT_PACKAGE = {"tests", "benchmarks", "examples", "docs", "data", ".ci", "build", "dist"}


def modules(root: Path, package: str, skip=frozenset()) -> dict[str, Path]:
    """Dotted module name -> file, for every ``.py`` of the package rooted at ``root``."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if rel.parts[0] in skip or any(p.startswith(".") for p in rel.parts):
            continue
        parts = list(rel.with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        # a folder without __init__.py is not a package: nothing in it is a module of ours
        if any(not (root.joinpath(*rel.parts[:i]) / "__init__.py").is_file() for i in range(1, len(rel.parts))):
            continue
        out[".".join([package, *parts])] = path
    return out


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _type_checking(test: ast.expr) -> bool:
    """``TYPE_CHECKING`` or ``typing.TYPE_CHECKING``: a block only type checkers read."""
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def imported(module: str, path: Path, known: set[str]) -> set[str]:
    """The package's modules that ``module`` (at ``path``) names anywhere in its source."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    is_package = path.name == "__init__.py"
    out: set[str] = set()

    def add(name: str) -> None:
        # the longest prefix that is one of our modules (``import a.b.c`` names a.b.c)
        while name and name not in known:
            name = name.rpartition(".")[0]
        if name and name != module:
            out.add(name)

    def walk(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _type_checking(child.test):
                for other in child.orelse:  # the ``else`` of ``if TYPE_CHECKING`` does run
                    walk(other)
                continue
            if isinstance(child, ast.Import):
                for alias in child.names:
                    add(alias.name)
            elif isinstance(child, ast.ImportFrom):
                base = _resolve(module, is_package, child)
                for alias in child.names:
                    sub = f"{base}.{alias.name}"
                    add(sub if sub in known else base)
            walk(child)

    walk(tree)
    return out


def graph(root: Path, package: str, skip=frozenset()) -> dict[str, set[str]]:
    mods = modules(root, package, skip)
    known = set(mods)
    g = {m: imported(m, p, known) for m, p in mods.items()}
    for m, deps in g.items():
        # pkg/__init__ importing pkg.sub is not a dependency of pkg.sub on pkg (see the docstring)
        deps.difference_update({d for d in deps if m.startswith(d + ".")})
    return g


def components(g: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of more than one module (each holds a cycle)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    comps: list[set[str]] = []
    counter = 0
    for start in sorted(g):  # iterative Tarjan: no recursion limit on a deep package
        if start in index:
            continue
        work = [(start, iter(sorted(g[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in g:
                    continue
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(g[w]))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = set()
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.add(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        comps.append(comp)
    return sorted(comps, key=min)


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """One shortest cycle through each strongly connected component of more than one module."""
    out = []
    for comp in components(g):
        first = min(comp)
        # breadth-first from `first` back to itself inside the component: the shortest cycle
        prev: dict[str, str] = {}
        frontier = [first]
        found = None
        while frontier and found is None:
            nxt = []
            for v in frontier:
                for w in sorted(g[v] & comp):
                    if w == first:
                        found = v
                        break
                    if w not in prev:
                        prev[w] = v
                        nxt.append(w)
                if found is not None:
                    break
            frontier = nxt
        path = [found]
        while path[-1] != first:
            path.append(prev[path[-1]])
        out.append(path[::-1] + [first])
    return sorted(out)


def _describe(g: dict[str, set[str]]) -> str:
    lines = []
    for comp, cycle in zip(components(g), cycles(g)):
        lines.append(" -> ".join(cycle))
        if len(comp) > len(cycle) - 1:
            lines.append(f"    (and the rest of its knot: {', '.join(sorted(comp - set(cycle)))})")
    return "\n".join(lines)


def test_package_has_no_import_cycles():
    g = graph(PACKAGE_ROOT, PACKAGE, NOT_PACKAGE)
    assert len(g) > 100, f"only {len(g)} modules found under {PACKAGE_ROOT}: the walk is broken"
    # the walk sees relative imports, and imports inside functions (bundle_check hands a cactus
    # folder to cq_check from inside verify()): a reader that saw neither would find no cycle
    assert "panelpack.formats.qtypes" in g["panelpack.formats.blocks"], sorted(g["panelpack.formats.blocks"])
    assert "panelpack.verify.cq_check" in g["panelpack.verify.bundle_check"], sorted(g["panelpack.verify.bundle_check"])
    assert not components(g), ("import cycles (break each by moving the piece both sides need into its own "
                               "module):\n" + _describe(g))


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)


def test_a_cycle_through_a_function_level_relative_import_is_caught(tmp_path):
    _write(tmp_path, {
        "__init__.py": "",
        "low/__init__.py": "from . import a\n",
        "low/b.py": "def helper():\n    from . import a  # held open by the late import\n    return a\n",
        "high/__init__.py": "",
        "high/c.py": "from ..low import b\nimport pkg.low.a\n",
        # only for type checkers: no edge back (else high.c <-> low.a would be a second cycle)
        "low/a.py": ("from typing import TYPE_CHECKING\nfrom .b import helper\n"
                     "if TYPE_CHECKING:\n    from ..high import c\nelse:\n    import json\n"),
        "tests/test_x.py": "import pkg.high.c\n",
    })
    g = graph(tmp_path, "pkg", {"tests"})
    assert set(g) == {"pkg", "pkg.low", "pkg.low.a", "pkg.low.b", "pkg.high", "pkg.high.c"}
    assert g["pkg.high.c"] == {"pkg.low.b", "pkg.low.a"}
    assert g["pkg.low"] == {"pkg.low.a"}
    assert g["pkg.low.a"] == {"pkg.low.b"}
    assert cycles(g) == [["pkg.low.a", "pkg.low.b", "pkg.low.a"]]
    assert _describe(g) == "pkg.low.a -> pkg.low.b -> pkg.low.a"


def test_no_cycle_no_report_and_a_longer_cycle_named_in_full(tmp_path):
    _write(tmp_path, {
        "__init__.py": "from .m1 import x\n",
        "m1.py": "from .m2 import y\nx = 1\n",
        "m2.py": "import pkg.m3\ny = 2\n",
        "m3.py": "import os\n",
    })
    assert cycles(graph(tmp_path, "pkg")) == []
    (tmp_path / "m3.py").write_text("def late():\n    from pkg import m1\n")
    g = graph(tmp_path, "pkg")
    assert cycles(g) == [["pkg.m1", "pkg.m2", "pkg.m3", "pkg.m1"]]
    # a second way round the same knot: one shortest cycle is named, the other module listed
    _write(tmp_path, {"m4.py": "from . import m1\n", "m2.py": "import pkg.m3\nimport pkg.m4\ny = 2\n"})
    g = graph(tmp_path, "pkg")
    assert components(g) == [{"pkg.m1", "pkg.m2", "pkg.m3", "pkg.m4"}]
    assert _describe(g) == "pkg.m1 -> pkg.m2 -> pkg.m3 -> pkg.m1\n    (and the rest of its knot: pkg.m4)"
