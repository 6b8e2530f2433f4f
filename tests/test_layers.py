"""The package's layers: imports flow one way, from the public API down to the hardware data, with no circles.

Read from the source with ``ast`` (every import, including those inside functions; imports
under ``if TYPE_CHECKING:`` are for annotations only and do not count).
"""

from __future__ import annotations

import ast
from pathlib import Path

import nkisim

ROOT = Path(nkisim.__file__).parent

#: Highest first. A module may import its own layer and the ones below it.
LAYERS: list[tuple[str, ...]] = [
    ("nkisim", "nkisim.__main__"),
    ("nkisim.compat",),
    ("nkisim.torch", "nkisim.jax", "nkisim.gpsimd", "nkisim.tpc", "nkisim.sweeps", "nkisim.examples"),
    ("nkisim.nki",),
    ("nkisim.frontend",),
    ("nkisim.report",),
    ("nkisim.sim",),
    ("nkisim.isa",),
    ("nkisim.memory",),
    ("nkisim.hw",),
    ("nkisim.errors",),
]


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_module(name: str) -> bool:
    rel = Path(*name.split("."))
    return (ROOT.parent / rel).with_suffix(".py").is_file() or (ROOT.parent / rel / "__init__.py").is_file()


def _layer(module: str) -> int:
    best, depth = -1, -1
    for index, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            matches = module == prefix or (prefix != "nkisim" and module.startswith(prefix + "."))
            if matches and prefix.count(".") > depth:
                best, depth = index, prefix.count(".")
    assert best >= 0, f"{module} is in no layer: add it to LAYERS"
    return best


def _type_checking_only(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    while node in parents:
        node = parents[node]
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            return True
    return False


def _imports(path: Path) -> set[str]:
    """The nkisim modules ``path`` imports."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    package = _module_name(path) if path.name == "__init__.py" else _module_name(path).rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if _type_checking_only(node, parents):
            continue
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.add(sub if _is_module(sub) else base)
    return {name for name in found if name == "nkisim" or name.startswith("nkisim.")}


def _graph() -> dict[str, set[str]]:
    return {_module_name(p): _imports(p) for p in sorted(ROOT.rglob("*.py"))}


def test_every_module_imports_only_its_own_layer_and_below():
    upward = [
        f"{module} (layer {_layer(module)}) imports {target} (layer {_layer(target)})"
        for module, targets in _graph().items()
        for target in sorted(targets)
        if _layer(target) < _layer(module)
    ]
    assert upward == []


def test_no_import_circles():
    graph = _graph()
    circles: list[list[str]] = []
    state: dict[str, int] = {}  # 1: on the current path, 2: finished
    path: list[str] = []

    def visit(module: str) -> None:
        state[module] = 1
        path.append(module)
        for target in sorted(graph.get(module, ())):
            if target == module or (module == "nkisim" and target.startswith("nkisim.")):
                continue
            if state.get(target) == 1:
                circles.append([*path[path.index(target) :], target])
            elif target not in state:
                visit(target)
        path.pop()
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module)
    assert circles == []


def test_the_layer_checker_sees_a_violation():
    # A hand-made case: memory importing the front end is upward, and a ring of two is a circle.
    assert _layer("nkisim.memory.tensor") > _layer("nkisim.frontend.jit")
    assert _layer("nkisim.compat.alias") < _layer("nkisim.nki.language")
    assert _layer("nkisim.errors") == len(LAYERS) - 1
