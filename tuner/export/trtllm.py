"""TensorRT-LLM exporter: EngineConfig -> `trtllm-serve` arguments + extra LLM-API options YAML.

Names from TensorRT-LLM 1.0: `tensorrt_llm/commands/serve.py` (trtllm-serve options:
--backend, --tp_size, --max_batch_size, --max_num_tokens, --kv_cache_free_gpu_memory_fraction,
--extra_llm_api_options) and `tensorrt_llm/llmapi/llm_args.py` (KvCacheConfig: dtype,
enable_block_reuse, free_gpu_memory_fraction, max_tokens, tokens_per_block; LlmArgs:
enable_chunked_prefill, dtype, speculative_config with decoding_type NGram / DraftTarget).
The PyTorch backend reads quantization from the checkpoint (ModelOpt `hf_quant_config.json`
or the HF `quantization_config`: FP8_BLOCK_SCALES, NVFP4, W4A16_MXFP4 for gpt-oss); it does not
quantize at load time. Parallelism (serve.py: --tp_size = --tensor_parallel_size,
--ep_size = --moe_expert_parallel_size; llm_args.py: enable_attention_dp,
moe_tensor_parallel_size, moe_expert_parallel_size): tp_size counts every GPU, and with
enable_attention_dp each GPU is one attention DP rank with attention TP 1 (the PyTorch modules
use `1 if mapping.enable_attention_dp else mapping.tp_size`), so attention TP > 1 inside DP
ranks cannot be expressed. TensorRT-LLM is CUDA-only: no build for AMD GPUs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import yaml

from tuner.errors import InputError
from tuner.export.bundle import (
    EngineExport,
    ExportTarget,
    comment,
    draft_source,
    native_fp4_refusal,
    shell_join,
)
from tuner.export.registry import Exporter
from tuner.export.tables import (
    ROWS,
    Row,
    check_rows,
    layout,
    put,
    row_args,
    row_options,
    row_tree,
)
from tuner.specs import MTP, NGRAM, EngineConfig, GPUProfile, Metrics, Quantization

__all__ = [
    "EXPORTER",
    "LATEST",
    "SCRIPT",
    "VERSIONS",
    "TRTLLMOptions",
    "export",
    "extra_options",
    "serve_args",
]

SCRIPT = "trtllm.sh"

# TensorRT-LLM's n-gram docs default (docs/source/features/speculative-decoding.md).
NGRAM_MAX_MATCHING_SIZE = 2


@dataclass(frozen=True)
class TRTLLMOptions:
    """Every trtllm-serve option and LLM-API key this exporter may emit, for one version."""

    source: str
    cli: Mapping[str, str]
    keys: Mapping[str, str]  # our name -> LLM-API YAML key (dotted = nested)
    dtype: Mapping[Quantization, str]
    checkpoint: Mapping[Quantization, str]  # quantizations needing a pre-quantized checkpoint
    unsupported: Mapping[Quantization, str]  # quantizations this backend cannot serve
    cli_rows: tuple[Row, ...]  # the plain knobs as trtllm-serve options (tuner.export.tables)
    key_rows: tuple[Row, ...]  # the plain knobs as LLM-API YAML keys


_MODELOPT = "a pre-quantized checkpoint made with NVIDIA ModelOpt (hf_ptq.py --qformat {})"
VERSIONS: dict[str, TRTLLMOptions] = {
    "1.0": TRTLLMOptions(
        source="TensorRT-LLM 1.0 tensorrt_llm/commands/serve.py, tensorrt_llm/llmapi/llm_args.py",
        cli={
            "backend": "--backend",
            "extra_options": "--extra_llm_api_options",
        },
        keys={
            "dtype": "dtype",
            "kv_max_tokens": "kv_cache_config.max_tokens",
            "spec_type": "speculative_config.decoding_type",
            "spec_len": "speculative_config.max_draft_len",
            "spec_ngram": "speculative_config.max_matching_ngram_size",
            "spec_model": "speculative_config.speculative_model_dir",
            "spec_mtp": "speculative_config.num_nextn_predict_layers",
            "graph_padding": "cuda_graph_config.enable_padding",
            "graph_max_batch": "cuda_graph_config.max_batch_size",
        },
        dtype={q: ("float16" if q in (Quantization.fp16,) else "bfloat16") for q in Quantization},
        checkpoint={
            Quantization.fp8: _MODELOPT.format("fp8"),
            Quantization.int8: _MODELOPT.format("int8_sq"),
            Quantization.int4_awq: _MODELOPT.format("int4_awq"),
            Quantization.int4_gptq: "a pre-quantized GPTQ int4 checkpoint (HF format)",
            Quantization.fp8_block: (
                "a block-scaled FP8 checkpoint (HF quantization_config quant_method fp8, "
                "weight_block_size [128, 128]; DeepSeek-V3 and Qwen3-*-FP8 ship one), read as "
                "FP8_BLOCK_SCALES"
            ),
            Quantization.nvfp4: _MODELOPT.format("nvfp4"),
            Quantization.mxfp4: (
                "an MXFP4 checkpoint (gpt-oss ships one, read as W4A16_MXFP4 MoE experts)"
            ),
        },
        unsupported={
            Quantization.int8_wo: (
                "int8 weight-only has no PyTorch-backend path in TensorRT-LLM 1.0; build a "
                "TensorRT engine (trtllm-build --use_weight_only --weight_only_precision int8)"
            ),
        },
        cli_rows=ROWS["trtllm-serve"]["1.0"],
        key_rows=ROWS["trtllm-yaml"]["1.0"],
    ),
}
LATEST = "1.0"
EXTRA_FILE = "trtllm-extra-llm-api-options.yaml"


def _options(version: str) -> TRTLLMOptions:
    if version not in VERSIONS:
        raise InputError(f"unknown TensorRT-LLM version {version!r}; known: {', '.join(VERSIONS)}")
    return VERSIONS[version]


def _check_supported(config: EngineConfig, opts: TRTLLMOptions, version: str) -> None:
    if config.quantization in opts.unsupported:
        raise InputError(f"TensorRT-LLM {version}: {opts.unsupported[config.quantization]}")
    shape = layout(config)
    if shape.dp > 1 and shape.tp > 1:
        raise InputError(
            f"TensorRT-LLM {version}: attention DP runs attention TP 1 on each GPU, so "
            f"tensor_parallel_size={shape.tp} inside {shape.dp} DP ranks cannot be expressed; "
            f"use tp 1 x dp {shape.gpus}"
        )
    for rows in (opts.cli_rows, opts.key_rows):
        check_rows(rows, config, f"TensorRT-LLM {version}")


def serve_args(config: EngineConfig, model: str, *, version: str = LATEST) -> list[str]:
    """`trtllm-serve MODEL ...` arguments (the extra options file is passed by name)."""
    opts = _options(version)
    _check_supported(config, opts, version)
    c = opts.cli
    args = [
        model,
        c["backend"],
        "pytorch",
        *row_args(opts.cli_rows, config, f"TensorRT-LLM {version}"),
        c["extra_options"],
        EXTRA_FILE,
    ]
    stray = [
        a
        for a in args
        if a.startswith("--") and a not in set(c.values()) | row_options(opts.cli_rows)
    ]
    if stray:
        raise AssertionError(f"TensorRT-LLM exporter produced options outside its table: {stray}")
    return args


def extra_options(
    config: EngineConfig, *, metrics: Metrics | None = None, version: str = LATEST
) -> dict[str, object]:
    """The extra LLM-API options mapping (nested as TensorRT-LLM's YAML expects)."""
    opts = _options(version)
    _check_supported(config, opts, version)
    k = opts.keys
    tree: dict[str, object] = {}
    put(tree, k["dtype"], opts.dtype[config.quantization])
    row_tree(opts.key_rows, config, f"TensorRT-LLM {version}", tree)
    if metrics is not None and metrics.kv_capacity_tokens > 0:
        # TensorRT-LLM sizes the KV pool from *free* memory after weights; capping it at the
        # simulated capacity reproduces the simulated point (the smaller limit wins).
        put(tree, k["kv_max_tokens"], metrics.kv_capacity_tokens)
    # Decode graphs for every batch the variant admits, padded up to the next captured size (the
    # default captures only 1..31, 32, 64 and 128, so larger batches would launch eagerly);
    # trtllm-bench sets the same (bench/benchmark/utils/general.py get_settings).
    put(tree, k["graph_padding"], True)
    put(tree, k["graph_max_batch"], config.max_num_seqs)
    n = config.num_speculative_tokens
    if n and config.draft_model == NGRAM:
        put(tree, k["spec_type"], "NGram")
        put(tree, k["spec_len"], n)
        put(tree, k["spec_ngram"], NGRAM_MAX_MATCHING_SIZE)
    elif n and config.draft_model == MTP:
        # The checkpoint's MTP module, run n times per step (llm_args.py MTPDecodingConfig).
        put(tree, k["spec_type"], "MTP")
        put(tree, k["spec_mtp"], n)
    elif n and config.draft_model:
        put(tree, k["spec_type"], "DraftTarget")
        put(tree, k["spec_len"], n)
        put(tree, k["spec_model"], draft_source(config.draft_model))
    return tree


def export(
    config: EngineConfig,
    target: ExportTarget | str,
    *,
    metrics: Metrics | None = None,
    version: str = LATEST,
    gpu: GPUProfile | None = None,
) -> EngineExport:
    """trtllm-serve command, its extra options YAML (the KV pool capped at the target's
    metrics), and caveats; refuses an AMD GPU (a model id is a target without GPU or metrics;
    `metrics` and `gpu` set those fields)."""
    at = ExportTarget.of(target, gpu=gpu, metrics=metrics)
    opts = _options(version)
    if refusal := _gpu_refusal(config, at.gpu, version):
        raise InputError(refusal)
    args = serve_args(config, at.model, version=version)
    command = shell_join(["trtllm-serve", *args])
    extra = extra_options(config, metrics=at.metrics, version=version)
    notes = []
    if config.quantization in opts.checkpoint:
        notes.append(
            f"{config.quantization.value} needs {opts.checkpoint[config.quantization]}; "
            "serve that checkpoint instead of the original model."
        )
    notes += _layout_notes(config)
    if not config.enable_chunked_prefill:
        # TensorRT-LLM checks each request, not its startup (llmapi/llm.py _check_arguments);
        # tuner.validity's rule (the whole request fits one step) is the stricter one.
        notes.append(
            "enable_chunked_prefill is false: TensorRT-LLM rejects a request whose prompt "
            f"exceeds --max_num_tokens {config.max_num_batched_tokens}."
        )
    return EngineExport(
        engine="trtllm",
        version=version,
        command=command,
        files={
            EXTRA_FILE: comment(f"TensorRT-LLM {version} ({opts.source})")
            + yaml.safe_dump(extra, sort_keys=False),
            SCRIPT: f"#!/bin/sh\nexec {command}\n",
        },
        notes=notes,
    )


def _gpu_refusal(config: EngineConfig, gpu: GPUProfile | None, version: str) -> str | None:
    if gpu is not None and gpu.vendor != "nvidia":
        return (
            f"TensorRT-LLM {version} runs on NVIDIA GPUs only (CUDA); {gpu.name} "
            "is AMD: use vLLM or SGLang on ROCm"
        )
    return native_fp4_refusal(f"TensorRT-LLM {version}", config.quantization, gpu)


def _layout_notes(config: EngineConfig) -> list[str]:
    shape = layout(config)
    notes = []
    if shape.dp > 1:
        notes.append(
            f"attention DP: --tp_size {shape.gpus} counts every GPU, each one attention DP rank "
            "(enable_attention_dp); --max_batch_size and --max_num_tokens are per rank."
        )
    if shape.ep:
        notes.append(
            f"expert parallel: --ep_size {shape.gpus} with moe_tensor_parallel_size 1 puts whole "
            "experts on each GPU (moe_tp x moe_ep = tp_size)."
        )
    return notes


EXPORTER = Exporter(
    name="trtllm",
    display_name="TRT-LLM",
    script=SCRIPT,
    versions=tuple(VERSIONS),
    export=export,
    tables=("trtllm-serve", "trtllm-yaml"),
)
