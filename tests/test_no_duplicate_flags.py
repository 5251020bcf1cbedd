"""No engine is ever given one option twice: not by an exporter, not by the vLLM backend.

vLLM's parser keeps the last of a repeated option (with a "Found duplicate keys" warning), so a
flag given twice silently overrides the exported value; issue 29 found `--max-model-len` twice
in the vllm backend's command. The variants are drawn from the knob registry, so a new knob is
covered without touching this file.
"""

from __future__ import annotations

import shlex
import sys
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from tuner import catalog
from tuner.backends.vllm import VLLMBackend, for_platform
from tuner.errors import InputError
from tuner.export import exporters
from tuner.export.bundle import EngineExport, ExportTarget
from tuner.knobs.registry import Knob, registered
from tuner.perf.memory import replica_gpus
from tuner.specs import NGRAM, Context, EngineConfig, Metrics, Workload
from tuner.validity import invalid_reason, served_model_len

pytestmark = pytest.mark.unit

MODELS = ("llama-3.1-8b", "qwen3-30b-a3b")
GPUS = ("h200-sxm", "mi300x", "b200")


def _values(knob: Knob) -> st.SearchStrategy[Any]:
    """A few values of any registered knob, from its declaration alone."""
    if knob.choices is not None:
        return st.sampled_from(knob.choices)
    if knob.kind is str:  # a name (the draft model): n-gram drafting or a catalog model
        return st.sampled_from([knob.default, NGRAM, "llama-3.2-1b"])
    if knob.kind is float:
        return st.floats(0.5, knob.le if knob.le is not None else 1.0)
    if knob.power_of_two:
        return st.sampled_from([1, 2, 4, 8])
    low = int(knob.ge if knob.ge is not None else 0)
    high = int(knob.le) if knob.le is not None else max(4 * int(knob.default), low + 8)
    return st.integers(low, high)


@st.composite
def variants(draw: st.DrawFn) -> tuple[EngineConfig, Context]:
    """A variant that builds (every registered knob drawn) and a context to run it in."""
    values: dict[str, Any] = {}
    for knob in registered():
        needed = knob.needs is None or values.get(knob.needs)
        values[knob.name] = draw(_values(knob)) if needed else knob.default
    try:
        config = EngineConfig(**values)
    except ValidationError:
        config = EngineConfig()  # a combination the model refuses: the defaults instead
    workload = Workload(
        input_tokens=draw(st.sampled_from([128, 1024, 3000])),
        output_tokens=draw(st.sampled_from([16, 512])),
        concurrency=2,
        num_requests=8,
    )
    ctx = Context(
        model=catalog.load_model(draw(st.sampled_from(MODELS))),
        gpu=catalog.load_gpu(draw(st.sampled_from(GPUS))),
        sla=catalog.load_sla("chat"),
        workload=workload,
        num_gpus=replica_gpus(config),
    )
    return config, ctx


def _settings(argv: Iterable[str]) -> list[str]:
    """Every option an argument list sets, `--no-x` read as `--x` (both set x)."""
    flags = [a.split("=", 1)[0] for a in argv if a.startswith("--")]
    return ["--" + f.removeprefix("--").removeprefix("no-") for f in flags]


def _twice(argv: Iterable[str]) -> list[str]:
    return sorted(f for f, n in Counter(_settings(argv)).items() if n > 1)


def _launched(exp: EngineExport) -> dict[str, list[str]]:
    """Each command line of an export (its command, each script's exec, each YAML's keys)."""
    lines = {"command": shlex.split(exp.command.replace("\\\n", " "))}
    for name, text in exp.files.items():
        if name.endswith(".sh"):
            joined = text.replace("\\\n", " ")
            execs = [ln for ln in joined.splitlines() if ln.startswith("exec ")]
            assert len(execs) == 1, f"{exp.engine} {name}: {len(execs)} exec lines"
            lines[name] = shlex.split(execs[0])
        elif name.endswith((".yaml", ".yml")):
            lines[name] = ["--" + str(key) for key in yaml.safe_load(text) or {}]
    return lines


@settings(max_examples=120, deadline=None)
@given(variants())
def test_no_exporter_gives_an_option_twice(variant: tuple[EngineConfig, Context]) -> None:
    config, ctx = variant
    target = ExportTarget(
        "org/model",
        gpu=ctx.gpu,
        max_model_len=served_model_len(ctx),
        metrics=Metrics(kv_capacity_tokens=100_000),
    )
    for exporter in exporters():
        try:
            exp = exporter.export(config, target)
        except InputError:
            continue  # a refusal is a reason, not a command line
        for where, argv in _launched(exp).items():
            assert not _twice(argv), f"{exporter.name} {where}: {_twice(argv)} twice: {argv}"


def _backend(
    max_model_len: int | None = None, extra: tuple[str, ...] = (), run_dir: Path | None = None
) -> VLLMBackend:
    # Another interpreter name skips the "is vLLM installed" check: nothing is started here.
    return VLLMBackend(
        model_path="/models/x",
        run_dir=run_dir or "/nonexistent/runs",
        python="python3",
        max_model_len=max_model_len,
        extra_args=extra,
    )


@settings(max_examples=120, deadline=None)
@given(variants(), st.sampled_from([None, 2048, 8192]))
def test_the_vllm_backends_command_gives_each_option_once(
    variant: tuple[EngineConfig, Context], override: int | None
) -> None:
    config, ctx = variant
    if invalid_reason(config, ctx) is not None:
        return  # the backend refuses it before building any command
    backend = _backend(override)
    config, _ = for_platform(config, backend.cpu_build)
    try:
        cmd = backend.command(config, ctx, port=12345)
    except InputError:
        return  # the exporter refused it (e.g. a step shorter than an overriding length)
    assert not _twice(cmd), f"{_twice(cmd)} twice: {cmd}"
    served = override or served_model_len(ctx)
    assert cmd[cmd.index("--max-model-len") + 1] == str(served)


def _llama_ctx(workload: Workload) -> Context:
    """Llama-3.1-8B on one H200 under the chat SLA and `workload`."""
    return Context(
        model=catalog.load_model("llama-3.1-8b"),
        gpu=catalog.load_gpu("h200-sxm"),
        sla=catalog.load_sla("chat"),
        workload=workload,
        num_gpus=1,
    )


def test_the_issue_case_passes_the_served_length_once() -> None:
    # Chunked prefill off with a 4096-token step: the export used to say 4096 (the step) and
    # the backend appended the served 1536 after it.
    config = EngineConfig(enable_chunked_prefill=False, max_num_batched_tokens=4096)
    ctx = _llama_ctx(Workload(input_tokens=1024, output_tokens=256, concurrency=2, num_requests=8))
    cmd = _backend().command(config, ctx, port=8000)
    assert cmd[:3] == ["python3", "-m", "vllm.entrypoints.openai.api_server"]
    assert cmd.count("--max-model-len") == 1
    assert cmd[cmd.index("--max-model-len") + 1] == "1536" == str(served_model_len(ctx))
    assert not _twice(cmd)


def test_extra_arguments_may_not_repeat_an_exported_option(tmp_path: Path) -> None:
    ctx = _llama_ctx(Workload(input_tokens=128, output_tokens=16, concurrency=1, num_requests=2))
    backend = _backend(extra=("--enforce-eager", "--no-enable-prefix-caching"), run_dir=tmp_path)
    with pytest.raises(InputError, match="--enable-prefix-caching would reach vLLM twice"):
        backend.command(EngineConfig(), ctx, port=8000)
    reason = backend.cannot_run(EngineConfig(), ctx)
    assert reason is not None and "twice" in reason
    metrics = backend.evaluate(EngineConfig(), ctx)
    assert not metrics.feasible and "twice" in str(metrics.reason)
    assert backend.server_pid is None  # refused without starting a server
    # An option the export does not set for this variant is the user's to add.
    assert "--quantization" in _backend(extra=("--quantization", "x")).command(
        EngineConfig(), ctx, port=8000
    )


def test_the_settings_helper_reads_negations_and_equals() -> None:
    assert _twice(["--a", "1", "--no-a", "--b=2", "--b", "3", "--c"]) == ["--a", "--b"]
    assert _settings([sys.executable, "-m", "x"]) == []
