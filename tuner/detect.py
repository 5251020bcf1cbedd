"""Detect local NVIDIA GPUs through NVML and match them to a GPUProfile."""

from __future__ import annotations

import difflib

from pydantic import BaseModel

from tuner.catalog import all_gpus
from tuner.detect_cpu import measure_cpu_profile
from tuner.errors import InputError
from tuner.specs import GPUProfile

__all__ = [
    "MEASURING_BACKENDS",
    "DetectedGPU",
    "detect_gpus",
    "local_device_count",
    "local_gpu_profile",
    "match_profile",
]


class DetectedGPU(BaseModel):
    """One GPU as NVML reports it, with the closest catalog profile."""

    index: int
    name: str
    memory_gib: float
    profile: str | None


def match_profile(nvml_name: str, memory_gib: float | None = None) -> GPUProfile | None:
    """The catalog profile whose alias equals the NVML name, else the closest name and memory."""
    gpus = all_gpus()
    lowered = nvml_name.lower().strip()
    for gpu in gpus:
        if lowered in (a.lower() for a in gpu.aliases):
            return gpu
    candidates = {a.lower(): g for g in gpus for a in [*g.aliases, g.display_name]}
    close = difflib.get_close_matches(lowered, list(candidates), n=5, cutoff=0.6)
    if not close:
        return None
    if memory_gib is None:
        return candidates[close[0]]
    # Several variants share a name (A100 40 GB vs 80 GB): memory breaks the tie.
    return min((candidates[c] for c in close), key=lambda g: abs(g.memory_gib - memory_gib))


def detect_gpus() -> list[DetectedGPU] | str:
    """Every NVIDIA GPU NVML sees, or a one-line reason why none can be read."""
    try:
        import pynvml
    except ImportError:
        return "nvidia-ml-py (pynvml) is not installed"
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return f"no NVIDIA driver found (NVML: {exc})"
    try:
        found = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            name = pynvml.nvmlDeviceGetName(handle)
            name = name.decode() if isinstance(name, bytes) else name
            mem_gib = pynvml.nvmlDeviceGetMemoryInfo(handle).total / 1024**3
            prof = match_profile(name, mem_gib)
            found.append(
                DetectedGPU(
                    index=i,
                    name=name,
                    memory_gib=round(mem_gib, 1),
                    profile=prof.name if prof else None,
                )
            )
        return found
    finally:
        pynvml.nvmlShutdown()


# Backends that measure on this machine rather than predict a named GPU.
MEASURING_BACKENDS = ("torch", "vllm")


def local_device_count() -> int:
    """Devices a measuring backend can use here: the GPUs NVML sees, else 1 (the CPU)."""
    found = detect_gpus()
    return 1 if isinstance(found, str) or not found else len(found)


def local_gpu_profile(backend: str) -> tuple[str | GPUProfile, str]:
    """(profile, one-line note) for a measuring backend run without --gpu: GPU 0 as NVML reports
    it, else this CPU measured; InputError when a GPU matches no profile."""
    if backend not in MEASURING_BACKENDS:
        raise InputError(f"--gpu is required with --backend {backend} (see `tuner profiles`)")
    found = detect_gpus()
    if isinstance(found, str) or not found:
        reason = found if isinstance(found, str) else "NVML reports zero devices"
        cpu = measure_cpu_profile()
        return cpu, (
            f"--gpu not given and no NVIDIA GPU detected ({reason}): measuring on the CPU, "
            f"{cpu.display_name}: {cpu.memory_gib:g} GiB, {cpu.memory_bandwidth_gbps:g} GB/s copy, "
            f"{cpu.fp16_tflops * 1e3:.0f} GFLOPS float32 (profile {cpu.name})"
        )
    gpu = found[0]
    if gpu.profile is None:
        raise InputError(f"--gpu not given and the local {gpu.name} matches no profile; pass "
                         "--gpu NAME or a profile YAML (see `tuner profiles`)")  # fmt: skip
    return gpu.profile, f"--gpu not given: measuring on GPU 0, {gpu.name} (profile {gpu.profile})"
