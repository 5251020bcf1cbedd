"""Feed the SGLang export to SGLang's own `launch_server` argument parser (skips without SGLang;
scripts/setup.sh --all installs its Python sources)."""

from __future__ import annotations

import argparse

import pytest
from _export_variants import parser_variants

from tuner.export import sglang as sglang_export
from tuner.export.tables import layout
from tuner.specs import EngineConfig

server_args = pytest.importorskip("sglang.srt.server_args", reason="SGLang is not installed")


@pytest.fixture(scope="module")
def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    server_args.ServerArgs.add_cli_args(parser)
    return parser


CONFIGS, IDS = parser_variants("fp8")


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
