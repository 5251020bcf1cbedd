"""Detect local GPUs (NVIDIA through NVML, AMD through AMD SMI) and match them to a GPUProfile."""

from __future__ import annotations

import difflib
import re

from pydantic import BaseModel

from tuner.catalog import all_gpus
from tuner.detect_amd import amd_smi_gpus
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
    """One GPU as NVML or AMD SMI reports it, with the closest catalog profile."""

    index: int
    name: str
    memory_gib: float
    profile: str | None
    vendor: str = "nvidia"


def _normalized(name: str) -> str:
    # vLLM on ROCm spells device names with underscores ("AMD_Instinct_MI300X").
    return " ".join(name.replace("_", " ").lower().split())


def _model_number(name: str) -> str | None:
    # The first token holding a digit names the chip ("h100", "b300", "mi300x", "6000").
    found = re.search(r"[a-z]*\d[a-z0-9]*", name)
    return found.group() if found else None


def match_profile(nvml_name: str, memory_gib: float | None = None) -> GPUProfile | None:
    """The profile whose alias equals the NVML / AMD SMI name, else the closest name and memory
    among profiles of the same model number; None when nothing is close."""
    gpus = all_gpus()
    lowered = _normalized(nvml_name)
    for gpu in gpus:
        if lowered in (_normalized(a) for a in gpu.aliases):
            return gpu
    candidates = {_normalized(a): g for g in gpus for a in [*g.aliases, g.display_name]}
    # A near-identical string of another chip (GB300 vs B300, MI308X vs MI300X, H20 vs H200) is
    # a different GPU: its datasheet numbers would be wrong, so it is no match at all.
    model = _model_number(lowered)
    candidates = {k: g for k, g in candidates.items() if _model_number(k) == model}
    close = difflib.get_close_matches(lowered, list(candidates), n=5, cutoff=0.6)
    if not close:
        return None
    if memory_gib is None:
        return candidates[close[0]]
    # Several variants share a name (A100 40 GB vs 80 GB): memory breaks the tie.
    return min((candidates[c] for c in close), key=lambda g: abs(g.memory_gib - memory_gib))


def _detected(index: int, name: str, mem_gib: float, vendor: str) -> DetectedGPU:
    prof = match_profile(name, mem_gib)
    return DetectedGPU(
        index=index,
        name=name,
        memory_gib=round(mem_gib, 1),
        profile=prof.name if prof else None,
        vendor=vendor,
    )


def detect_gpus() -> list[DetectedGPU] | str:
    """Every GPU NVML (NVIDIA) or else AMD SMI (AMD) sees, or a one-line reason why none can be
    read; the AMD reason is added only where `amdsmi` is installed."""
    nvidia = _nvml_gpus()
    if not isinstance(nvidia, str) and nvidia:
        return nvidia
    amd = amd_smi_gpus()
    if isinstance(amd, list) and amd:
        return [_detected(i, name, mem, "amd") for i, (name, mem) in enumerate(amd)]
    if isinstance(nvidia, str) and isinstance(amd, str):
        return f"{nvidia}; {amd}"
    return nvidia


def _nvml_gpus() -> list[DetectedGPU] | str:
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
            found.append(_detected(i, name, mem_gib, "nvidia"))
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
        raise InputError(
            f"--gpu not given and the local {gpu.name} matches no profile; pass "
            "--gpu NAME or a profile YAML (see `tuner profiles`)"
        )
    return gpu.profile, f"--gpu not given: measuring on GPU 0, {gpu.name} (profile {gpu.profile})"
