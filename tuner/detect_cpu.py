"""This host's CPU as a device profile, measured here, for measuring backends on a GPU-less machine.

The catalog holds datasheet GPUs only. When torch or vLLM measure on a CPU, the run still needs a
profile (memory for the planner, bandwidth and FLOPS for reports), so we measure the two roofline
numbers in about a second and say in `source` that they are measurements, not a datasheet.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from tuner.specs import Architecture, GPUProfile

__all__ = ["CPU_PROFILE_NAME", "cpu_name", "measure_cpu_profile"]

CPU_PROFILE_NAME = "cpu-local"
# Big enough to leave every cache (the largest L3 here is tens of MiB), small enough to be quick.
_COPY_BYTES = 128 * 1024**2
_MATMUL_N = 1024
_REPEATS = 5


def _best_seconds(work: Callable[[], object], repeats: int = _REPEATS) -> float:
    """The fastest of `repeats` runs: the device's capability, not the machine's noise."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        work()
        best = min(best, time.perf_counter() - start)
    return max(best, 1e-9)


def _copy_bandwidth_gbps() -> float:
    """DRAM bandwidth from a large array copy (one read + one write per byte)."""
    src = np.ones(_COPY_BYTES // 8, dtype=np.float64)
    dst = np.empty_like(src)
    seconds = _best_seconds(lambda: np.copyto(dst, src))
    return 2 * src.nbytes / seconds / 1e9


def _matmul_tflops() -> float:
    """Dense float32 matmul throughput through numpy's BLAS, on all cores."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((_MATMUL_N, _MATMUL_N), dtype=np.float32)
    b = rng.standard_normal((_MATMUL_N, _MATMUL_N), dtype=np.float32)
    seconds = _best_seconds(lambda: a @ b)
    return 2 * _MATMUL_N**3 / seconds / 1e12


def cpu_name() -> str:
    """The model name /proc/cpuinfo reports, else the platform's processor string."""
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or "unknown CPU"


def _l2_mib() -> float:
    """Level-2 cache of CPU 0 from sysfs (1 MiB when the kernel does not say)."""
    for index in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        try:
            if (index / "level").read_text().strip() != "2":
                continue
            size = (index / "size").read_text().strip().upper()
        except OSError:
            continue
        scale = {"K": 1 / 1024, "M": 1.0}.get(size[-1:], 1 / 1024**2)
        return float(size.rstrip("KM")) * scale
    return 1.0


def _memory_gib() -> float:
    """Physical memory of the host."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1024**3


def measure_cpu_profile() -> GPUProfile:
    """A device profile of this CPU: memory from the OS, bandwidth and FLOPS measured (~1 s)."""
    cores = os.cpu_count() or 1
    bandwidth = _copy_bandwidth_gbps()
    tflops = _matmul_tflops()
    name = cpu_name()
    return GPUProfile(
        name=CPU_PROFILE_NAME,
        display_name=f"{name} ({cores} cores, measured)",
        architecture=Architecture.cpu,
        sm_count=cores,
        memory_gib=round(_memory_gib(), 2),
        memory_bandwidth_gbps=round(bandwidth, 2),
        # No tensor cores: every 16-bit figure is the float32 matmul rate measured here.
        fp16_tflops=round(tflops, 4),
        fp8_tflops=0,
        int8_tops=0,
        int4_tops=0,
        l2_mib=round(_l2_mib(), 3),
        nvlink_gbps=0,
        # Tensor-parallel ranks on one host exchange through memory.
        pcie_gbps=round(bandwidth, 2),
        tdp_w=0,
        source=(
            f"measured on this host by tuner: {_COPY_BYTES // 1024**2} MiB numpy copy "
            f"({bandwidth:.1f} GB/s), float32 {_MATMUL_N}^3 matmul ({tflops * 1e3:.1f} GFLOPS), "
            "best of 5; not a datasheet"
        ),
    )
