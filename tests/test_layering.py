"""The package's rooms import one way (../shared/DESIGN.md, Layout): a room imports only lower layers and itself.

The layers are DESIGN's: ``core`` L0; ``data``, ``align``, ``screens``, ``looks``, ``model``, ``monitor`` L1; ``engine``,
``export``, ``station`` L2; ``inspect`` L3; ``jobs`` L4; ``cli`` L5. Within L1, where one room needs another, DESIGN asks
to declare the order with the reason: :data:`WITHIN` is that declaration, and nothing else at one layer may import.

Every import is read from the AST, function-level and ``TYPE_CHECKING`` imports included, so a lazy import
inside a function cannot hide an upward dependency.
"""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "defect_detector"
NAME = "defect_detector"
LAYERS = {
    "core": 0,
    "data": 1,
    "align": 1,
    "screens": 1,
    "looks": 1,
    "model": 1,
    "monitor": 1,
    "engine": 2,
    "export": 2,
    "station": 2,
    "inspect": 3,
    "jobs": 4,
    "cli": 5,
}
"""DESIGN's layers. The package root (``defect_detector/__init__.py``: the lazy ``Inspector`` export) stands above every
room."""

WITHIN = {
    ("data", "align"): "the dataset registers a training pair's golden image with the one registration the runtime uses "
    "(DESIGN, Reference inspection: 'the dataset, val, calibrate and the runtime all call it'), and the line captures fit "
    "its levels as the frame path does",
    ("data", "looks"): "training data covers the line's looks (DESIGN, Looks): the augmentation renders a board in a "
    "photographic look and paints defects, and the photograph sets are built from the looks",
}
"""The declared order within L1, ``(importer, imported)``: the reason each is allowed. ``align``, ``looks``,
``screens``, ``model`` and ``monitor`` import only ``core``."""


def _room(module: str) -> str | None:
    """The room of a dotted module name of this package (None for the package root or another package)."""
    parts = module.split(".")
    if parts[0] != NAME:
        return None
    return parts[1] if len(parts) > 1 else None


def _imports(path: Path) -> list[tuple[int, str]]:
    """``(line, imported module)`` for every import in ``path``; ``from defect_detector import x`` counts as ``defect_detector.x``."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                raise AssertionError(f"{path}:{node.lineno}: relative import; write the absolute module path")
            if node.module == NAME:
                found += [(node.lineno, f"{NAME}.{alias.name}") for alias in node.names]
            elif node.module:
                found.append((node.lineno, node.module))
    return found


def _violations(layers: dict[str, int], within: dict[tuple[str, str], str] = WITHIN) -> list[str]:
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE)
        if len(relative.parts) == 1:  # the package root's modules: __init__.py stands above every room
            assert relative.name == "__init__.py", f"{relative}: a module outside the rooms; move it into one"
            continue
        room = relative.parts[0]
        assert room in layers, f"{relative}: room {room!r} has no layer in the test's table"
        for line, module in _imports(path):
            target = _room(module)
            if target is None or target == room:
                if module == NAME:
                    out.append(f"{relative}:{line}: imports the package root")
                continue
            if target not in layers:
                out.append(f"{relative}:{line}: imports {module}, outside every room")
            elif layers[target] > layers[room] or (layers[target] == layers[room] and (room, target) not in within):
                out.append(f"{relative}:{line}: {room} (layer {layers[room]}) imports {module} (layer {layers[target]})")
    return out


def test_rooms_import_only_lower_layers() -> None:
    assert _violations(LAYERS) == []


def test_the_check_catches_an_upward_import() -> None:
    """Moving ``inspect`` below ``export`` must make the (real) imports of ``inspect`` from ``export`` violations."""
    assert any(" inspect (layer 1) imports defect_detector.export" in v for v in _violations({**LAYERS, "inspect": 1}))


def test_the_check_catches_an_undeclared_import_within_a_layer() -> None:
    """Without its declaration, the dataset's (real) import of the registration is a violation at one layer."""
    undeclared = {k: v for k, v in WITHIN.items() if k != ("data", "align")}
    assert any(" data (layer 1) imports defect_detector.align" in v for v in _violations(LAYERS, undeclared))


def test_the_declared_order_within_a_layer_has_no_circle() -> None:
    graph: dict[str, set[str]] = {}
    for room, target in WITHIN:
        assert LAYERS[room] == LAYERS[target], f"{room} -> {target}: not one layer; no declaration needed"
        graph.setdefault(room, set()).add(target)
    graphlib.TopologicalSorter(graph).prepare()


@pytest.mark.parametrize("room", ["core", "data"])
def test_room_init_has_no_side_effects(room: str) -> None:
    """``core/__init__`` and ``data/__init__`` hold only their docstring: importing one module never loads the room."""
    body = ast.parse((PACKAGE / room / "__init__.py").read_text(encoding="utf-8")).body
    assert all(isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) for node in body)


def _module_graph() -> dict[str, set[str]]:
    """Each module of the package -> the package modules it imports (any import, function-level included)."""
    names = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        names[path] = ".".join((NAME, *parts)).removesuffix(".__init__")
    known = set(names.values())
    graph = {}
    for path, name in names.items():
        targets = {m for _, m in _imports(path)} | {m.rpartition(".")[0] for _, m in _imports(path)}
        graph[name] = {t for t in targets if t in known and t != name and not name.startswith(f"{t}.")}
    return graph


def test_no_module_imports_itself_through_others() -> None:
    """Issue 43: no circle of imports between modules (``register`` <-> ``register_fit`` and ``station.schema`` <->
    ``migrations`` were two): the modules can be read bottom-up."""
    graphlib.TopologicalSorter(_module_graph()).prepare()  # CycleError names the circle
