"""SGLang exporter: EngineConfig -> `python -m sglang.launch_server` arguments.

Option names and value spellings from SGLang's `python/sglang/srt/server_args.py` (ServerArgs:
QUANTIZATION_CHOICES, kv_cache_dtype choices, chunked_prefill_size = -1 disables chunking,
disable_radix_cache, page_size, speculative_* options; read at sglang main 469c63e, the 0.5
series) and `python/sglang/srt/speculative/spec_info.py` (NGRAM needs the overlap scheduler off).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from tuner.errors import InputError
from tuner.export.bundle import EngineExport, draft_source, shell_join
from tuner.export.tables import ROWS, Row, check_rows, row_args, row_options
from tuner.specs import EngineConfig, Quantization

__all__ = ["LATEST", "VERSIONS", "SGLangOptions", "export", "launch_args"]


@dataclass(frozen=True)
class QuantSpelling:
    """How one of our weight quantizations is requested from SGLang."""

    dtype: str
    option: str | None  # which SGLang option carries it: "quantization" or "torchao_config"
    value: str | None
    checkpoint: str | None  # what checkpoint must be served; None = the original works


@dataclass(frozen=True)
class SGLangOptions:
    """Every SGLang option this exporter may emit, for one SGLang version."""

    source: str
    flags: Mapping[str, str]
    quantization: Mapping[Quantization, QuantSpelling]
    rows: tuple[Row, ...]  # the plain knobs (tuner.export.tables)
    ngram: str  # --speculative-algorithm value for prompt-lookup (n-gram) drafting
    draft_model: str  # --speculative-algorithm value for a separate small draft model


_Q = QuantSpelling
VERSIONS: dict[str, SGLangOptions] = {
    "0.5": SGLangOptions(
        source="sglang 0.5 (main 469c63e) python/sglang/srt/server_args.py",
        flags={
            "model": "--model-path",
            "dtype": "--dtype",
            "quantization": "--quantization",
            "torchao_config": "--torchao-config",
            "speculative_algorithm": "--speculative-algorithm",
            "speculative_draft_model_path": "--speculative-draft-model-path",
            "speculative_num_steps": "--speculative-num-steps",
            "speculative_eagle_topk": "--speculative-eagle-topk",
            "speculative_num_draft_tokens": "--speculative-num-draft-tokens",
            "disable_overlap_schedule": "--disable-overlap-schedule",
        },
        quantization={
            Quantization.bf16: _Q("bfloat16", None, None, None),
            Quantization.fp16: _Q("float16", None, None, None),
            Quantization.fp8: _Q("bfloat16", "quantization", "fp8", None),
            Quantization.int8: _Q(
                "bfloat16",
                "quantization",
                "w8a8_int8",
                "a pre-quantized W8A8 int8 checkpoint (llm-compressor)",
            ),
            Quantization.int8_wo: _Q("bfloat16", "torchao_config", "int8wo", None),
            Quantization.int4_awq: _Q(
                "float16", "quantization", "awq_marlin", "a pre-quantized AWQ int4 checkpoint"
            ),
            Quantization.int4_gptq: _Q(
                "float16", "quantization", "gptq_marlin", "a pre-quantized GPTQ int4 checkpoint"
            ),
        },  # fmt: skip
        rows=ROWS["sglang"]["0.5"],
        ngram="NGRAM",
        draft_model="STANDALONE",
    ),
}
LATEST = "0.5"


def launch_args(config: EngineConfig, model: str, *, version: str = LATEST) -> list[str]:
    """Arguments of `python -m sglang.launch_server` reproducing `config`."""
    if version not in VERSIONS:
        raise InputError(f"unknown SGLang version {version!r}; known: {', '.join(VERSIONS)}")
    opts = VERSIONS[version]
    f = opts.flags
    engine = f"SGLang {version}"
    check_rows(opts.rows, config, engine)
    quant = opts.quantization[config.quantization]
    args = [f["model"], model, f["dtype"], quant.dtype]
    if quant.option is not None and quant.value is not None:
        args += [f[quant.option], quant.value]
    args += row_args(opts.rows, config, engine)
    k = config.num_speculative_tokens
    if k and config.draft_model == "ngram":
        # SGLang counts the verified (bonus) token in num_draft_tokens: chain of k -> k + 1.
        args += [f["speculative_algorithm"], opts.ngram,
                 f["speculative_num_draft_tokens"], str(k + 1),
                 f["disable_overlap_schedule"]]  # fmt: skip
    elif k and config.draft_model:
        args += [f["speculative_algorithm"], opts.draft_model,
                 f["speculative_draft_model_path"], draft_source(config.draft_model),
                 f["speculative_num_steps"], str(k),
                 f["speculative_eagle_topk"], "1",
                 f["speculative_num_draft_tokens"], str(k + 1)]  # fmt: skip
    allowed = set(f.values()) | row_options(opts.rows)
    stray = [a for a in args if a.startswith("--") and a not in allowed]
    if stray:
        raise AssertionError(f"SGLang exporter produced options outside its table: {stray}")
    return args


def export(config: EngineConfig, model: str, *, version: str = LATEST) -> EngineExport:
    """SGLang launch recipe and caveats."""
    args = launch_args(config, model, version=version)
    command = shell_join(["python", "-m", "sglang.launch_server", *args])
    quant = VERSIONS[version].quantization[config.quantization]
    notes = []
    if quant.checkpoint:
        notes.append(f"{config.quantization.value} needs {quant.checkpoint}; pass it as "
                     "--model-path.")  # fmt: skip
    if config.quantization is Quantization.int8_wo:
        notes.append("int8-wo quantizes at load time through torchao (pip install torchao).")
    notes.append(
        "--mem-fraction-static covers weights + KV pool (vLLM's gpu_memory_utilization also "
        "covers activations); lower it if SGLang reports out-of-memory at startup."
    )
    return EngineExport(
        engine="sglang",
        version=version,
        command=command,
        files={
            "sglang.sh": f"#!/bin/sh\n# SGLang {version} ({VERSIONS[version].source})\n"
            f"exec {command}\n"
        },  # fmt: skip
        notes=notes,
    )
