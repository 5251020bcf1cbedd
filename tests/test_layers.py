"""tuner's packages stand on floors: each imports only from its own floor or below, and no two
packages import each other, through any chain (module-level and function-level imports alike).

The order is ARCHITECTURE.md's "Floors"; a new top-level module or package must be placed here.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

TUNER = Path(__file__).resolve().parents[1] / "tuner"

# Bottom to top. A unit is a top-level module or package of tuner ("tuner" is tuner/__init__.py).
FLOORS: tuple[tuple[str, ...], ...] = (
    # nouns and pure helpers
    (
        "tuner",
        "errors",
        "extras",
        "knobs",
        "model_spec",
        "gpu_profile",
        "metrics",
        "calibration_schema",
        "specs",
        "deployment",
        "sla",
        "yaml_read",
        "result_io",
        "hf_families",
        "hf_config",
        "catalog",
        "prices",
        "real_model",
        "detect_cpu",
        "detect_amd",
        "detect",
    ),
    ("bench",),  # traffic: arrivals, lengths, the HTTP load generator, statistics
    ("validity",),  # the rules
    ("perf",),  # the performance model
    ("request", "run_spec"),  # a predict request, a tune's inputs
    ("export", "engine"),  # translators (config in, engine files out); the reference engine
    ("backends",),  # (config, context) -> Metrics, with the per-trial binding limit
    ("search", "calibrate"),
    ("explain", "answer"),  # the analysed run: picks, exports, explanations, the answer card
    ("report",),
    ("run",),  # the run's writers: the tune loop and its folder
    ("screen", "plan"),
    ("cli", "__main__"),
)
FLOOR = {unit: i for i, units in enumerate(FLOORS) for unit in units}


def _module(path: Path) -> str:
    parts = path.relative_to(TUNER.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _unit(module: str) -> str:
    parts = module.split(".")
    return "tuner" if len(parts) == 1 else parts[1]


def _imports(path: Path) -> Iterator[tuple[str, int]]:
    """Every tuner module `path` imports, anywhere in the file, with its line."""
    module = _module(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from ((a.name, node.lineno) for a in node.names if a.name.startswith("tuner"))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            if base == "tuner" or base.startswith("tuner."):
                # `from tuner import catalog` imports the unit catalog, not tuner itself
                names = [f"{base}.{a.name}" for a in node.names] if base == "tuner" else [base]
                for name in names:
                    real = TUNER.parent / name.replace(".", "/")
                    exists = real.with_suffix(".py").exists() or real.is_dir()
                    yield (name if exists else base), node.lineno


def _edges() -> list[tuple[str, str, str]]:
    """(importing unit, imported unit, where) for every import that crosses units."""
    out = []
    for path in sorted(TUNER.rglob("*.py")):
        src = _unit(_module(path))
        for name, line in _imports(path):
            dst = _unit(name)
            if dst != src:
                out.append((src, dst, f"{path.relative_to(TUNER.parent)}:{line} imports {name}"))
    return out


def test_every_unit_has_a_floor() -> None:
    units = {_unit(_module(p)) for p in TUNER.rglob("*.py")}
    assert sorted(units - set(FLOOR)) == [], "place each new module or package in FLOORS"
    assert sorted(set(FLOOR) - units) == [], "FLOORS names a unit that no longer exists"


def test_no_import_reaches_a_higher_floor() -> None:
    upward = [where for src, dst, where in _edges() if FLOOR[dst] > FLOOR[src]]
    assert upward == []


def test_no_circle_between_units() -> None:
    graph: dict[str, set[str]] = {}
    for src, dst, _ in _edges():
        graph.setdefault(src, set()).add(dst)
    circles = []
    for start in sorted(graph):
        # depth-first from `start`: reaching `start` again is a circle through it
        stack, seen = [(start, [start])], set()
        while stack:
            node, trail = stack.pop()
            for nxt in sorted(graph.get(node, ())):
                if nxt == start:
                    circles.append(" -> ".join([*trail, start]))
                elif nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, [*trail, nxt]))
    assert circles == []


def test_the_walk_sees_function_level_imports() -> None:
    # backends imports its modules by name at run time; a function-level import is still seen:
    # the reference engine's acceptance imports the catalog inside a function.
    found = list(_imports(TUNER / "engine" / "acceptance.py"))
    assert ("tuner.catalog", 164) in found or any(n == "tuner.catalog" for n, _ in found)
