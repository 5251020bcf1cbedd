"""Distil the grouped MoE GEMM efficiency grid shipped in tuner/data/moe_gemm_efficiency.json.

Source: NVIDIA's measured kernel tables in the PyPI package `aiconfigurator-core` (Apache-2.0),
`aiconfigurator_core/systems/data/<gpu>/moe/<engine>/<version>/moe_perf.parquet`. Each row
times one MoE layer's grouped GEMMs (gate-up and down) for a token count, hidden and
intermediate size, top-k, expert count and TP x EP split. This script keeps the rows with
balanced routing, TP-sharded experts (EP 1) and hidden >= 2048, and turns each into an
efficiency: the layer's FLOPs (2 x tokens x top-k x 3 x hidden x intermediate / TP) over its
time, as a fraction of its roofline: the larger of its FLOPs at the GPU's datasheet peak for the
kernel's precision class and its touched experts' weight bytes at the datasheet bandwidth (our
hardware_profiles/*.yaml). It bins them by rows per touched expert (m) and expert columns per
GPU (n) on a log2 grid and stores, per engine and class, the median over GPUs, model shapes
and versions (the newest version of each engine per GPU). Empty cells take the nearest filled
cell of their row, then column. Weight-only kernels (16-bit activations) split in two classes,
each stored per GPU architecture (`<class>@sm<major>`, tuner.perf.moe_kernels.weight_only_class):
`w`, Marlin's kernels (vLLM's and SGLang's int4/int8 weight-only MoE, and MXFP4 where Marlin is
chosen), and `wx`, the format's own weight-only kernels (OpenAI's triton_kernels MXFP4 on Hopper,
FlashInfer's TensorRT-LLM MXFP4 x BF16 on Blackwell). Marlin issues Ampere-style mma.sync
instructions on every architecture, so its share of the datasheet 16-bit peak (which Hopper
reaches with wgmma and Blackwell with tcgen05) differs by architecture: at 4096 rows per
expert it reaches 0.46 of it on sm8x, 0.24 on sm90, 0.11 on sm100 and 0.54 on sm120, while the
MXFP4 kernels reach 0.57 on sm90 and 0.24 on sm100; a median over architectures fits none of
them. A measured time faster than the roofline (the tables' small
shapes timed warm in L2) counts as the roofline. Along m each cell takes the best efficiency at
or above it, so that a layer's time never falls as it gets more tokens; the launch-latency
bound of the fewest-row cells becomes `floor_s`, per engine the median time of a one-token
layer, below which no MoE layer runs.

Needs pandas and pyarrow (not dependencies of tuner):

    python -m venv /tmp/aic && /tmp/aic/bin/pip install aiconfigurator-core pandas pyarrow pyyaml
    /tmp/aic/bin/python scripts/distill_moe_kernels.py [--data DIR] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections import defaultdict
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tuner.perf.moe_kernels import weight_only_class  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tuner" / "data" / "moe_gemm_efficiency.json"
# aiconfigurator's system folder -> our GPU profile (hardware_profiles/<name>.yaml).
SYSTEMS = {
    "a100_sxm": "a100-80gb-sxm",
    "h100_sxm": "h100-sxm",
    "h200_sxm": "h200-sxm",
    "b200_sxm": "b200",
    "b300_sxm": "b300",
    "gb200": "gb200",
    "l40s": "l40s",
    "rtx_pro_6000_server": "rtx-pro-6000",
}
# The kernel's precision class (tuner.perf.moe_kernels.kernel_class) and the peak it runs on.
# Weight bytes per parameter with block scales (tuner.perf.precision's figures).
CLASSES = {
    "bfloat16": ("16", "fp16_tflops", 2.0),
    "float16": ("16", "fp16_tflops", 2.0),
    "fp8": ("8", "fp8_tflops", 1.0),
    "fp8_block": ("8", "fp8_tflops", 1.0 + 4.0 / 128**2),
    "w4a8_mxfp4_mxfp8": ("8", "fp8_tflops", 0.5 + 1.0 / 32),
    "w4afp8": ("8", "fp8_tflops", 0.5 + 2.0 / 128),
    "nvfp4": ("4", "fp4_tflops", 0.5 + 1.0 / 16),
    "w4a16_mxfp4": ("w", "fp16_tflops", 0.5 + 1.0 / 32),
    "int4_wo": ("w", "fp16_tflops", 0.5 + 2.0 / 128),
    "int8_wo": ("w", "fp16_tflops", 1.0),
}
M_LOG2 = list(range(0, 13))  # 1 .. 4096 token rows per touched expert
N_LOG2 = list(range(6, 15))  # 64 .. 16384 expert columns per GPU
MIN_HIDDEN = 2048
# Uniform routing, as tuner.perf.moe assumes when it counts the experts a batch touches.
DISTRIBUTION = "balanced"


def _version_key(text: str) -> tuple:
    return tuple(int(p) if p.isdigit() else 0 for p in text.replace("rc", ".").split("."))


def _touched(experts: int, topk: int, tokens: int) -> float:
    return experts * (1.0 - (1.0 - topk / experts) ** tokens)


def _cell(value: float, grid: list[int]) -> int:
    return min(range(len(grid)), key=lambda i: abs(grid[i] - math.log2(value)))


def collect(data: Path) -> tuple[dict, list[str]]:
    """log-efficiencies per (engine, class, m cell, n cell); the sources read."""
    import pandas as pd  # optional: only this script needs it

    cells: dict = defaultdict(list)
    sources = []
    for system, profile in SYSTEMS.items():
        peaks = yaml.safe_load((ROOT / "hardware_profiles" / f"{profile}.yaml").read_text())
        bandwidth = float(peaks["memory_bandwidth_gbps"])
        for engine_dir in sorted((data / system / "moe").glob("*")):
            versions = [v for v in engine_dir.iterdir() if (v / "moe_perf.parquet").exists()]
            if not versions:
                continue
            newest = max(versions, key=lambda v: _version_key(v.name))
            path = newest / "moe_perf.parquet"
            sources.append(str(path.relative_to(data)))
            rows = pd.read_parquet(path)
            rows = rows[
                (rows.distribution == DISTRIBUTION)
                & (rows.moe_ep_size == 1)
                & (rows.hidden_size >= MIN_HIDDEN)
            ]
            for r in rows.itertuples():
                if r.moe_dtype not in CLASSES:
                    continue
                cls, peak_key, weight_bytes = CLASSES[r.moe_dtype]
                if cls == "w":
                    cls = weight_only_class(
                        "marlin" in r.kernel_source, float(peaks["compute_capability"])
                    )
                peak = float(peaks.get(peak_key) or 0.0)
                if peak <= 0:
                    continue
                n = r.inter_size / r.moe_tp_size
                pairs = r.num_tokens * r.topk
                touched = _touched(r.num_experts, r.topk, r.num_tokens)
                flops = 2.0 * pairs * 3.0 * r.hidden_size * n
                weights = touched * 3.0 * r.hidden_size * n * weight_bytes
                roofline = max(flops / (peak * 1e12), weights / (bandwidth * 1e9))
                eff = roofline / (r.latency * 1e-3)
                m = pairs / touched
                key = (engine_dir.name, cls, _cell(m, M_LOG2), _cell(n, N_LOG2))
                cells[key].append(math.log(min(eff, 1.0)))
                if r.num_tokens == 1:
                    cells[(engine_dir.name, "floor")].append(r.latency * 1e-3)
    return cells, sources


def grid_of(cells: dict) -> dict:
    """Per engine and class, the median efficiency grid [m cell][n cell], gaps filled."""
    out: dict = {}
    for engine, cls in sorted({(k[0], k[1]) for k in cells if len(k) == 4}):
        grid: list[list[float | None]] = [
            [
                math.exp(statistics.median(cells[(engine, cls, i, j)]))
                if cells.get((engine, cls, i, j))
                else None
                for j in range(len(N_LOG2))
            ]
            for i in range(len(M_LOG2))
        ]
        for axis in ("row", "col"):
            for i in range(len(M_LOG2)):
                for j in range(len(N_LOG2)):
                    if grid[i][j] is not None:
                        continue
                    line = (
                        [(abs(j - jj), grid[i][jj]) for jj in range(len(N_LOG2))]
                        if axis == "row"
                        else [(abs(i - ii), grid[ii][j]) for ii in range(len(M_LOG2))]
                    )
                    filled = [(d, v) for d, v in line if v is not None]
                    if filled:
                        grid[i][j] = min(filled, key=lambda dv: dv[0])[1]
        if any(v is None for row in grid for v in row):
            continue
        # Once every expert is touched, more tokens only add rows: a layer's time must never
        # fall, so the efficiency never rises with m (each cell takes the best at or above it;
        # the hump at 2-16 rows becomes the rate of the fewer-row cells, whose own medians are
        # launch-latency bound, covered by the floor below).
        for i in range(len(M_LOG2) - 2, -1, -1):
            for j in range(len(N_LOG2)):
                grid[i][j] = max(grid[i][j], grid[i + 1][j])  # type: ignore[type-var]

        out.setdefault(engine, {})[cls] = [[round(float(v), 4) for v in row] for row in grid]  # type: ignore[arg-type]
    return out


def main(argv: list[str] | None = None) -> int:
    """Read the tables, write the grid JSON."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--data",
        type=Path,
        help="aiconfigurator_core/systems/data (default: the installed package's)",
    )
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    data = args.data
    if data is None:
        try:
            import aiconfigurator_core  # type: ignore[import-not-found]
        except ImportError:
            print("aiconfigurator-core is not installed; pass --data", file=sys.stderr)
            return 2
        data = Path(aiconfigurator_core.__file__).parent / "systems" / "data"
    cells, sources = collect(data)
    doc = {
        "source": "PyPI aiconfigurator-core 0.12.0 (NVIDIA, Apache-2.0), "
        "aiconfigurator_core/systems/data/<gpu>/moe/<engine>/<version>/moe_perf.parquet",
        "generated_by": "python scripts/distill_moe_kernels.py",
        "what": "median fraction of its roofline (max of FLOPs at the datasheet peak and "
        "touched expert weights at the datasheet bandwidth) a grouped MoE GEMM layer reaches, "
        "by engine, precision class (16, 8, 4 = W4A4 FP4; w = Marlin's weight-only kernels and "
        "wx = the format's own weight-only kernels, both on the 16-bit peak and per GPU "
        "architecture, @sm<major>), m = token rows per touched expert and n = expert columns "
        "per GPU",
        "m_log2": M_LOG2,
        "n_log2": N_LOG2,
        "gpus": sorted(SYSTEMS.values()),
        "tables": sources,
        "efficiency": grid_of(cells),
        "floor_s": {
            k[0]: round(statistics.median(v), 7) for k, v in sorted(cells.items()) if len(k) == 2
        },
    }
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {args.out} from {len(sources)} tables")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
