"""vLLM exporter: real option names from one versioned table, exact simulated point carried."""

from __future__ import annotations

import json

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from tuner.errors import InputError
from tuner.export import vllm
from tuner.specs import EngineConfig, KVDtype, Quantization

pytestmark = pytest.mark.unit

configs = st.builds(
    EngineConfig,
    quantization=st.sampled_from(list(Quantization)),
    kv_dtype=st.sampled_from([KVDtype.auto, KVDtype.fp8, KVDtype.int8]),
    max_num_batched_tokens=st.integers(16, 65536),
    max_num_seqs=st.integers(1, 1024),
    tensor_parallel_size=st.sampled_from([1, 2, 4, 8]),
    enable_prefix_caching=st.booleans(),
    enable_chunked_prefill=st.booleans(),
)


@settings(max_examples=60, deadline=None)
@given(configs, st.integers(0, 8))
def test_args_only_use_table_options_and_carry_exact_values(cfg: EngineConfig, k: int) -> None:
    if k:
        cfg = cfg.model_copy(update={"draft_model": "ngram", "num_speculative_tokens": k})
    args = vllm.serve_args(cfg, "org/model", version="0.32")
    opts = vllm.VERSIONS["0.32"].option_names()
    assert all(a in opts for a in args if a.startswith("--"))
    pairs = dict(zip(args, args[1:], strict=False))
    assert pairs["--model"] == "org/model"
    assert int(pairs["--max-num-seqs"]) == cfg.max_num_seqs
    assert int(pairs["--max-num-batched-tokens"]) == cfg.max_num_batched_tokens
    assert int(pairs["--tensor-parallel-size"]) == cfg.tensor_parallel_size
    assert ("--enable-prefix-caching" in args) == cfg.enable_prefix_caching
    assert ("--no-enable-prefix-caching" in args) != cfg.enable_prefix_caching
    if k:
        spec = json.loads(pairs["--speculative-config"])
        assert spec["method"] == "ngram" and spec["num_speculative_tokens"] == k
    else:
        assert "--speculative-config" not in args


def test_yaml_holds_the_same_arguments() -> None:
    cfg = EngineConfig(max_num_seqs=37, max_num_batched_tokens=3072, enable_prefix_caching=False)
    exp = vllm.export(cfg, "org/model")
    data = yaml.safe_load(exp.files["vllm.yaml"])
    assert data["max-num-seqs"] == 37 and data["max-num-batched-tokens"] == 3072
    assert data["no-enable-prefix-caching"] is True
    assert "--max-num-seqs 37" in exp.command


def test_int8_kv_unsupported_in_older_version_is_an_input_error() -> None:
    cfg = EngineConfig(kv_dtype=KVDtype.int8)
    with pytest.raises(InputError, match="int8"):
        vllm.serve_args(cfg, "m", version="0.11")
    assert "int8_per_token_head" in vllm.serve_args(cfg, "m", version="0.32")


def test_prequantized_checkpoint_is_called_out() -> None:
    for q in (Quantization.int4_awq, Quantization.int4_gptq, Quantization.int8):
        notes = vllm.export(EngineConfig(quantization=q), "m").notes
        assert any("pre-quantized" in n for n in notes)
    assert not vllm.export(EngineConfig(), "m").notes


def test_marlin_experts_launch_with_each_vllm_versions_own_spelling() -> None:
    cfg = EngineConfig(quantization=Quantization.mxfp4, moe_kernel="marlin")
    # 0.11-0.18 read the environment (get_mxfp4_backend): the script exports it first
    old = vllm.export(cfg, "openai/gpt-oss-120b", version="0.11")
    script = old.files[vllm.SCRIPT]
    assert "export VLLM_MXFP4_USE_MARLIN=1\n" in script
    assert script.index("export VLLM_MXFP4_USE_MARLIN") < script.index("exec vllm serve")
    assert old.command.startswith("VLLM_MXFP4_USE_MARLIN=1 vllm serve")
    assert "VLLM_MXFP4_USE_MARLIN=1 vllm serve" in old.files["vllm.yaml"]  # the usage line
    assert "--moe-backend" not in old.command
    # 0.32 has KernelConfig.moe_backend
    new = vllm.export(cfg, "openai/gpt-oss-120b", version="0.32")
    assert "--moe-backend marlin" in new.command and "VLLM_MXFP4" not in new.command
    assert yaml.safe_load(new.files["vllm.yaml"])["moe-backend"] == "marlin"
    for out in (old, new):
        assert any("Marlin" in n for n in out.notes)
    plain = vllm.export(cfg.model_copy(update={"moe_kernel": "auto"}), "openai/gpt-oss-120b")
    assert "marlin" not in plain.files[vllm.SCRIPT] + plain.command


def test_mxfp4_experts_ask_vllm_for_the_mxfp8_activations_the_prediction_assumes() -> None:
    from tuner.catalog import load_gpu

    cfg = EngineConfig(quantization=Quantization.mxfp4)
    old = vllm.export(cfg, "openai/gpt-oss-120b", version="0.11", gpu=load_gpu("b200"))
    assert "export VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1\n" in old.files[vllm.SCRIPT]
    assert any("MXFP8" in n for n in old.notes)
    new = vllm.export(cfg, "openai/gpt-oss-120b", version="0.32", gpu=load_gpu("b200"))
    assert "MXFP8" not in new.files[vllm.SCRIPT]
    assert any("no option" in n for n in new.notes)  # said, not silently dropped
    hopper = vllm.export(cfg, "openai/gpt-oss-120b", version="0.32", gpu=load_gpu("h200-sxm"))
    assert not any("MXFP8" in n for n in hopper.notes)


def test_other_engines_name_the_engine_whose_knob_marlin_is() -> None:
    from tuner.export.tables import unspelled_reason

    cfg = EngineConfig(quantization=Quantization.mxfp4, moe_kernel="marlin")
    assert unspelled_reason("vllm", cfg) is None
    for engine in ("sglang", "trtllm"):
        reason = unspelled_reason(engine, cfg) or ""
        assert reason.endswith("moe_kernel=marlin (only vllm has one)"), reason
