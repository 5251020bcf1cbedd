"""The layout's limits stay true: small modules, short functions, each knob named in few files.

Sizes are measured on formatted code: every `# fmt: skip` (and `fmt: off`/`on`) is stripped and
the package formatted by ruff first, so packing lines past the formatter cannot meet a limit.
"""

from __future__ import annotations

import ast
import io
import re
import shutil
import subprocess
import sys
import tokenize
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "tuner"
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 80
# Issue 20's bar: the marker is kept only on genuine data tables.
MAX_FMT_SKIP_LINES = 40
# The registry, the validity rule, the perf model, the engine and the exporter table: every
# other layer reads the knob by name from the registry (ARCHITECTURE.md, "A new knob").
MAX_KV_DTYPE_FILES = 5
_FMT_DIRECTIVE = re.compile(r"#\s*fmt:\s*(?:skip|off|on)\b\s*")


def _modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def strip_fmt_markers(source: str) -> str:
    """The source with every formatter directive comment removed (other comments kept)."""
    lines = source.splitlines(keepends=True)
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    # Bottom-up, so earlier (row, col) positions stay valid while lines are cut.
    comments = [t for t in tokens if t.type == tokenize.COMMENT and _FMT_DIRECTIVE.search(t.string)]
    for tok in reversed(comments):
        row, col = tok.start
        line = lines[row - 1]
        kept = _FMT_DIRECTIVE.sub("", tok.string).strip()
        head = line[:col].rstrip()
        tail = "" if kept in ("", "#") else f"  {kept if kept.startswith('#') else '# ' + kept}"
        lines[row - 1] = f"{head}{tail}{line[tok.end[1] :]}"
    return "".join(lines)


def _ruff_format(*args: str, stdin: str | None = None) -> str:
    """Run the project's ruff formatter with the project's settings; its stdout."""
    if shutil.which("ruff", path=str(Path(sys.executable).parent)) is None:
        pytest.fail("ruff is not installed next to this Python (pip install '.[dev]')")
    cmd = [sys.executable, "-m", "ruff", "format", "--config", str(ROOT / "pyproject.toml")]
    proc = subprocess.run([*cmd, *args], input=stdin, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def format_source(source: str) -> str:
    """One module's text as it reads once markers are stripped and ruff has formatted it."""
    return _ruff_format("--stdin-filename", "module.py", "-", stdin=strip_fmt_markers(source))


@pytest.fixture(scope="module")
def formatted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Every module of the package, path -> formatted text, from one ruff run over a copy."""
    copy = tmp_path_factory.mktemp("formatted") / "tuner"
    targets = []
    for path in _modules():
        target = copy / path.relative_to(PACKAGE)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(strip_fmt_markers(path.read_text()))
        targets.append(str(target))
    # Named one by one: ruff applies its exclusions only to files it finds in folders.
    _ruff_format("--quiet", *targets)
    return {str(p.relative_to(copy)): p.read_text() for p in sorted(copy.rglob("*.py"))}


def long_functions(source: str) -> dict[str, int]:
    """`name@line: lines` of every function, method or nested function over the limit."""
    found = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            lines = (node.end_lineno or node.lineno) - node.lineno + 1
            if lines > MAX_FUNCTION_LINES:
                found[f"{node.name}@{node.lineno}"] = lines
    return found


def test_no_module_is_over_400_lines_formatted(formatted: dict[str, str]) -> None:
    sizes = {name: len(text.splitlines()) for name, text in formatted.items()}
    long = {name: n for name, n in sizes.items() if n > MAX_MODULE_LINES}
    assert not long, f"modules over {MAX_MODULE_LINES} lines once formatted: {long}"


def test_no_function_is_over_80_lines_formatted(formatted: dict[str, str]) -> None:
    long = {
        f"{name}:{func}": n
        for name, text in formatted.items()
        for func, n in long_functions(text).items()
    }
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines once formatted: {long}"


def test_fmt_skip_is_kept_for_data_tables_only() -> None:
    marked = {
        str(p.relative_to(PACKAGE)): n
        for p in _modules()
        if (n := sum("fmt: skip" in line for line in p.read_text().splitlines()))
    }
    total = sum(marked.values())
    assert total < MAX_FMT_SKIP_LINES, f"{total} lines carry `# fmt: skip`: {marked}"


def test_the_formatted_measure_catches_a_packed_function() -> None:
    items = ", ".join(f'"item-{i}-of-a-long-list"' for i in range(MAX_FUNCTION_LINES))
    packed = f"def f():\n    return [{items}]  # fmt: skip\n"
    assert long_functions(packed) == {}
    assert set(long_functions(format_source(packed))) == {"f@1"}


def test_stripping_keeps_other_comments_and_strings() -> None:
    source = 'x = [1,  2]  # noqa: E501  # fmt: skip\ny = "# fmt: skip"  # fmt: skip  # why\n'
    assert strip_fmt_markers(source) == 'x = [1,  2]  # noqa: E501\ny = "# fmt: skip"  # why\n'


def test_the_function_check_sees_methods_and_nested_async_functions() -> None:
    body = "".join(f"            x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES))
    source = f"class A:\n    def f(self):\n        async def g():\n{body}        return g\n"
    assert set(long_functions(source)) == {"f@2", "g@3"}
    assert long_functions(source.replace(f"x{MAX_FUNCTION_LINES - 1} = ", "# ")) == {"f@2": 83}


def test_the_kv_dtype_knob_is_named_in_at_most_five_files() -> None:
    files = sorted(str(p.relative_to(PACKAGE)) for p in _modules() if "kv_dtype" in p.read_text())
    assert len(files) <= MAX_KV_DTYPE_FILES, files
