"""The knob registry is the one declaration: a knob added there alone reaches the pydantic
models, the search space and sampler, the CLI help of predict and tune, and the trials CSV."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
import typing
from pathlib import Path

import pytest

from tuner import knobs
from tuner.knobs.declared import EngineKnobs, SpaceKnobs
from tuner.search.trials import KNOBS
from tuner.specs import EngineConfig, SearchSpace

# Runs in a fresh interpreter: the knob must be registered before tuner.specs builds the models.
_SCRIPT = """
import sys
from tuner import knobs
knobs.register(knobs.Knob("scratch_level", int, 1, "Throw-away knob of the registry test",
                          "--scratch-level", "scratch", ge=1, le=3, space_default=(1, 2, 3)))
from typer.testing import CliRunner
from tuner.cli import app
from tuner.specs import SearchSpace
print("space-field:", "scratch_level" in SearchSpace.model_fields)
runner = CliRunner()
for command in ("predict", "tune"):
    print(command, "help:", runner.invoke(app, [command, "--help"], terminal_width=200).output)
tune = runner.invoke(app, sys.argv[1:])
print("tune exit:", tune.exit_code, tune.output)
# No exporter row and no EngineLimits field: off its default the knob is refused, not dropped.
from tuner.backends.torch import TorchBackend
from tuner.catalog import load_gpu, load_model, load_sla
from tuner.specs import Context, EngineConfig, Workload
ctx = Context(model=load_model("llama-tiny-20m"), gpu=load_gpu("rtx-4090"), sla=load_sla("chat"),
              workload=Workload(num_requests=2, input_tokens=8, output_tokens=2))
print("torch:", TorchBackend().evaluate(EngineConfig(scratch_level=2), ctx).reason)
"""


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    return subprocess.run(
        [sys.executable, "-c", _SCRIPT, *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )


def test_a_knob_registered_alone_reaches_space_cli_help_and_csv(tmp_path: Path) -> None:
    run = tmp_path / "run"
    out = _cli(
        *("tune", "--model", "llama-3.1-8b", "--gpu", "h200-sxm", "--trials", "8"),
        *("--num-requests", "20", "--scratch-level", "2,3", "--run-dir", str(run)),
    )
    assert out.returncode == 0, out.stderr
    assert "space-field: True" in out.stdout
    for command in ("predict", "tune"):
        help_text = out.stdout.split(f"{command} help:", 1)[1]
        assert "--scratch-level" in help_text and "Throw-away knob" in help_text, command
    assert "tune exit: 0" in out.stdout, out.stdout[-2000:]
    with (run / "trials.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert rows and "scratch_level" in rows[0]
    assert {r["scratch_level"] for r in rows if r["state"] == "complete"} <= {"2", "3"}
    assert any(r["scratch_level"] for r in rows if r["state"] == "complete")
    # Adding the knob touched the registry only: every exporter and the torch engine refuse a
    # value they have no spelling for (ARCHITECTURE.md, "A new knob"), saying which.
    readme = (run / "exports" / "README.md").read_text()
    for engine in ("vllm", "sglang", "trtllm"):
        assert f"{engine} export has no option for scratch_level=" in readme, engine
    assert "torch: scratch_level=2: the reference engine does not implement this knob" in out.stdout


def test_the_models_and_search_order_are_the_registry() -> None:
    names = [k.name for k in knobs.registered()]
    assert list(EngineConfig.model_fields) == names
    assert tuple(k.name for k in knobs.searched()) == KNOBS
    assert set(SearchSpace.model_fields) == {"name", "description", *KNOBS}
    for knob in knobs.registered():
        assert EngineConfig.model_fields[knob.name].description, knob.name


def test_every_value_gets_a_colour_even_one_the_registry_does_not_list() -> None:
    colours = [knobs.color_for("quantization", q) for q in knobs.Quantization]
    assert len(set(colours)) == len(colours)
    assert knobs.color_for("quantization", "int2-new") in knobs.PALETTE


def test_the_typed_declarations_are_the_registry() -> None:
    engine = typing.get_type_hints(EngineKnobs)
    assert list(engine) == [k.name for k in knobs.registered()]
    for name, kind in engine.items():
        assert EngineConfig.model_fields[name].annotation == kind, name
    space = typing.get_type_hints(SpaceKnobs)
    assert tuple(space) == KNOBS
    for name, kind in space.items():
        assert SearchSpace.model_fields[name].annotation == kind, name


_ROOT = Path(__file__).resolve().parents[1]


def _mypy(tmp_path: Path, attribute: str) -> subprocess.CompletedProcess[str]:
    snippet = tmp_path / "snippet.py"
    snippet.write_text(
        "from tuner.specs import EngineConfig, SearchSpace\n"
        f"print(EngineConfig().{attribute}, SearchSpace().{attribute})\n"
    )
    # From the repository root: its mypy settings (pydantic plugin) and cache apply.
    return subprocess.run(
        [sys.executable, "-m", "mypy", str(snippet)],
        capture_output=True,
        text=True,
        cwd=_ROOT,
        env={**os.environ, "PYTHONPATH": str(_ROOT)},
        timeout=600,
        check=False,
    )


@pytest.mark.parametrize(("attribute", "caught"), [("kv_dtpe", True), ("kv_dtype", False)])
def test_mypy_catches_a_misspelled_knob(tmp_path: Path, attribute: str, caught: bool) -> None:
    out = _mypy(tmp_path, attribute)
    if caught:
        assert out.returncode == 1, out.stdout
        assert '"EngineConfigBase" has no attribute "kv_dtpe"  [attr-defined]' in out.stdout
        assert '"SearchSpaceBase" has no attribute "kv_dtpe"  [attr-defined]' in out.stdout
    else:
        assert out.returncode == 0, out.stdout
