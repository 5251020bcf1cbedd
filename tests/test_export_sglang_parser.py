"""Feed the SGLang export to SGLang's own `launch_server` argument parser (skips without SGLang;
scripts/setup.sh --all installs its Python sources)."""

from __future__ import annotations

import argparse

import pytest

from tuner.export import sglang as sglang_export
from tuner.export.tables import layout
from tuner.specs import EngineConfig

server_args = pytest.importorskip("sglang.srt.server_args", reason="SGLang is not installed")


@pytest.fixture(scope="module")
def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    server_args.ServerArgs.add_cli_args(parser)
    return parser


CONFIGS = [
    EngineConfig(),
    EngineConfig(
        quantization="int4-awq", kv_dtype="fp8", max_num_seqs=37, max_num_batched_tokens=3072,
        num_speculative_tokens=3, draft_model="ngram", enable_prefix_caching=False,
    ),
    EngineConfig(quantization="fp8", kv_dtype="fp8", tensor_parallel_size=4,
                 enable_chunked_prefill=False, max_num_batched_tokens=16384),
    EngineConfig(quantization="fp8-block", data_parallel_size=8, expert_parallel=True),
    EngineConfig(quantization="nvfp4", tensor_parallel_size=4, data_parallel_size=2,
                 expert_parallel=True),
    EngineConfig(quantization="mxfp4", data_parallel_size=4),
]  # fmt: skip
IDS = ["default", "awq-fp8kv-ngram", "fp8-tp4-unchunked", "fp8block-dp8-ep", "nvfp4-tp4-dp2-ep",
       "mxfp4-dp4"]  # fmt: skip


@pytest.mark.parametrize("cfg", CONFIGS, ids=IDS)
def test_sglang_parser_reads_the_export_as_the_variant(
    parser: argparse.ArgumentParser, cfg: EngineConfig
) -> None:
    parsed = parser.parse_args(sglang_export.launch_args(cfg, "org/model"))
    shape = layout(cfg)
    gpus = cfg.tensor_parallel_size * cfg.data_parallel_size
    assert parsed.model_path == "org/model"
    # Under DP attention --tp-size counts every GPU and each --dp-size rank runs TP / DP.
    assert parsed.tp_size == gpus
    assert parsed.dp_size == shape.dp
    assert parsed.enable_dp_attention is (shape.dp > 1)
    assert parsed.ep_size == (gpus if cfg.expert_parallel else 1)
    # SGLang divides the request and chunk limits by the DP ranks: the export multiplies them.
    assert parsed.max_running_requests == cfg.max_num_seqs * shape.dp
    chunk = cfg.max_num_batched_tokens * shape.dp if cfg.enable_chunked_prefill else -1
    assert parsed.chunked_prefill_size == chunk
    assert parsed.mem_fraction_static == cfg.gpu_memory_utilization
    assert parsed.page_size == cfg.block_size
    assert parsed.disable_radix_cache is not cfg.enable_prefix_caching
    quant = sglang_export.VERSIONS[sglang_export.LATEST].quantization[cfg.quantization]
    assert parsed.quantization == quant.value
    assert parsed.kv_cache_dtype == ("fp8_e4m3" if cfg.kv_dtype == "fp8" else "auto")
    if cfg.num_speculative_tokens:
        assert parsed.speculative_algorithm == "NGRAM"
        assert parsed.speculative_num_draft_tokens == cfg.num_speculative_tokens + 1
        assert parsed.disable_overlap_schedule  # SGLang's NGRAM needs the overlap off
