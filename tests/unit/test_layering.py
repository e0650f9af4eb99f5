"""The parts of ``proxy/`` stay on their floors, read from the import statements of every
module (its whole syntax tree: imports inside functions and under ``TYPE_CHECKING`` count).

- the router and the gateway import nothing of the simulator (step costs come from
  ``proxy.stepcost``, the embedded fleet is composed by the command line);
- the simulator imports nothing of the gateway, only the step-cost model beside it;
- shadow verification reaches the fleet through its seam, not the ``Fleet`` class;
- the policy schema imports nothing of the parts that read it;
- ``proxy`` never imports ``loadtests`` (``specroute bench`` finds it by name, lazily);
- no import loop, of two modules or more.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

PROXY = Path(__file__).resolve().parents[2] / "proxy"

Graph = dict[str, set[str]]

# (importer, imported): no module under the first imports one under the second.
FORBIDDEN = (
    ("proxy.routing", "proxy.sim"),
    ("proxy.gateway", "proxy.sim"),
    ("proxy.verify", "proxy.routing.fleet"),
    ("proxy.policy", "proxy.routing"),
    ("proxy.policy", "proxy.gateway"),
    ("proxy.policy", "proxy.verify"),
    ("proxy", "loadtests"),
)
# Packages that may import, of proxy, only themselves and the packages listed.
SELF_CONTAINED = {
    "proxy.stepcost": (),
    "proxy.sim": ("proxy.stepcost",),
}


def _under(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _modules(root: Path, package: str) -> dict[str, tuple[Path, bool]]:
    """Every module of the package under ``root`` by dotted name, and whether it is a
    package's ``__init__``."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = [package, *path.relative_to(root).with_suffix("").parts]
        is_init = parts[-1] == "__init__"
        found[".".join(parts[:-1] if is_init else parts)] = (path, is_init)
    return found


def _imports(module: str, path: Path, is_init: bool, known: set[str]) -> Iterator[str]:
    """What ``module`` imports, as dotted names: ``from pkg import sub`` names the
    submodule when there is one, else the package."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                here = module.split(".") if is_init else module.split(".")[:-1]
                here = here[: len(here) - node.level + 1]
                base = ".".join([*here, base] if base else here)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                yield sub if sub in known else base


def import_graph(root: Path, package: str) -> tuple[Graph, Graph]:
    """Each module's imports: of this package only, and all of them."""
    modules = _modules(root, package)
    known = set(modules)
    inner: Graph = {}
    every: Graph = {}
    for name, (path, is_init) in modules.items():
        every[name] = set(_imports(name, path, is_init, known)) - {name}
        inner[name] = every[name] & known
    return inner, every


def imported_names(root: Path, package: str, module: str) -> set[str]:
    """The names taken by ``from ... import`` anywhere in ``module``."""
    path, _ = _modules(root, package)[module]
    return {
        alias.name
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }


def loops(graph: Graph) -> list[list[str]]:
    """The import loops: strongly connected groups of two modules or more (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


@pytest.fixture(scope="module")
def graphs() -> tuple[Graph, Graph]:
    return import_graph(PROXY, "proxy")


def test_no_part_imports_a_floor_it_must_not(graphs: tuple[Graph, Graph]) -> None:
    _, every = graphs
    broken = sorted(
        f"{module} imports {target}"
        for module, targets in every.items()
        for importer, banned in FORBIDDEN
        if _under(module, importer)
        for target in targets
        if _under(target, banned)
    )
    assert broken == []


def test_the_simulator_and_the_step_cost_model_stand_alone(graphs: tuple[Graph, Graph]) -> None:
    inner, _ = graphs
    broken = sorted(
        f"{module} imports {target}"
        for package, allowed in SELF_CONTAINED.items()
        for module, targets in inner.items()
        if _under(module, package)
        for target in targets
        if not any(_under(target, ok) for ok in (package, *allowed))
    )
    assert broken == []


def test_shadow_verification_does_not_take_the_fleet_class(graphs: tuple[Graph, Graph]) -> None:
    inner, _ = graphs
    verify = [module for module in inner if _under(module, "proxy.verify")]
    assert verify  # the rule reads something
    assert [m for m in verify if "Fleet" in imported_names(PROXY, "proxy", m)] == []


def test_no_import_loops(graphs: tuple[Graph, Graph]) -> None:
    inner, _ = graphs
    assert len(inner) > 100  # the walk found the package
    assert loops(inner) == []


def test_the_walk_sees_loops_through_function_and_type_checking_imports(
    tmp_path: Path,
) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from pkg.sub import b\n")
    (pkg / "sub" / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..a import f\n"
    )
    (pkg / "c.py").write_text("from pkg import a\nimport loadtests.x\n")
    inner, every = import_graph(pkg, "pkg")
    assert inner["pkg.a"] == {"pkg.sub.b"} and inner["pkg.sub.b"] == {"pkg.a"}
    assert loops(inner) == [["pkg.a", "pkg.sub.b"]]
    assert "loadtests.x" in every["pkg.c"] and inner["pkg.c"] == {"pkg.a"}
    assert imported_names(pkg, "pkg", "pkg.sub.b") == {"TYPE_CHECKING", "f"}
