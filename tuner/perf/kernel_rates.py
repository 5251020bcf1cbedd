"""What one weight format's GEMMs reach on one GPU: achievable FLOP/s and weight-streaming
bytes/s from the datasheet peaks and the shared efficiency fractions, and the measured MoE
grid's class of the format (tuner.perf.moe_kernels). The step-cost model (tuner.perf.costs)
prices the dense GEMMs and the routed experts each in their own format."""

from __future__ import annotations

from dataclasses import dataclass

from tuner.perf.efficiency import Efficiency
from tuner.perf.moe_kernels import kernel_class, runs_marlin
from tuner.perf.precision import FP4_FORMATS, Precision, precision_for
from tuner.specs import GPUProfile, Quantization

__all__ = ["GIGA", "TERA", "KernelRates", "kernel_path", "kernel_rates"]

TERA = 1e12
GIGA = 1e9


@dataclass(frozen=True)
class KernelRates:
    """One weight format's achievable GEMM and weight-streaming rates on a GPU."""

    precision: Precision
    gemm_rate: float  # achievable FLOP/s, dequant slowdown included
    weight_rate: float  # achievable weight bytes/s, the format's kernel factor included
    kernel_class: str  # the measured MoE grid's precision class (a fraction of the peak below)

    @property
    def peak_flops_per_s(self) -> float:
        """The datasheet peak of the format's math."""
        return self.precision.gemm_tflops * TERA


def kernel_rates(
    quant: Quantization, gpu: GPUProfile, eff: Efficiency, row_len: int
) -> KernelRates:
    """The rates GEMMs stored in `quant` reach on `gpu`."""
    prec = precision_for(quant, gpu, row_len)
    low_precision = prec.gemm_tflops > gpu.fp16_tflops
    flops_fraction = (
        eff.low_precision_gemm_flops_fraction if low_precision else eff.gemm_flops_fraction
    )
    fp4_path = prec.gemm_tflops == gpu.fp4_tflops > 0
    if fp4_path:
        flops_fraction = eff.fp4_gemm_flops_fraction
    gemm_rate = prec.gemm_tflops * TERA * flops_fraction
    weight_rate = gpu.memory_bandwidth_gbps * GIGA * eff.weight_bandwidth_fraction
    if quant in FP4_FORMATS and not prec.weight_only:
        weight_rate *= eff.fp4_weight_bandwidth_factor
    if prec.weight_only:
        gemm_rate /= 1.0 + eff.weight_only_dequant_overhead
        weight_rate *= eff.weight_only_bandwidth_factor
    # The measured MoE grids are fractions of the peak of the kernel's own math.
    return KernelRates(
        prec, gemm_rate, weight_rate, kernel_class(prec.weight_only, fp4_path, low_precision)
    )


def kernel_path(dense: Precision, experts: Precision, moe: bool, expert_class: str = "") -> str:
    """The kernel path's label: one format, or the experts' and the dense layers' apart (MXFP4
    experts on Marlin's weight-only kernels say so)."""
    label = experts.label
    if runs_marlin(expert_class) and label.startswith("mxfp4"):
        label = label.split(" (")[0] + " (Marlin)"
    if moe and dense.label != label:
        return f"{label} experts, {dense.label} dense"
    return dense.label
