"""Issue 30 item 1: the engine is a knob. A tune searches vLLM, SGLang and TensorRT-LLM unless
`--engine` pins it, each engine exports only variants of its own engine, the recommended
variant's engine is the primary export, and a measuring backend says which engine it runs."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from tuner.backends.vllm import VLLMBackend, other_engine
from tuner.cli import app
from tuner.cli.plan_cmd import build_plan_request
from tuner.errors import InputError
from tuner.export import get_exporter
from tuner.export.bundle import EngineExport
from tuner.export.dispatch import export_config, expressible
from tuner.export.registry import engine_label, engine_words
from tuner.run.best_file import load_best
from tuner.run_spec import build_run_spec
from tuner.screen.options import screen_spec
from tuner.specs import Engine, EngineConfig, Metrics, SearchSpace

TUNE = ["tune", "--model", "llama-3.1-8b", "--gpu", "h200-sxm", "--sla", "chat"]
ALLOWED = "is not one of: vllm, sglang, trtllm"


def _space(**knobs: object) -> SearchSpace:
    base = {"quantization": ["bf16"], "kv_dtype": ["auto"], "max_num_seqs": [64]}
    return SearchSpace.model_validate({**base, "max_num_batched_tokens": [4096], **knobs})


@pytest.mark.unit
def test_every_engine_is_searched_unless_the_space_or_a_flag_pins_it() -> None:
    assert _space().engine == [Engine.vllm]  # a space that names no engine keeps vLLM
    assert build_run_spec(model="llama-3.1-8b", gpu="h200-sxm").space.engine == list(Engine)
    pinned = build_run_spec(model="llama-3.1-8b", gpu="h200-sxm", knob_flags={"engine": "sglang"})
    assert pinned.space.engine == [Engine.sglang]
    # A measuring backend serves vLLM: its search keeps vLLM, and another engine is one line.
    measured = build_run_spec(model="llama-3.1-8b", gpu="h200-sxm", backend="vllm")
    assert measured.space.engine == [Engine.vllm]
    with pytest.raises(InputError, match="measures vLLM variants only; --engine sglang"):
        build_run_spec(
            model="llama-3.1-8b", gpu="h200-sxm", backend="vllm", knob_flags={"engine": "sglang"}
        )


@pytest.mark.unit
@pytest.mark.parametrize("engine", list(Engine))
def test_a_variant_goes_to_its_own_engines_exporter_only(engine: Engine) -> None:
    spec = build_run_spec(model="llama-3.1-8b", gpu="h200-sxm")
    config = EngineConfig(engine=engine)
    out = export_config(config, spec)
    words = engine_words(engine)
    for name, exp in out.items():
        if name == engine.value:
            assert isinstance(exp, EngineExport) and exp.engine == name
        else:
            assert exp == f"this variant runs on {words} (engine={engine.value})"
            assert expressible(name, config, spec) == exp


@pytest.mark.unit
def test_the_engine_label_carries_the_release_the_metrics_name() -> None:
    config = EngineConfig(engine="trtllm")
    assert engine_label(config) == "TensorRT-LLM"
    metrics = Metrics(extra={"engine": "trtllm", "engine_version": "1.2.0rc6"})
    assert engine_label(config, metrics) == "TensorRT-LLM (modelled on 1.2.0rc6)"
    assert get_exporter("sglang").runs == "sglang"


@pytest.mark.unit
def test_the_vllm_backend_measures_vllm_variants_only() -> None:
    reason = "the vllm backend measures vLLM only; this variant runs on SGLang (engine=sglang)"
    assert other_engine(EngineConfig(engine="sglang")) == reason
    assert other_engine(EngineConfig()) is None
    spec = build_run_spec(model="llama-3.1-8b", gpu="h200-sxm")
    backend = VLLMBackend(python="python3")  # not started: cannot_run only builds arguments
    assert backend.cannot_run(EngineConfig(engine="sglang"), spec.context()) == reason
    # evaluate starts nothing for it: the same line, before any server or log.
    metrics = backend.evaluate(EngineConfig(engine="sglang"), spec.context())
    assert not metrics.feasible and metrics.reason == reason


@pytest.mark.unit
def test_the_torch_backend_names_the_engine_it_does_not_replay() -> None:
    pytest.importorskip("torch")
    from tuner.engine.generate import unsupported_knob

    why = unsupported_knob(EngineConfig(engine="sglang"))
    assert why == "engine=sglang: the reference engine does not implement this knob"


@pytest.mark.unit
def test_a_screened_tune_screens_the_engines_it_can_measure() -> None:
    spec = build_run_spec(model="llama-3.1-8b", gpu="h200-sxm")
    assert screen_spec(spec).space.engine == [Engine.vllm]
    pinned = build_run_spec(model="llama-3.1-8b", gpu="h200-sxm", knob_flags={"engine": "sglang"})
    with pytest.raises(InputError, match=r"--engine sglang: a screened tune measures on vLLM"):
        screen_spec(pinned)


@pytest.mark.unit
def test_a_plan_is_for_one_engine() -> None:
    args = {
        "model": "llama-3.1-8b",
        "sla": "chat",
        "gpus": "h200-sxm",
        "rate": 5.0,
        "users": None,
        "think_time": 0.0,
        "headroom": 0.2,
        "max_gpus_per_replica": 1,
        "isl": 1024,
        "osl": 256,
        "num_requests": 40,
        "space": "default",
    }
    assert build_plan_request(**args).engine is Engine.vllm  # type: ignore[arg-type]
    assert build_plan_request(**args, engine="sglang").engine is Engine.sglang  # type: ignore[arg-type]
    with pytest.raises(InputError, match=f"--engine 'tgi' {ALLOWED}"):
        build_plan_request(**args, engine="tgi")  # type: ignore[arg-type]


@pytest.mark.unit
@pytest.mark.parametrize(
    "command",
    [
        ["predict", "--model", "llama-3.1-8b", "--gpu", "h200-sxm"],
        [*TUNE, "--trials", "3"],
        ["plan", "--model", "llama-3.1-8b", "--gpus", "h200-sxm", "--rate", "5"],
    ],
    ids=["predict", "tune", "plan"],
)
def test_a_bad_engine_is_one_line_with_the_allowed_values_and_exit_2(command: list[str]) -> None:
    result = CliRunner().invoke(app, [*command, "--engine", "tgi"])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and f"--engine 'tgi' {ALLOWED}" in lines[0]
    assert "Traceback" not in result.output


def test_predict_says_which_engine_and_release_it_modelled() -> None:
    args = ["predict", "--model", "llama-3.1-8b", "--gpu", "h200-sxm", "--engine", "trtllm"]
    result = CliRunner().invoke(app, [*args, "--num-requests", "40"])
    assert result.exit_code == 0, result.output
    line = next(x for x in result.output.splitlines() if x.startswith("engine: "))
    assert re.match(r"engine: TensorRT-LLM \(modelled on \S+\): scheduler and overheads", line), (
        line
    )
    doc = json.loads(
        CliRunner().invoke(app, [*args, "--num-requests", "40", "--json"]).output.strip()
    )
    assert doc["config"]["engine"] == "trtllm"
    assert doc["extra"]["engine_version"] and doc["extra"]["engine"]


def _sections(readme: str) -> list[tuple[str, str]]:
    """(engine, section text) per `## engine ...` section of exports/README.md, in order."""
    parts = re.split(r"^## (\S+)", readme, flags=re.M)
    return [(parts[i], parts[i + 1]) for i in range(1, len(parts), 2)]


def _export_lines(output: str) -> list[str]:
    names = ("vLLM", "SGLang", "TRT-LLM")
    return [x.strip() for x in output.splitlines() if x.strip().startswith(names)]


def test_an_unpinned_tune_recommends_an_engine_and_exports_it_first(tmp_path: Path) -> None:
    run = tmp_path / "run"
    result = CliRunner().invoke(app, [*TUNE, "--trials", "30", "--run-dir", str(run)])
    assert result.exit_code == 0, result.output
    with (run / "trials.csv").open() as fh:
        searched = {r["engine"] for r in csv.DictReader(fh) if r["state"] == "complete"}
    assert searched == {"vllm", "sglang", "trtllm"}
    best = load_best(run / "best.yaml")
    assert best.recommended is not None
    engine = best.recommended.config.engine
    exporter = get_exporter(engine.value)
    assert f" on {engine_words(engine)}" in next(
        x for x in result.output.splitlines() if x.startswith("recommended: trial")
    )
    readme = (run / "exports" / "README.md").read_text()
    assert f"The recommendation runs on {engine_words(engine)}" in readme
    sections = _sections(readme)
    assert sections[0][0] == engine.value and "the recommended variant" in sections[0][1]
    assert (run / "exports" / exporter.script).is_file()
    for name, text in sections:  # every engine's files are a variant of that engine
        if "nothing to export" not in text:
            assert f"engine: {name}" in text, name
    first = _export_lines(result.output)[0]
    assert first.startswith(f"{exporter.display_name} (recommended): ")
    assert first.endswith(exporter.script)


def test_a_pinned_tune_searches_and_recommends_that_engine_only(tmp_path: Path) -> None:
    run = tmp_path / "run"
    args = [*TUNE, "--trials", "30", "--engine", "sglang", "--run-dir", str(run)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    with (run / "trials.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert rows and {r["engine"] for r in rows} == {"sglang"}
    best = yaml.safe_load((run / "best.yaml").read_text())
    assert best["recommended"]["config"]["engine"] == "sglang"
    recommended = next(x for x in result.output.splitlines() if x.startswith("recommended:"))
    version = best["recommended"].get("engine_version")  # the release the simulator modelled
    assert version and recommended.endswith(f" on SGLang (modelled on {version})")
    assert _export_lines(result.output)[0].startswith("SGLang (recommended): ")
    readme = (run / "exports" / "README.md").read_text()
    assert [name for name, _ in _sections(readme)][0] == "sglang"
    assert "engine=vllm was not searched (the space has sglang)" in readme
    assert not (run / "exports" / "vllm.sh").exists()
