"""The launch files docs/howto/export.md shows are what the exporters write today.

Each generated block is preceded by one HTML comment naming the file and the variant it comes
from, e.g.

    <!-- exported vllm.sh: model=llama-3.1-8b gpu=h200-sxm sla=chat | quantization=fp8-block -->

(the run's model, GPU and SLA, then the EngineConfig fields off their defaults), which GitHub
does not render. The test exports that variant through `tuner.export.dispatch.export_config`, as
a tune does, and compares. Regenerate with `TUNER_UPDATE_DOCS=1 pytest tests/test_export_docs.py`
and review the diff.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import yaml

from tuner.export.bundle import EngineExport
from tuner.export.dispatch import export_config
from tuner.run_spec import build_run_spec
from tuner.specs import EngineConfig

pytestmark = pytest.mark.unit

DOC = Path(__file__).resolve().parents[1] / "docs" / "howto" / "export.md"
# The marker, then the fenced block right below it (its info string, its body).
BLOCK = re.compile(
    r"^<!-- exported (?P<file>\S+): (?P<run>[^|]*?) \| (?P<config>[^>]*?) -->\n"
    r"```(?P<lang>[^\n]*)\n(?P<body>.*?)^```$",
    re.S | re.M,
)
SHEBANG_BLOCK = re.compile(r"^```[^\n]*\n#!", re.M)


def _pairs(text: str) -> dict[str, object]:
    """`key=value key=value` with YAML scalars as values (false, 354, fp8-block)."""
    pairs = (item.split("=", 1) for item in text.split())
    return {key: yaml.safe_load(value) for key, value in pairs}


def render(match: re.Match[str]) -> str:
    """The file a marker names, exported now for the variant it states."""
    run = _pairs(match["run"])
    spec = build_run_spec(model=str(run["model"]), gpu=str(run["gpu"]), sla=str(run["sla"]))
    config = EngineConfig(**_pairs(match["config"]))  # type: ignore[arg-type]
    exports = export_config(config, spec)
    for exp in exports.values():
        if isinstance(exp, EngineExport) and match["file"] in exp.files:
            return exp.files[match["file"]]
    raise AssertionError(f"no engine writes {match['file']} for {config}: {exports}")


def regenerated(text: str) -> str:
    """The page with every marked block replaced by what the exporters write now."""

    def block(match: re.Match[str]) -> str:
        head = match.group(0)[: match.start("body") - match.start()]
        return f"{head}{render(match)}```"

    return BLOCK.sub(block, text)


def test_every_launch_file_on_the_page_is_marked() -> None:
    text = DOC.read_text()
    marked = len(BLOCK.findall(text))
    assert marked >= 1, "the page lost its generated blocks"
    assert len(SHEBANG_BLOCK.findall(text)) == marked, "a launch file without its marker"


def test_the_pages_launch_files_are_what_the_exporters_write() -> None:
    text = DOC.read_text()
    fresh = regenerated(text)
    if os.environ.get("TUNER_UPDATE_DOCS") and fresh != text:
        DOC.write_text(fresh)
        text = fresh
    assert fresh == text, (
        f"{DOC.name} shows launch files the exporters no longer write; "
        "run TUNER_UPDATE_DOCS=1 pytest tests/test_export_docs.py"
    )


def test_a_stale_block_is_caught() -> None:
    text = DOC.read_text()
    match = BLOCK.search(text)
    assert match is not None
    stale = text[: match.start("body")] + "#!/bin/sh\nexec old\n" + text[match.end("body") :]
    assert regenerated(stale) == text
