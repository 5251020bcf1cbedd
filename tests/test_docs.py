"""The docs: relative links resolve, generated pages are current, every page is reachable."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
sys.path.insert(0, str(ROOT / "benchmarks"))

import accuracy_docs  # noqa: E402
from silicon import SiliconResult  # noqa: E402

from tuner.perf.bands import QuantityError, ValidationBands  # noqa: E402

LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
INLINE_CODE = re.compile(r"`[^`\n]*`")


def _load_script(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _pages() -> list[Path]:
    return [ROOT / "README.md", ROOT / "ARCHITECTURE.md", *sorted(DOCS.rglob("*.md"))]


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text())
    return {_slug(m) for m in re.findall(r"^#+ (.+)$", text, re.M)}


def broken_links(page: Path) -> list[str]:
    """Relative links of `page` whose file (or heading anchor) does not exist."""
    text = INLINE_CODE.sub("", FENCE.sub("", page.read_text()))
    broken = []
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):
            continue  # http(s), mailto: not ours to check offline
        path_part, _, anchor = target.partition("#")
        dest = (page.parent / path_part).resolve() if path_part else page
        if not dest.exists() or anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            broken.append(target)
    return broken


def test_every_relative_link_in_the_readme_architecture_and_docs_resolves() -> None:
    bad = {str(p.relative_to(ROOT)): b for p in _pages() if (b := broken_links(p))}
    assert bad == {}


def test_the_link_check_catches_a_missing_file_and_a_missing_anchor(tmp_path: Path) -> None:
    (tmp_path / "b.md").write_text("# Real heading\n")
    page = tmp_path / "a.md"
    page.write_text(
        "[ok](b.md#real-heading) [gone](c.md) [no anchor](b.md#nope) [web](https://x.org)\n"
        "`[in code](nowhere.md)`\n```\n[fenced](nowhere.md)\n```\n"
    )
    assert broken_links(page) == ["c.md", "b.md#nope"]


def _importable(dotted: str) -> bool:
    """A module, or an attribute of one, by its dotted name."""
    try:
        importlib.import_module(dotted)
        return True
    except ModuleNotFoundError:
        module, _, attr = dotted.rpartition(".")
        return (
            bool(module) and _importable(module) and hasattr(importlib.import_module(module), attr)
        )


def test_every_repository_path_and_module_the_docs_name_exists() -> None:
    """Code moves; the docs must follow (a `tuner/...` path or `tuner.x.y` name in backticks)."""
    text = "\n".join(p.read_text() for p in _pages())
    paths = set(re.findall(r"`((?:tuner|benchmarks|scripts|tests)/[\w/.-]*[\w/])`", text))
    missing = sorted(p for p in paths if not (ROOT / p).exists())
    for dotted in sorted(set(re.findall(r"`(tuner(?:\.\w+)+)`", text))):
        if not _importable(dotted):
            missing.append(dotted)
    assert missing == []


def test_every_docs_page_is_linked_from_the_readme_or_the_docs_index() -> None:
    linked = set()
    for page in (ROOT / "README.md", DOCS / "README.md"):
        for target in LINK.findall(page.read_text()):
            linked.add((page.parent / target.partition("#")[0]).resolve())
    orphans = [p.relative_to(ROOT) for p in DOCS.rglob("*.md") if p.resolve() not in linked]
    assert orphans == []


def test_docs_cli_md_is_generated_from_the_current_cli() -> None:
    cli_reference = _load_script(ROOT / "scripts" / "cli_reference.py")
    current = (DOCS / "cli.md").read_text()
    assert current == cli_reference.render(), (
        "docs/cli.md is stale: python scripts/cli_reference.py"
    )


def test_the_cli_reference_covers_every_command_and_option() -> None:
    import typer.main

    from tuner.cli import app

    cli_reference = _load_script(ROOT / "scripts" / "cli_reference.py")
    text = cli_reference.render()
    group = typer.main.get_command(app)
    for name, command in group.commands.items():  # type: ignore[attr-defined]
        assert f"\n## tuner {name}\n" in text
        for param in command.params:
            if param.param_type_name == "option" and not param.hidden:
                assert f"`{param.opts[0]}" in text, (name, param.opts)


def test_a_cli_reference_row_splits_type_range_default_and_help() -> None:
    cli_reference = _load_script(ROOT / "scripts" / "cli_reference.py")
    row = cli_reference._option_row(
        "--num-gpus <int range>", "GPUs [default: 8; local]  [default: 8; x>=1]"
    )
    assert row == "| `--num-gpus` | int range (x>=1) | `8` | GPUs [default: 8; local] |"
    assert cli_reference._option_row("--url <str>", "Base URL  [required]") == (
        "| `--url` | str | `required` | Base URL |"
    )
    assert (
        cli_reference._option_row("--json", "As JSON | raw")
        == "| `--json` | flag |  | As JSON \\| raw |"
    )


def test_the_cli_reference_check_mode_flags_a_stale_file(tmp_path: Path) -> None:
    cli_reference = _load_script(ROOT / "scripts" / "cli_reference.py")
    stale = tmp_path / "cli.md"
    stale.write_text("# old\n")
    assert cli_reference.main(["--out", str(stale), "--check"]) == 1
    assert cli_reference.main(["--out", str(stale)]) == 0
    assert cli_reference.main(["--out", str(stale), "--check"]) == 0


def _result(row: str, engine: str, ttft: float, tpot: float | None) -> SiliconResult:
    if tpot is None:
        return SiliconResult(row, engine, 100.0, 10.0, skipped="unsupported layout")
    return SiliconResult(row, engine, 100.0, 10.0, predicted_ttft_ms=ttft, predicted_tpot_ms=tpot)


def test_the_accuracy_page_renders_every_block_and_the_bands() -> None:
    results = [_result("a", "vllm", 80.0, 11.0), _result("b", "vllm", 0.0, None)]
    stats = {"ttft_median_abs_pct": 20.0, "tpot_median_abs_pct": 10.0}
    summary = {
        "all": {"rows": 1, **stats, "ttft_median_signed_pct": -20.0, "tpot_median_signed_pct": 10.0}
    }
    block = accuracy_docs.Block("Silicon", "A note.", results, summary)
    err = QuantityError(median_abs_rel_error=0.1, p90_abs_rel_error=0.3, rows=7, basis="rows")
    bands = ValidationBands(command="x", generated_at="2026-01-01", quantities={"ttft": err})
    page = accuracy_docs.render({"ttft_ms": (9.0, 4)}, [block], bands, "2026-01-02")
    assert "on 2026-01-02" in page
    assert "| `ttft_ms` (fewer than 5 rows) | 4 | 9.0% |" in page
    assert "## Silicon\n\nA note.\n" in page
    assert "| **all** | 1 | 20.0% | 10.0% | -20.0% | +10.0% |" in page
    assert "- skipped 1: unsupported layout" in page
    assert "| ttft | 30.0% | 10.0% | 7 | rows |" in page


def test_the_readme_keeps_the_worked_example_and_the_test_tiers() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "tuner tune --model llama-3.1-8b --gpu h200-sxm --sla chat --trials 30" in readme
    assert "recommended: trial" in readme  # the pasted output, not only the command
    for tier in ("pytest -m unit", 'pytest -m "not slow"', ".venv/bin/python -m pytest -q"):
        assert tier in readme


@pytest.mark.slow
def test_docs_accuracy_md_is_what_the_benchmark_writes_today(tmp_path: Path) -> None:
    out = tmp_path / "accuracy.md"
    subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "accuracy.py"), "--write-docs", str(out)],
        check=True,
        capture_output=True,
    )

    def undated(text: str) -> str:
        return re.sub(r" on \d{4}-\d{2}-\d{2};", ";", text)

    # The disaggregated blocks take 14 minutes to replay on 2 cores (--disagg-jobs): this check
    # regenerates the rest and compares it with the page less those blocks, which must be there.
    page = (DOCS / "accuracy.md").read_text()
    assert "## Disaggregated block (" in page and "## Disaggregated block by GPU" in page
    rest = re.sub(r"\n## Disaggregated block.*?(?=\n## Error bands)", "", page, flags=re.S)
    assert undated(out.read_text()) == undated(rest)
