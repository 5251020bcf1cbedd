"""The engine variants the exporter-parser tests feed to each engine's own argument parser."""

from __future__ import annotations

from tuner.specs import EngineConfig


def parser_variants(awq_kv: str) -> tuple[list[EngineConfig], list[str]]:
    """Six variants covering quantization, KV dtype (`awq_kv` for the AWQ one: each engine's
    own quantized cache), n-gram speculation, unchunked prefill, DP attention and EP; and ids."""
    configs = [
        EngineConfig(),
        EngineConfig(
            quantization="int4-awq", kv_dtype=awq_kv, max_num_seqs=37,
            max_num_batched_tokens=3072, num_speculative_tokens=3, draft_model="ngram",
            enable_prefix_caching=False,
        ),
        EngineConfig(quantization="fp8", kv_dtype="fp8", tensor_parallel_size=4,
                     enable_chunked_prefill=False, max_num_batched_tokens=16384),
        EngineConfig(quantization="fp8-block", data_parallel_size=8, expert_parallel=True),
        EngineConfig(quantization="nvfp4", tensor_parallel_size=4, data_parallel_size=2,
                     expert_parallel=True),
        EngineConfig(quantization="mxfp4", data_parallel_size=4),
    ]  # fmt: skip
    ids = ["default", f"awq-{awq_kv}kv-ngram", "fp8-tp4", "fp8block-dp8-ep", "nvfp4-tp4-dp2-ep",
           "mxfp4-dp4"]  # fmt: skip
    return configs, ids
