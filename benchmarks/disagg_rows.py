"""One row of benchmarks/data/disagg_public.csv as a Deployment, a closed-loop Workload and a model.

The rows are AIConfigurator's measured disaggregated deployments (benchmarks/data/README.md,
`disagg_public.csv`): per pool the worker count and AIConfigurator's layout (tp_size x
attention_dp_size GPUs a worker, experts split moe_tp_size x moe_ep_size), mapped the way
`silicon.parallel_layout` maps an agg row: TP = tp_size, attention DP = attention_dp_size,
expert parallelism when moe_ep_size > 1. A pool whose experts are split both ways (moe_tp and
moe_ep > 1) has no EngineConfig, nor has pipeline parallelism; such rows, and rows that do not
record what a replay needs (worker counts, concurrency), raise `NotExpressible` with the reason.

Weights, KV dtype and engine are the row's, read as `silicon.row_case` reads an agg row
(`moe_quant_mode` first: a MoE model's bytes are mostly experts; MXFP4 for gpt-oss). Both pools
run with the shared engine limits of `silicon.shared_setup` (the recipes' own limits are not in
the sample). The client protocol is the row's `protocol` column: AIPerf for AIConfigurator's
gap-analysis rows; srt-slurm's sa-bench for InferenceMAX's multi-node runs: `--num-prompts NC
--max-concurrency C --request-rate inf --random-range-ratio 0.8` after a drained warm-up, N = 5,
8 or 10 by date, replayed like `silicon.INFERENCEMAX` (burst from an idle engine, lengths
uniform in [0.8 L, L]).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path

import silicon
from pydantic import ValidationError

from tuner import catalog
from tuner.deployment import Deployment, Pool
from tuner.errors import InputError
from tuner.specs import MAX_USERS, Engine, EngineConfig, KVDtype, ModelSpec, Quantization, Workload

HERE = Path(__file__).resolve().parent
DEFAULT_CSV = HERE / "data" / "disagg_public.csv"
HF_CONFIGS = HERE / "data" / "hf_configs"
# model_path -> catalog model, or a config carried from the package (benchmarks/data/hf_configs).
# Kimi-K2.5's rows are nvfp4 runs of nvidia/Kimi-K2.5-NVFP4 (InferenceMAX `kimik2.5-fp4-gb200-*`);
# its config is Moonshot's with the text model typed deepseek_v3. GLM-5's rows are NVFP4 runs.
MODELS = {
    **silicon.MODELS,
    "nvidia/Qwen3-32B-NVFP4": "qwen3-32b",
    "moonshotai/Kimi-K2.5": "kimi-k2.5-nvfp4.json",
    "zhipuai/GLM-5": "glm-5.json",
}
SYSTEMS = {**silicon.SYSTEMS, "gb300": "gb300"}
# srt-slurm sa-bench: N measured prompts per user, lengths uniform in [0.8 L, L], no recorded
# engine limits (None: silicon.shared_setup).
SA_BENCH_RATIO = silicon.INFERENCEMAX_RANGE_RATIO
PROTOCOLS = {
    "sa_bench_5x": silicon.Protocol(5, SA_BENCH_RATIO, None),
    "sa_bench_8x": silicon.Protocol(8, SA_BENCH_RATIO, None),
    "sa_bench_10x": silicon.Protocol(10, SA_BENCH_RATIO, None),
    "aiperf": silicon.AIPERF,
}
PHASES = ("prefill", "decode")


class NotExpressible(LookupError):
    """A row the simulator cannot replay; the message is the reason, shared by like rows."""


@dataclass(frozen=True)
class DisaggCase:
    """What one row replays: model, GPU, the two pools and the measured closed loop."""

    model: ModelSpec
    gpu: str  # catalog GPU name
    deployment: Deployment
    workload: Workload


def load_rows(path: Path = DEFAULT_CSV, distinct: bool = True) -> list[dict[str, str]]:
    """Rows of the carried CSV; only the kept copy of each measurement when `distinct`."""
    rows = silicon.load_rows(path)
    return [r for r in rows if not (distinct and r["duplicate_of"])]


@functools.cache
def load_model(model_path: str) -> ModelSpec:
    """The ModelSpec of a row's model_path (NotExpressible if unknown or unreadable)."""
    ref = MODELS.get(model_path)
    if ref is None:
        raise NotExpressible(f"model {model_path} is not in the catalog")
    if not ref.endswith(".json"):
        return catalog.load_model(ref)
    try:
        spec = catalog.load_model(str(HF_CONFIGS / ref))
    except InputError as exc:
        why = str(exc).split(": ", 1)[-1].split("; supported:")[0]
        raise NotExpressible(f"model {model_path}: {why}") from exc
    return spec.model_copy(update={"name": ref.removesuffix(".json")})


def concurrency_of(row: dict[str, str]) -> int:
    """The closed-loop users of a row (its source's `silicon_concurrency`)."""
    if not re.search(r"silicon_concurrency=\d", row["silicon_data_source"]):
        raise NotExpressible("no concurrency recorded (silicon_concurrency)")
    users = silicon.concurrency_of(row)
    if users > MAX_USERS:
        raise NotExpressible(f"concurrency above the simulator's {MAX_USERS} users")
    return users


def quantization_of(row: dict[str, str]) -> Quantization:
    """Weight format of a row: the experts' mode when recorded (gpt-oss's FP4 is MXFP4)."""
    mode = row["moe_quant_mode"] or row["gemm_quant_mode"]
    if mode not in silicon.GEMM_MODES:
        raise NotExpressible(f"quant mode {mode!r} is not modelled")
    mxfp4 = mode == "nvfp4" and row["model_path"] in silicon.MXFP4_CHECKPOINTS
    return Quantization.mxfp4 if mxfp4 else silicon.GEMM_MODES[mode]


def pool_layout(row: dict[str, str], phase: str) -> dict[str, int | bool]:
    """EngineConfig layout fields of one pool (`phase` = prefill or decode)."""
    cols = {k: row[f"{phase}_{k}"] or "1" for k in
            ("pp_size", "tp_size", "attention_dp_size", "moe_tp_size", "moe_ep_size")}  # fmt: skip
    if int(cols["pp_size"]) != 1:
        raise NotExpressible(f"{phase} pool: pipeline parallelism is not modelled")
    if int(cols["moe_tp_size"]) > 1 and int(cols["moe_ep_size"]) > 1:
        raise NotExpressible(
            f"{phase} pool splits experts both by TP and EP (moe_tp and moe_ep > 1), "
            "which an EngineConfig cannot hold"
        )
    tp, dp, ep = silicon.parallel_layout(cols)
    if tp & (tp - 1) or dp & (dp - 1):
        raise NotExpressible(f"{phase} pool: TP or DP size that is not a power of two")
    return {"tensor_parallel_size": tp, "data_parallel_size": dp, "expert_parallel": ep}


def workers_of(row: dict[str, str]) -> dict[str, int]:
    """Workers of each pool (the InferenceMAX CSV exports record only the layouts)."""
    counts = {phase: row[f"{phase}_num_workers"] for phase in PHASES}
    if not all(counts.values()):
        raise NotExpressible("pool worker counts not recorded")
    return {phase: int(n) for phase, n in counts.items()}


def row_deployment(row: dict[str, str], users: int) -> Deployment:
    """Both pools of a row: its workers and layouts, the shared engine limits for `users`."""
    workers = workers_of(row)
    setup = silicon.shared_setup(row["backend"], int(row["isl"]), users)
    shared = {
        "quantization": quantization_of(row),
        "kv_dtype": silicon.KV_PRECISIONS.get(row["precision"], KVDtype.auto),
        "max_num_batched_tokens": setup.max_num_batched_tokens,
        "enable_chunked_prefill": setup.chunked_prefill,
        "enable_prefix_caching": False,
        "engine": Engine(row["backend"]),
    }
    pools = {}
    for phase in PHASES:
        layout = pool_layout(row, phase)
        seqs = -(-setup.max_num_seqs // int(layout["data_parallel_size"]))
        try:
            config = EngineConfig(**shared, **layout, max_num_seqs=seqs)
        except ValidationError as exc:
            why = exc.errors()[0]["msg"].removeprefix("Value error, ")
            raise NotExpressible(f"{phase} pool: {why}") from exc
        pools[phase] = Pool(workers=workers[phase], config=config)
    return Deployment(prefill=pools["prefill"], decode=pools["decode"])


def row_workload(row: dict[str, str], users: int) -> Workload:
    """The measured closed loop: `users` sending at once, the protocol's rounds and lengths."""
    protocol = PROTOCOLS[row["protocol"]]
    isl, osl = (silicon.uniform_lengths(int(row[k]), protocol.range_ratio) for k in ("isl", "osl"))
    return Workload(
        input_tokens=isl[0],
        output_tokens=osl[0],
        length_spread=isl[1],  # one ratio: the output lengths spread as much
        concurrency=users,
        num_requests=protocol.rounds * users,
        warmup_requests=0,
        ramp_s=0.0,
    )


def row_case(row: dict[str, str]) -> DisaggCase:
    """Model, GPU, deployment and workload of one row (NotExpressible with the reason)."""
    model = load_model(row["model_path"])
    gpu = SYSTEMS.get(row["system"])
    if gpu is None:
        raise NotExpressible(f"GPU {row['system']} is not in the catalog")
    workers_of(row)  # first: without its deployment a row has nothing else worth checking
    users = concurrency_of(row)
    return DisaggCase(model, gpu, row_deployment(row, users), row_workload(row, users))
