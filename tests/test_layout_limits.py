"""The layout's limits stay true: small modules, short functions, each knob named in few files."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

PACKAGE = Path(__file__).resolve().parent.parent / "tuner"
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 80
# The registry, the validity rule, the perf model, the engine and the exporter table: every
# other layer reads the knob by name from the registry (ARCHITECTURE.md, "A new knob").
MAX_KV_DTYPE_FILES = 5


def _modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def long_functions(source: str) -> dict[str, int]:
    """`name@line: lines` of every function, method or nested function over the limit."""
    found = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            lines = (node.end_lineno or node.lineno) - node.lineno + 1
            if lines > MAX_FUNCTION_LINES:
                found[f"{node.name}@{node.lineno}"] = lines
    return found


def test_no_module_is_over_400_lines() -> None:
    long = {str(p.relative_to(PACKAGE)): n for p in _modules()
            if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES}  # fmt: skip
    assert not long, f"modules over {MAX_MODULE_LINES} lines: {long}"


def test_no_function_is_over_80_lines() -> None:
    long = {f"{p.relative_to(PACKAGE)}:{name}": n
            for p in _modules() for name, n in long_functions(p.read_text()).items()}  # fmt: skip
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines: {long}"


def test_the_function_check_sees_methods_and_nested_async_functions() -> None:
    body = "".join(f"            x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES))
    source = f"class A:\n    def f(self):\n        async def g():\n{body}        return g\n"
    assert set(long_functions(source)) == {"f@2", "g@3"}
    assert long_functions(source.replace(f"x{MAX_FUNCTION_LINES - 1} = ", "# ")) == {"f@2": 83}


def test_the_kv_dtype_knob_is_named_in_at_most_five_files() -> None:
    files = sorted(str(p.relative_to(PACKAGE)) for p in _modules() if "kv_dtype" in p.read_text())
    assert len(files) <= MAX_KV_DTYPE_FILES, files
