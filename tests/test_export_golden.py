"""Golden files for every exporter: any change to emitted flags must be deliberate.

Regenerate with `TUNER_UPDATE_GOLDEN=1 pytest tests/test_export_golden.py` and review the diff.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tuner.errors import InputError
from tuner.export import exporters, sglang, trtllm
from tuner.export.bundle import ExportTarget
from tuner.specs import EngineConfig, Metrics

pytestmark = pytest.mark.unit

GOLDEN = Path(__file__).parent / "golden"
MODEL = "meta-llama/Llama-3.1-8B-Instruct"
CASES = {
    "bf16-default": EngineConfig(max_num_seqs=64, max_num_batched_tokens=4096),
    "fp8-fp8kv-tp2-ngram": EngineConfig(
        quantization="fp8", kv_dtype="fp8", tensor_parallel_size=2, max_num_seqs=181,
        max_num_batched_tokens=6656, num_speculative_tokens=4, draft_model="ngram",
    ),
    "awq-noprefix-draft": EngineConfig(
        quantization="int4-awq", max_num_seqs=23, max_num_batched_tokens=11264,
        enable_prefix_caching=False, num_speculative_tokens=3, draft_model="llama-3.2-1b",
    ),
    # MoE layouts: DeepSeek-V3 ships block FP8; one DP rank per GPU, experts split over all 8.
    "deepseek-v3-fp8block-dp8-ep": EngineConfig(
        quantization="fp8-block", data_parallel_size=8, expert_parallel=True, max_num_seqs=128,
        max_num_batched_tokens=8192,
    ),
    # DeepSeek's own MTP layers as the draft, 3 positions, inside 8 attention-DP ranks.
    "deepseek-v3-fp8block-dp8-ep-mtp3": EngineConfig(
        quantization="fp8-block", data_parallel_size=8, expert_parallel=True, max_num_seqs=64,
        max_num_batched_tokens=8192, num_speculative_tokens=3, draft_model="mtp",
    ),
    # Attention TP 4 inside 2 DP ranks: TensorRT-LLM cannot express it (a refusal golden).
    "qwen3-30b-a3b-nvfp4-tp4-dp2-ep": EngineConfig(
        quantization="nvfp4", tensor_parallel_size=4, data_parallel_size=2, expert_parallel=True,
        max_num_seqs=96, max_num_batched_tokens=4096,
    ),
}  # fmt: skip
MODELS = {
    "deepseek-v3-fp8block-dp8-ep": "deepseek-ai/DeepSeek-V3",
    "deepseek-v3-fp8block-dp8-ep-mtp3": "deepseek-ai/DeepSeek-V3",
    "qwen3-30b-a3b-nvfp4-tp4-dp2-ep": "Qwen/Qwen3-30B-A3B",
}


def _render(case: str, cfg: EngineConfig) -> dict[str, str]:
    """Every registered exporter's files, notes or refusal for one case (no GPU, no workload)."""
    target = ExportTarget(MODELS.get(case, MODEL), metrics=Metrics(kv_capacity_tokens=412_336))
    out: dict[str, str] = {}
    for exporter in exporters():
        name = exporter.name
        # Each engine's files are for a variant of that engine (the engine knob is the
        # exporter's identity: dispatch sends a variant to its own engine's exporter only).
        own = EngineConfig(**{**cfg.model_dump(), "engine": exporter.runs})
        try:
            exp = exporter.export(own, target)
        except InputError as exc:  # the refusal is the engine's answer, pinned like an export
            out[f"{case}.{name}.refused.txt"] = f"{exc}\n"
            continue
        for fname, text in exp.files.items():
            out[f"{case}.{fname}"] = text
        out[f"{case}.{name}.notes.txt"] = "\n".join(exp.notes) + "\n"
    return out


@pytest.mark.parametrize("case", list(CASES))
def test_exports_match_golden_files(case: str) -> None:
    rendered = _render(case, CASES[case])
    if os.environ.get("TUNER_UPDATE_GOLDEN"):
        GOLDEN.mkdir(exist_ok=True)
        for fname, text in rendered.items():
            (GOLDEN / fname).write_text(text)
    for fname, text in rendered.items():
        golden = GOLDEN / fname
        assert golden.exists(), f"missing golden file {golden}; run with TUNER_UPDATE_GOLDEN=1"
        assert text == golden.read_text(), f"{fname} differs from its golden file"


def test_engines_without_int8_kv_refuse_instead_of_guessing() -> None:
    cfg = EngineConfig(kv_dtype="int8")
    with pytest.raises(InputError, match="SGLang"):
        sglang.launch_args(cfg, MODEL)
    with pytest.raises(InputError, match="TensorRT-LLM"):
        trtllm.serve_args(cfg, MODEL)
    with pytest.raises(InputError, match="weight-only"):
        trtllm.serve_args(EngineConfig(quantization="int8-wo"), MODEL)


def test_trtllm_carries_the_simulated_kv_capacity_and_token_budget() -> None:
    cfg = CASES["fp8-fp8kv-tp2-ngram"]
    extra = trtllm.extra_options(cfg, metrics=Metrics(kv_capacity_tokens=1234))
    assert extra["kv_cache_config"] == {
        "dtype": "fp8", "enable_block_reuse": True, "free_gpu_memory_fraction": 0.9,
        "tokens_per_block": 16, "max_tokens": 1234,
    }  # fmt: skip
    args = trtllm.serve_args(cfg, MODEL)
    assert args[args.index("--max_num_tokens") + 1] == "6656"
    assert args[args.index("--max_batch_size") + 1] == "181"


def test_sglang_chunking_off_uses_minus_one_and_keeps_prefill_budget() -> None:
    cfg = EngineConfig(enable_chunked_prefill=False, max_num_batched_tokens=8192)
    args = sglang.launch_args(cfg, MODEL)
    assert args[args.index("--chunked-prefill-size") + 1] == "-1"
    assert args[args.index("--max-prefill-tokens") + 1] == "8192"


def test_every_golden_file_is_still_rendered() -> None:
    rendered = {fname for case, cfg in CASES.items() for fname in _render(case, cfg)}
    stale = sorted(p.name for p in GOLDEN.iterdir() if p.name not in rendered)
    assert not stale, f"golden files no case renders any more (an exporter or case gone?): {stale}"
