"""Measured grouped MoE GEMM efficiency: the shipped grid distilled from NVIDIA's kernel tables.

`tuner/data/moe_gemm_efficiency.json` holds, per engine and precision class, the median fraction
of the datasheet peak that one MoE layer's grouped GEMMs reach at m token rows per touched
expert and n expert columns per GPU, distilled offline by `scripts/distill_moe_kernels.py` from
the measured tables of the PyPI package aiconfigurator-core 0.12.0 (Apache-2.0) on the GPUs it
covers (A100, H100, H200, B200, B300, GB200, L40S, RTX PRO 6000). Distilled rather than read at
run time: the core install stays light (that package needs Python 3.11+ and pyarrow), and a
grid of medians over GPUs, shapes and versions smooths the tables' known quirks (small shapes
timed warm in L2, rows edited between releases). Other GPUs (RTX 4090/5090, AMD Instinct) keep
the roofline and their calibration (`tuner.perf.moe`'s padded-tile model).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import cache
from importlib import resources

__all__ = [
    "GRID_FILE",
    "MoEGemmGrid",
    "expert_kernel_class",
    "kernel_class",
    "moe_gemm_grid",
    "moe_kernel_engine",
    "runs_marlin",
    "weight_only_class",
]

GRID_FILE = "moe_gemm_efficiency.json"
# Engines whose grid a class borrows when its own engine has none (too few measured rows).
_FALLBACK_ENGINES = ("vllm", "sglang", "trtllm")


@dataclass(frozen=True)
class MoEGemmGrid:
    """Peak fractions on a log2 grid of (rows per touched expert, expert columns per GPU)."""

    m_log2: tuple[int, ...]
    n_log2: tuple[int, ...]
    values: tuple[tuple[float, ...], ...]  # [m cell][n cell]
    floor_s: float  # no MoE layer of this engine runs faster (its kernels' launch latency)

    def efficiency(self, rows: float, cols: float) -> float:
        """Fraction of peak at `rows` per expert and `cols` columns: log-linear between cells,
        clamped at the grid's edges (beyond the last row cell the rate stays flat)."""
        x = _position(math.log2(max(rows, 1e-9)), self.m_log2)
        y = _position(math.log2(max(cols, 1e-9)), self.n_log2)
        i, j = min(int(x), len(self.m_log2) - 2), min(int(y), len(self.n_log2) - 2)
        fx, fy = x - i, y - j
        v = self.values
        logs = (
            (1 - fx) * (1 - fy) * math.log(v[i][j])
            + fx * (1 - fy) * math.log(v[i + 1][j])
            + (1 - fx) * fy * math.log(v[i][j + 1])
            + fx * fy * math.log(v[i + 1][j + 1])
        )
        return math.exp(logs)


def _position(value: float, grid: tuple[int, ...]) -> float:
    """Fractional index of `value` on an evenly spaced integer grid, clamped to it."""
    return min(max(value - grid[0], 0.0), float(grid[-1] - grid[0])) / (grid[1] - grid[0])


def kernel_class(weight_only: bool, fp4_path: bool, low_precision: bool) -> str:
    """The grid's precision class of a kernel path: w (weight-only 4/8-bit on the 16-bit
    peak), 4 (W4A4 FP4), 8 (FP8 / W4A8) or 16."""
    if weight_only:
        return "w"
    if fp4_path:
        return "4"
    return "8" if low_precision else "16"


_MARLIN = "w"


def weight_only_class(marlin: bool, compute_capability: float | None) -> str:
    """The grid key of a weight-only kernel: Marlin's (`w`) or the format's own (`wx`), per GPU
    architecture (`@sm<major>`), since Marlin's mma.sync instructions reach a different share
    of each architecture's datasheet peak (scripts/distill_moe_kernels.py)."""
    cls = _MARLIN if marlin else "wx"
    return cls if compute_capability is None else f"{cls}@sm{int(compute_capability)}"


def runs_marlin(cls: str) -> bool:
    """Whether a grid class (`weight_only_class`) is Marlin's kernels."""
    return cls.partition("@")[0] == _MARLIN


def expert_kernel_class(
    cls: str, mxfp4: bool, engine: str, compute_capability: float | None, marlin: bool
) -> str:
    """The grid key of the routed experts' kernels: `cls` (tuner.perf.kernel_rates), with a
    weight-only path resolved to the kernels the engine runs on this GPU.

    Int4/int8 weight-only experts run Marlin's kernels (vLLM's and SGLang's MoE Marlin
    methods). MXFP4 experts without FP4 math run vLLM's `get_mxfp4_backend` choice (vllm 0.18.0
    model_executor/layers/quantization/mxfp4.py l.109-169): OpenAI's triton_kernels on sm90-
    sm10x unless VLLM_MXFP4_USE_MARLIN (`marlin`), Marlin below sm90 and on sm12x; SGLang and
    TensorRT-LLM run triton_kernels on Hopper (SGLang's triton_kernel runner, TensorRT-LLM's
    TRITON MoE backend that its gpt-oss guide sets)."""
    if cls != "w":
        return cls
    own_kernels = mxfp4 and not marlin
    if own_kernels and engine == "vllm" and compute_capability is not None:
        own_kernels = 9.0 <= compute_capability < 11.0
    return weight_only_class(not own_kernels, compute_capability)


@cache
def _document() -> dict:
    text = resources.files("tuner").joinpath("data", GRID_FILE).read_text(encoding="utf-8")
    return dict(json.loads(text))


# SGLang on SM100 (B200/B300, compute capability 10.x) runs FP8 and FP4 experts on FlashInfer's
# TensorRT-LLM-generated kernels: `ServerArgs` picks `moe_runner_backend = "flashinfer_trtllm"`
# for DeepSeek-V3/R1, Qwen3-MoE and other MoE architectures when `moe_a2a_backend` is none and
# the quantization is fp8 / modelopt_fp8 / modelopt_fp4 (sglang 0.5.9 srt/server_args.py,
# `_handle_model_specific_adjustments`, "Use flashinfer_trtllm as MoE runner backend on sm100").
_SM100_FLASHINFER_TRTLLM = {"8", "4"}


def moe_kernel_engine(engine: str, cls: str, compute_capability: float | None) -> str:
    """Whose measured MoE kernels `engine` runs for `cls` on a GPU of this compute capability."""
    sm100 = compute_capability is not None and 10.0 <= compute_capability < 11.0
    if engine == "sglang" and sm100 and cls in _SM100_FLASHINFER_TRTLLM:
        return "trtllm"
    return engine


@cache
def moe_gemm_grid(engine: str, cls: str, gpu_name: str) -> MoEGemmGrid | None:
    """The measured grid of `engine`'s `cls` kernels (a weight-only class keyed per
    architecture, `weight_only_class`), or None on a GPU the tables do not cover (its MoE GEMMs
    keep the roofline). A class one engine lacks borrows another engine's."""
    doc = _document()
    if gpu_name not in doc["gpus"]:
        return None
    tables = doc["efficiency"]
    for name in (engine, *_FALLBACK_ENGINES):
        grid = tables.get(name, {}).get(cls)
        if grid is not None:
            values = tuple(tuple(r) for r in grid)
            floor = doc["floor_s"].get(name, 0.0)
            return MoEGemmGrid(tuple(doc["m_log2"]), tuple(doc["n_log2"]), values, floor)
    return None
