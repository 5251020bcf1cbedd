"""Issue 33 item 1: any text given as a model id, model source, GPU name or SLA name is either
refused where it enters (an InputError) or written so that it reads back unchanged.

Each example goes in through the real entry (a config.json's `_name_or_path`, `--model-source`,
a `--gpu FILE`, an `--sla FILE`), then through the writers: every engine's export, the run
folder's run.yaml, best.yaml and exports/, and a plan's plan.yaml and exports/. Every YAML file
must parse back to the same keys and values, and every script, split as the shell splits it, to
the same arguments; a name never adds a line, a key or an argument.
"""

from __future__ import annotations

import json
import shlex
import tempfile
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from tuner import catalog
from tuner.errors import InputError, control_reason
from tuner.export import sglang, trtllm, vllm
from tuner.export.bundle import EngineExport
from tuner.model_spec import model_id_reason
from tuner.plan import PlanRequest, PlanResult, load_prices, plan
from tuner.plan.folder import write_plan
from tuner.plan.plan_file import load_plan
from tuner.run.best_file import load_best
from tuner.run.exports import write_exports
from tuner.run.folder import best_file, write_best
from tuner.run_spec import RunSpec, build_run_spec, load_run_spec
from tuner.search.pareto import analyze
from tuner.search.trials import TrialRecord
from tuner.specs import EngineConfig, Metrics, Percentiles, Quantization, Workload

pytestmark = pytest.mark.unit

# What breaks a line, a comment, a quote or a terminal, mixed into arbitrary text.
TRICKY = "\n\r\t\x00\x1b\x7f\x85\u2028\u2029\u202e\ufeff #:'\"\\-{}[]&*!|>%@`$;~"
TEXT = st.text(st.one_of(st.characters(), st.sampled_from(TRICKY)), min_size=1, max_size=24)
# vLLM's notes name the GPU on AMD when FP8 runs: the GPU name reaches the written notes.
FP8 = EngineConfig(quantization=Quantization.fp8)
DENSE_CONFIG = {
    "model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 4, "intermediate_size": 128, "vocab_size": 1000,
    "max_position_embeddings": 2048,
}  # fmt: skip
FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.fixture(scope="module")
def small_plan() -> PlanResult:
    """One simulated plan of a small model on one GPU kind, renamed per example."""
    req = PlanRequest(
        model=catalog.load_model("llama-3.2-1b"),
        sla=catalog.load_sla("chat"),
        workload=Workload(input_tokens=256, output_tokens=64, num_requests=40),
        space=catalog.load_search_space("default"),
        rate_rps=20.0,
        gpus=[catalog.load_gpu("l40s")],
    )
    result = plan(req, load_prices())
    assert result.ok
    return result


# ----------------------------------------------------------------------------- reading back


def _argv(script: str) -> list[str]:
    """The arguments a shell gives `exec` in one of our launch scripts (one command, comments)."""
    assert script.startswith("#!/bin/sh\n")
    joined = script.replace(" \\\n    ", " ")  # our continuation lines
    commands = [ln for ln in joined.splitlines() if not ln.startswith("#")]
    assert len(commands) == 1, commands  # a name never adds a line of its own
    return shlex.split(joined, comments=True)


def _yaml_body(text: str) -> object:
    """The mapping of a launch YAML, its comment lines checked to be our header only."""
    comments = [ln for ln in text.splitlines() if ln.startswith("#")]
    assert all(ln.startswith(("# vLLM ", "# usage: ", "# TensorRT-LLM ")) for ln in comments)
    return yaml.safe_load(text)


def _check_vllm(exp: EngineExport, model: str, args: list[str] | None = None) -> None:
    """vllm.sh runs `vllm serve MODEL ARGS` (ARGS: the exporter's, when given) and vllm.yaml
    holds ARGS and nothing else, under a usage line naming MODEL."""
    argv = _argv(exp.files[vllm.SCRIPT])
    assert argv[:4] == ["exec", "vllm", "serve", model]
    assert args is None or argv[4:] == args
    text = exp.files["vllm.yaml"]
    assert _yaml_body(text) == yaml.safe_load(vllm.serve_yaml(argv[4:]))
    usage = [ln for ln in text.splitlines() if ln.startswith("# usage: ")]
    assert len(usage) == 1
    assert shlex.split(usage[0].removeprefix("# usage: ")) == [
        "vllm", "serve", model, "--config", "vllm.yaml"
    ]  # fmt: skip


def _check_sglang(exp: EngineExport, model: str, config: EngineConfig) -> None:
    args = ["exec", "python", "-m", "sglang.launch_server", *sglang.launch_args(config, model)]
    assert _argv(exp.files[sglang.SCRIPT]) == args


def _check_trtllm(exp: EngineExport, model: str, config: EngineConfig) -> None:
    argv = ["exec", "trtllm-serve", *trtllm.serve_args(config, model)]
    assert _argv(exp.files[trtllm.SCRIPT]) == argv
    assert _yaml_body(exp.files[trtllm.EXTRA_FILE]) == trtllm.extra_options(config)


def _check_folder(folder: Path, model: str, config: EngineConfig) -> None:
    """Every launch file written into an exports/ folder reads back with `model` and no more."""
    files = {p.name: p.read_text() for p in folder.iterdir()}
    if "vllm.sh" in files:
        _check_vllm(EngineExport("vllm", "", "", files), model)
    if "sglang.sh" in files:
        _check_sglang(EngineExport("sglang", "", "", files), model, config)
    if "trtllm.sh" in files:
        assert _argv(files["trtllm.sh"])[:3] == ["exec", "trtllm-serve", model]
        assert isinstance(_yaml_body(files[trtllm.EXTRA_FILE]), dict)


# ----------------------------------------------------------------------------- the exporters


@given(TEXT)
@example("org/m\ntrust-remote-code: true\n#")
@example("--trust-remote-code")
@example("a'b\"c #d: e")
@settings(max_examples=300, deadline=None)
def test_every_exporter_refuses_or_quotes_any_model_id(model: str) -> None:
    """The model id given to each exporter directly (the library's entry)."""
    config = EngineConfig()
    if model_id_reason(model):
        for export in (vllm.export, sglang.export, trtllm.export):
            with pytest.raises(InputError, match="model id"):
                export(config, model)
        return
    _check_vllm(vllm.export(config, model), model, vllm.serve_args(config, model)[2:])
    _check_sglang(sglang.export(config, model), model, config)
    _check_trtllm(trtllm.export(config, model), model, config)


# ----------------------------------------------------------------------------- entries


def _enter(kind: str, text: str, tmp: Path) -> RunSpec:
    """A run spec built through the entry that takes `text` as a `kind` (InputError if not)."""
    common = {"model": "llama-3.2-1b", "gpu": "mi300x", "sla": "chat"}
    if kind == "model_source":
        return build_run_spec(**common, model_source=text)
    if kind == "hf_id":
        path = tmp / "config.json"
        path.write_text(json.dumps({**DENSE_CONFIG, "_name_or_path": text}))
        return build_run_spec(**{**common, "model": str(path)})
    if kind == "gpu":
        gpu = catalog.load_gpu("mi300x").model_dump(mode="json")
        path = tmp / "gpu.yaml"
        path.write_text(yaml.safe_dump({**gpu, "name": text, "aliases": []}))
        return build_run_spec(**{**common, "gpu": str(path)})
    path = tmp / "sla.yaml"
    path.write_text(yaml.safe_dump({"name": text, "ttft_ms": 500, "tpot_ms": 50}))
    return build_run_spec(**{**common, "sla": str(path)})


def _named(spec: RunSpec, kind: str) -> str:
    return {
        "model_source": spec.model_source,
        "hf_id": spec.model.hf_id or "",
        "gpu": spec.gpu.name,
        "sla": spec.sla.name,
    }[kind]


def _records() -> list[TrialRecord]:
    def p(v: float) -> Percentiles:
        return Percentiles(mean=v, p50=v, p90=v, p95=v, p99=v)

    m = Metrics(ttft_ms=p(300), tpot_ms=p(30), output_tokens_per_s_per_gpu=900.0)
    return [TrialRecord(number=0, state="complete", params={}, config=FP8, metrics=m)]


def _reason(kind: str, text: str) -> str | None:
    return model_id_reason(text) if kind in ("model_source", "hf_id") else control_reason(text)


@given(st.sampled_from(["model_source", "hf_id", "gpu", "sla"]), TEXT)
@example("model_source", "org/m\ntrust-remote-code: true\n#")
@example("hf_id", "org/m\ntrust-remote-code: true\n#")
@example("gpu", "x\n#")
@example("sla", "chat\ntrust-remote-code: true")
@FAST
def test_a_run_folder_reads_back_any_accepted_name(kind: str, text: str) -> None:
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        if _reason(kind, text):
            with pytest.raises(InputError):
                _enter(kind, text, tmp)
            return
        spec = _enter(kind, text, tmp)
        assert _named(spec, kind) == text
        run_yaml = tmp / "run.yaml"
        run_yaml.write_text(spec.to_yaml())
        assert load_run_spec(run_yaml) == spec
        records = _records()
        result = analyze(records, spec.sla)
        write_best(spec, records, result, tmp / "best.yaml")
        raw = yaml.safe_load((tmp / "best.yaml").read_text())
        assert raw["sla"]["name"] == spec.sla.name
        assert load_best(tmp / "best.yaml") == best_file(spec, records, result)
        exports = write_exports(FP8, spec, tmp / "exports", records[0].metrics)
        assert not isinstance(exports["vllm"], str)
        _check_folder(tmp / "exports", spec.model_source, FP8)


@given(TEXT)
@example("x/../../y")
@example("..")
@FAST
def test_a_plan_folder_reads_back_any_accepted_name(small_plan: PlanResult, text: str) -> None:
    """The plan's writers, given names its entries accept (the same checked types)."""
    assume(model_id_reason(text) is None)
    req, kind = small_plan.request, small_plan.kinds[0]
    best = kind.best
    assert best is not None
    renamed = small_plan.model_copy(
        update={
            "request": req.model_copy(
                update={
                    "model": req.model.model_copy(update={"hf_id": text}),
                    "sla": req.sla.model_copy(update={"name": text}),
                    "gpus": [req.gpus[0].model_copy(update={"name": text, "aliases": []})],
                }
            ),
            "kinds": [
                kind.model_copy(
                    update={
                        "gpu": text,
                        "best": best.model_copy(update={"gpu": text}),
                        "options": [o.model_copy(update={"gpu": text}) for o in kind.options],
                    }
                )
            ],
        }
    )
    with tempfile.TemporaryDirectory() as folder:
        run = Path(folder) / "plan"
        write_plan(renamed, run)
        raw = yaml.safe_load((run / "plan.yaml").read_text())
        assert raw["request"]["sla"]["name"] == text and raw["kinds"][0]["gpu"] == text
        assert load_plan(run / "plan.yaml").request.model.hf_id == text
        (exports,) = (run / "exports").iterdir()  # inside the run folder, whatever the name
        _check_folder(exports, text, best.config)
