"""The device part of a calibration: copy bandwidth and GEMM throughput per supported dtype.

On a CPU the base is `tuner.detect_cpu.measure_cpu_profile` (memory from the OS, numpy copy
bandwidth); the 16-bit peak is then the torch matmul rate of the dtype the reference engine
runs in (bfloat16, or float32 where bfloat16 is slower). On CUDA the base is the datasheet
profile NVML matches, and bandwidth and every tensor dtype the device runs are re-measured
with torch, so the profile's peaks are what this device reaches, not what its vendor prints.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from tuner.errors import InputError
from tuner.specs import GPUProfile

__all__ = ["DeviceMeasurement", "measure_device"]

_CPU_GEMM_N = 1024
_CUDA_GEMM_N = 8192
_CUDA_COPY_BYTES = 1024**3
_REPEATS = 5

DeviceMeasurement = dict[str, float]  # what was measured: "copy_gbps", "<dtype>_tflops", ...


def _best_seconds(work: Callable[[], object], sync: Callable[[], None]) -> float:
    """The fastest of a few runs after one warm-up: the device's capability, not the noise."""
    work()
    sync()
    best = float("inf")
    for _ in range(_REPEATS):
        start = time.perf_counter()
        work()
        sync()
        best = min(best, time.perf_counter() - start)
    return max(best, 1e-9)


def _gemm_tflops(torch: Any, dtype: Any, n: int, device: str, sync: Callable[[], None]) -> float:
    """Dense n x n x n matmul throughput of one dtype; 0 when the device cannot run it."""
    a = torch.randn(n, n, device=device).to(dtype)
    b = torch.randn(n, n, device=device).to(dtype)
    try:
        seconds = _best_seconds(lambda: a @ b, sync)
    except RuntimeError:
        return 0.0
    return 2 * n**3 / seconds / 1e12


def _cpu(torch: Any) -> tuple[GPUProfile, DeviceMeasurement]:
    from tuner.detect_cpu import measure_cpu_profile

    base = measure_cpu_profile()
    rates = {
        f"{name}_tflops": _gemm_tflops(torch, getattr(torch, name), _CPU_GEMM_N, "cpu", _no_sync)
        for name in ("float32", "bfloat16")
    }
    measured = {"copy_gbps": base.memory_bandwidth_gbps, **rates}
    # The engine's 16-bit weights run as bfloat16; where that is slower than float32 (no
    # AVX512-BF16/AMX), the float32 rate is the better bound on what a 16-bit layer can reach.
    peak = max(rates.values())
    source = (
        f"calibrated on this host's CPU by tuner calibrate, not a datasheet: "
        f"{base.memory_bandwidth_gbps:.1f} GB/s numpy copy, torch {_CPU_GEMM_N}^3 matmul "
        f"float32 {rates['float32_tflops'] * 1e3:.1f} / bfloat16 "
        f"{rates['bfloat16_tflops'] * 1e3:.1f} GFLOPS, {torch.get_num_threads()} torch thread(s)"
    )
    return base.model_copy(update={"fp16_tflops": round(peak, 5), "source": source}), measured


def _no_sync() -> None:
    return None


def _cuda_int8_tops(torch: Any, sync: Callable[[], None]) -> float:
    """int8 x int8 -> int32 GEMM (torch._int_mm) throughput; 0 where unsupported."""
    n = _CUDA_GEMM_N
    a = torch.randint(-8, 8, (n, n), device="cuda", dtype=torch.int8)
    b = torch.randint(-8, 8, (n, n), device="cuda", dtype=torch.int8)
    try:
        return 2 * n**3 / _best_seconds(lambda: torch._int_mm(a, b), sync) / 1e12
    except (RuntimeError, AttributeError):
        return 0.0


def _cuda_fp8_tflops(torch: Any, sync: Callable[[], None]) -> float:
    """float8_e4m3 GEMM (torch._scaled_mm) throughput; 0 where the device has no FP8 math."""
    n = _CUDA_GEMM_N
    if not hasattr(torch, "float8_e4m3fn") or torch.cuda.get_device_capability() < (8, 9):
        return 0.0
    a = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn)
    b = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn).t()
    one = torch.ones((), device="cuda")
    try:
        work = lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)  # noqa: E731
        return 2 * n**3 / _best_seconds(work, sync) / 1e12
    except (RuntimeError, AttributeError, TypeError):
        return 0.0


def _cuda(torch: Any) -> tuple[GPUProfile, DeviceMeasurement]:
    from tuner.catalog import load_gpu
    from tuner.detect import local_gpu_profile

    base = load_gpu(local_gpu_profile("torch")[0])
    sync = torch.cuda.synchronize
    src = torch.empty(_CUDA_COPY_BYTES, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    copy_gbps = 2 * src.numel() / _best_seconds(lambda: dst.copy_(src), sync) / 1e9
    measured = {
        "copy_gbps": copy_gbps,
        "float16_tflops": _gemm_tflops(torch, torch.float16, _CUDA_GEMM_N, "cuda", sync),
        "bfloat16_tflops": _gemm_tflops(torch, torch.bfloat16, _CUDA_GEMM_N, "cuda", sync),
        "fp8_tflops": _cuda_fp8_tflops(torch, sync),
        "int8_tops": _cuda_int8_tops(torch, sync),
    }
    name = torch.cuda.get_device_name()
    summary = ", ".join(f"{k} {v:.1f}" for k, v in measured.items())
    return base.model_copy(
        update={
            "name": f"{base.name}-calibrated",
            "memory_bandwidth_gbps": round(copy_gbps, 1),
            "fp16_tflops": round(max(measured["float16_tflops"], measured["bfloat16_tflops"]), 1),
            "fp8_tflops": round(measured["fp8_tflops"], 1),
            "int8_tops": round(measured["int8_tops"], 1),
            "source": (
                f"calibrated on this host's {name} by tuner calibrate ({summary}); "
                f"other figures from {base.source}"
            ),
        }
    ), measured


def measure_device(device: str) -> tuple[GPUProfile, DeviceMeasurement]:
    """A profile of `device` ('cpu' or 'cuda') whose peaks were measured here, and the numbers."""
    import torch

    if device == "cpu":
        return _cpu(torch)
    if device.startswith("cuda") and torch.cuda.is_available():
        return _cuda(torch)
    raise InputError(f"device {device!r} is not available here (torch sees no CUDA device)")
