"""SGLang exporter: EngineConfig -> `python -m sglang.launch_server` arguments.

Option names and value spellings from SGLang 0.5.5 (PyPI wheel) `python/sglang/srt/server_args.py`
(ServerArgs: QUANTIZATION_CHOICES with fp8 / modelopt_fp4 / mxfp4, kv_cache_dtype choices,
chunked_prefill_size = -1 disables chunking, disable_radix_cache, page_size, speculative_*
options; --tp-size, --dp-size, --enable-dp-attention, --ep-size: under DP attention --tp-size
counts every GPU and each of the --dp-size ranks runs attention TP = tp_size / dp_size
(`layers/dp_attention.py`), the chunk is divided by dp_size there and --max-running-requests
in `managers/tp_worker.py`; NGRAM and STANDALONE speculation refuse DP attention) and
`python/sglang/srt/speculative/spec_info.py` (NGRAM needs the overlap scheduler off).
`configs/model_config.py` _verify_quantization: the flag must match the checkpoint's method
(ModelOpt NVFP4 -> modelopt_fp4). sglang 0.5.23 still accepts `--dp-size N
--enable-dp-attention` but marks it deprecated for `--attn-dp-size N` (arg_groups/fields).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from tuner.errors import InputError
from tuner.export.bundle import (
    EngineExport,
    ExportTarget,
    amd_fp8_note,
    comment,
    draft_source,
    native_fp4_refusal,
    shell_join,
)
from tuner.export.registry import Exporter
from tuner.export.tables import ROWS, Row, check_rows, fp8_anywhere, layout, row_args, row_options
from tuner.specs import MTP, NGRAM, EngineConfig, GPUProfile, Quantization

__all__ = ["EXPORTER", "LATEST", "SCRIPT", "VERSIONS", "SGLangOptions", "export", "launch_args"]

SCRIPT = "sglang.sh"


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
    mtp: str  # --speculative-algorithm value for the model's own MTP layers


_Q = QuantSpelling
_FP8_BLOCK = (
    "a block-scaled FP8 checkpoint (quant_method fp8, weight_block_size [128, 128]; "
    "DeepSeek-V3 and Qwen3-*-FP8 ship one)"
)
_NVFP4 = "an NVFP4 checkpoint exported by NVIDIA ModelOpt (hf_ptq.py --qformat nvfp4)"
_MXFP4 = "an MXFP4 checkpoint (quant_method mxfp4, MoE experts only; gpt-oss ships one)"
VERSIONS: dict[str, SGLangOptions] = {
    "0.5": SGLangOptions(
        # Kept byte-for-byte for the golden .sh headers; the spellings were re-checked against
        # 0.5.5 (module docstring), 469c63e itself being a much older commit.
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
            Quantization.fp8_block: _Q("bfloat16", "quantization", "fp8", _FP8_BLOCK),
            Quantization.nvfp4: _Q("bfloat16", "quantization", "modelopt_fp4", _NVFP4),
            Quantization.mxfp4: _Q("bfloat16", "quantization", "mxfp4", _MXFP4),
        },
        rows=ROWS["sglang"]["0.5"],
        ngram="NGRAM",
        draft_model="STANDALONE",
        mtp="EAGLE",
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
    spec = config.num_speculative_tokens and config.draft_model
    if spec and config.draft_model != MTP and layout(config).dp > 1:
        raise InputError(
            f"{engine} runs no speculative decoding (NGRAM or STANDALONE) with DP "
            "attention (server_args.py _handle_speculative_decoding)"
        )
    quant = opts.quantization[config.quantization]
    args = [f["model"], model, f["dtype"], quant.dtype]
    if quant.option is not None and quant.value is not None:
        args += [f[quant.option], quant.value]
    args += row_args(opts.rows, config, engine)
    k = config.num_speculative_tokens
    if k and config.draft_model == NGRAM:
        # SGLang counts the verified (bonus) token in num_draft_tokens: chain of k -> k + 1.
        args += [
            f["speculative_algorithm"],
            opts.ngram,
            f["speculative_num_draft_tokens"],
            str(k + 1),
            f["disable_overlap_schedule"],
        ]
    elif k and config.draft_model:
        # A chain of k proposals (top-1), verified with the bonus token. The checkpoint's MTP
        # layers run as SGLang's EAGLE draft, whose path defaults to the model itself.
        algorithm = opts.mtp if config.draft_model == MTP else opts.draft_model
        args += [f["speculative_algorithm"], algorithm]
        if config.draft_model != MTP:
            args += [f["speculative_draft_model_path"], draft_source(config.draft_model)]
        args += [
            f["speculative_num_steps"],
            str(k),
            f["speculative_eagle_topk"],
            "1",
            f["speculative_num_draft_tokens"],
            str(k + 1),
        ]
    allowed = set(f.values()) | row_options(opts.rows)
    stray = [a for a in args if a.startswith("--") and a not in allowed]
    if stray:
        raise AssertionError(f"SGLang exporter produced options outside its table: {stray}")
    return args


def export(
    config: EngineConfig,
    target: ExportTarget | str,
    *,
    version: str = LATEST,
    gpu: GPUProfile | None = None,
) -> EngineExport:
    """SGLang launch recipe and caveats (ROCm ones and the FP4 refusal when the target's GPU is
    known; a model id is a target without one, `gpu` sets it)."""
    at = ExportTarget.of(target, gpu=gpu)
    if refusal := native_fp4_refusal(f"SGLang {version}", config.quantization, at.gpu):
        raise InputError(refusal)
    args = launch_args(config, at.model, version=version)
    command = shell_join(["python", "-m", "sglang.launch_server", *args])
    quant = VERSIONS[version].quantization[config.quantization]
    notes = []
    if quant.checkpoint:
        notes.append(
            f"{config.quantization.value} needs {quant.checkpoint}; pass it as --model-path."
        )
    if config.quantization is Quantization.int8_wo:
        notes.append("int8-wo quantizes at load time through torchao (pip install torchao).")
    notes += _layout_notes(config)
    if not config.enable_chunked_prefill:
        # SGLang's PrefillAdder always admits the first prompt of a prefill batch, so it starts
        # and serves what vLLM's stricter rule (tuner.validity.unchunked_reason) admits.
        notes.append(
            "chunked prefill is off (--chunked-prefill-size -1): SGLang prefills each prompt "
            f"whole and runs one longer than --max-prefill-tokens "
            f"{config.max_num_batched_tokens} alone in its prefill batch."
        )
    amd = amd_fp8_note("SGLang", at.gpu) if fp8_anywhere(config) else None
    notes += [amd] if amd else []
    notes.append(
        "--mem-fraction-static covers weights + KV pool (vLLM's gpu_memory_utilization also "
        "covers activations); lower it if SGLang reports out-of-memory at startup."
    )
    return EngineExport(
        engine="sglang",
        version=version,
        command=command,
        files={
            SCRIPT: "#!/bin/sh\n"
            + comment(f"SGLang {version} ({VERSIONS[version].source})")
            + f"exec {command}\n"
        },
        notes=notes,
    )


def _layout_notes(config: EngineConfig) -> list[str]:
    shape = layout(config)
    notes = []
    if shape.dp > 1:
        notes.append(
            f"DP attention: --tp-size {shape.gpus} counts every GPU; each of the {shape.dp} "
            f"ranks runs attention TP {shape.tp}. SGLang divides --max-running-requests and "
            "--chunked-prefill-size by --dp-size, so both are the per-rank limit x DP. Its "
            "DP attention covers DeepSeek-V2/V3 and Qwen2/3-MoE models (server_args.py)."
        )
    if shape.ep:
        notes.append(
            f"expert parallel: --ep-size {shape.gpus} puts whole experts on each GPU; the "
            "default --moe-a2a-backend none gathers tokens, deepep dispatches them all-to-all "
            "(needs DeepEP installed)."
        )
    return notes


EXPORTER = Exporter(
    name="sglang",
    display_name="SGLang",
    script=SCRIPT,
    versions=tuple(VERSIONS),
    export=export,
    tables=("sglang",),
)
