"""Score the sim backend on benchmarks/data/silicon_public.csv (closed-loop mean TTFT and TPOT).

Each row is one engine instance serving `batch_size` concurrent closed-loop users with fixed
input/output lengths; the measured values are mean TTFT and mean TPOT. The simulator replays the
same measurement protocol, not the tuner's steady-state load: AIConfigurator benchmarks an agg
deployment with AIPerf (github.com/ai-dynamo/aiconfigurator,
src/aiconfigurator/generator/config/backend_templates/benchmark/bench_run.sh.j2 and
generator/sflow.py): `aiperf profile --concurrency C --num-requests C x 20
--warmup-request-count 2C --isl I --isl-stddev 0 --osl O --osl-stddev 0` with `ignore_eos`.
AIPerf runs the warm-up phase and waits for all its credits to return before the profiling
phase starts (github.com/ai-dynamo/aiperf, aiperf/timing/credit_issuing_strategy.py,
`_execute_phases`), and its concurrency mode issues credits with no delay up to C in flight
(`CONCURRENCY_BURST`, aiperf/timing/request_rate_strategy.py). So the measured phase starts
from an idle engine with all C users sending at once, lengths are exact, and the mean covers
the C x 20 measured requests: `ramp_s=0`, `length_spread=0`, no warm-up in the replay (the
drained warm-up leaves no queue behind), `num_requests = 20 C`.

Engine defaults every row shares: an 8192-token step budget with chunked prefill and
`max_num_seqs` large enough not to bind. One scheduling property differs by engine and is
documented by the engine itself: SGLang runs a pending prefill batch before any decode step
and does not mix decodes into it (`enable_mixed_chunk` defaults to False in
python/sglang/srt/server_args.py; `Scheduler.get_next_batch_to_run` in
python/sglang/srt/managers/scheduler.py returns a new prefill batch whenever one is ready),
while vLLM and TensorRT-LLM put decodes in the same step as prefill chunks. No row gets a
special case; each source's rows replay that source's recorded protocol. For the rows whose
source did not record its engine limits, `--engine-setup generator` instead replays the limits
AIConfigurator's generator writes for an agg deployment (`generator_setup`), to test whether
the rows were measured with those.

The Llama-3.1-70B rows (ids starting `2026_04_06_`; AIConfigurator's `silicon_data_source`:
`source_file=2026-04-06.csv; model=Llama-3.1-70B; measured=2025-10-29`) were measured with another
protocol: they are SemiAnalysis InferenceMAX's Llama-70B FP8 sweep (github.com/SemiAnalysisAI/
InferenceX at 3233df20f^, 2025-10-29, the day that sweep was retired: .github/workflows/
70b-tmpl.yml and benchmarks/70b_fp8_*.sh). Its matrix is exactly these rows' (H100 vLLM TP 2/4/8;
H200 and B200 vLLM and TensorRT-LLM TP 1/2/4/8; concurrency 4-64, TensorRT-LLM up to 128; ISL/OSL
1k/1k, 1k/8k, 8k/1k; FP8 weights and KV). Its client is vLLM's `benchmark_serving.py` (the
kimbochen/bench_serving fork, since vendored as utils/bench_serving/): `--dataset-name random
--random-range-ratio 0.8` (full-sweep-tmpl.yml), which draws each input and output length
uniformly from [0.8 L, L]; `--num-prompts 10C --max-concurrency C --request-rate inf
--ignore-eos`, i.e. a burst start, 10 rounds, no warm-up in the means. Its engines: vLLM
`max-num-batched-tokens: 8192`, `max-num-seqs` = C, no prefix caching; TensorRT-LLM
`trtllm-serve --max_num_tokens 16384` with chunked prefill left at its default (off), block reuse
off, and on the 1k/1k rows below TP 8 `batch_wait_timeout_iters: 20` with
`batch_wait_max_tokens_ratio: 0.9` (new prompts held up to 20 iterations to batch them). Not
replayed: vLLM's async scheduling.
Imported by `accuracy.py`; runnable alone:

    python benchmarks/silicon.py [--csv PATH] [--requests-per-user N] [--engine-setup S] [--json]
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import statistics
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tuner import catalog
from tuner.perf.efficiency import DEFAULT_EFFICIENCY, Efficiency
from tuner.perf.engines import ENGINE_MODELS, engine_model
from tuner.perf.predict import predict_metrics
from tuner.specs import (
    MTP,
    SLA,
    Context,
    Engine,
    EngineConfig,
    KVDtype,
    MoEKernel,
    Quantization,
    Workload,
)

DEFAULT_CSV = Path(__file__).resolve().parent / "data" / "silicon_public.csv"

MODELS = {
    "deepseek-ai/DeepSeek-R1": "deepseek-r1",
    "deepseek-ai/DeepSeek-V3": "deepseek-v3",
    "nvidia/DeepSeek-R1-NVFP4": "deepseek-r1",
    "nvidia/DeepSeek-V3.1-NVFP4": "deepseek-v3",
    "Qwen/Qwen3-235B-A22B-FP8": "qwen3-235b-a22b",
    "Qwen/Qwen3-30B-A3B": "qwen3-30b-a3b",
    "openai/gpt-oss-120b": "gpt-oss-120b",
    "openai/gpt-oss-20b": "gpt-oss-20b",
    "meta-llama/Llama-3.1-70B": "llama-3.1-70b",
    "meta-llama/Llama-3.1-8B-Instruct": "llama-3.1-8b",
    "nvidia/Llama-3.1-8B-Instruct-FP8": "llama-3.1-8b",
    "Qwen/Qwen3-32B": "qwen3-32b",
}
SYSTEMS = {
    "h100_sxm": "h100-sxm",
    "h200_sxm": "h200-sxm",
    "b200_sxm": "b200",
    "b300_sxm": "b300",
    "gb200": "gb200",
}
# Checkpoints that ship MXFP4 experts: AIConfigurator files their FP4 rows under `nvfp4`.
MXFP4_CHECKPOINTS = frozenset({"openai/gpt-oss-120b", "openai/gpt-oss-20b"})
# gemm_quant_mode -> weight quantization (AIConfigurator's names; see tuner.perf.precision).
GEMM_MODES = {
    "": Quantization.bf16,
    "fp8": Quantization.fp8,
    "fp8_block": Quantization.fp8_block,
    "nvfp4": Quantization.nvfp4,
}
# The `precision` column names the KV-cache dtype of the FP8/FP4 rows ("" = 16-bit).
KV_PRECISIONS = {"": KVDtype.auto, "fp8": KVDtype.fp8, "fp4": KVDtype.fp8}
# Shared engine defaults: the step budget vLLM (>= 70 GiB GPUs), SGLang and TensorRT-LLM use
# for online serving, and a sequence limit above every row's concurrency.
MAX_BATCHED_TOKENS = 8192
MIN_MAX_NUM_SEQS = 1024
# AIConfigurator's benchmark sends `--num-requests concurrency x 20` (BENCH_MULTI_ROUND).
MEASURED_ROUNDS = 20
# InferenceMAX's rows: `--num-prompts 10C`, lengths uniform in [0.8 L, L], the engines' own limits.
INFERENCEMAX_ID_PREFIX = "2026_04_06_"
INFERENCEMAX_ROUNDS = 10
INFERENCEMAX_RANGE_RATIO = 0.8
INFERENCEMAX_VLLM_BATCHED_TOKENS = 8192
INFERENCEMAX_TRTLLM_MAX_NUM_TOKENS = 16384
INFERENCEMAX_BATCH_WAIT_ITERS = 20
INFERENCEMAX_BATCH_WAIT_RATIO = 0.9
# InferenceMAX's TensorRT-LLM scripts turn attention-DP balancing on whenever DP attention is:
# the DeepSeek-R1 ones (`dsr1-fp*.yml`) with `timeout_iters: 60` (`batching_wait_iters: 0`), the
# gpt-oss ones (`gptoss-fp4.yml`) with `enable_balance: true` alone, so TensorRT-LLM's default
# `timeout_iters` of 50 (docs/engines.md section 3).
INFERENCEMAX_ADP_TIMEOUT_ITERS = 60
TRTLLM_DEFAULT_ADP_TIMEOUT_ITERS = 50
# ... and their `cuda_graph_config` captures every decode batch the run can form:
# `enable_padding: true` with `max_batch_size` the concurrency C (`dsr1_fp8_b200_trt.sh`, C / 8
# a rank with DP attention from C 256; `gptoss-fp4.yml`).
# InferenceMAX's SGLang DeepSeek-R1 scripts on B200 (`dsr1_fp8_b200.sh`, `dsr1_fp4_b200.sh`):
# `--scheduler-recv-interval` 30 from concurrency 16 (FP8: at TP 8), else 10. The H200 script
# sets none (SGLang's default 1).
# InferenceX ran its DeepSeek-R1 TensorRT-LLM MTP configs alone on this image: in
# `.github/configs/nvidia-master.yaml`, dsr1-fp8-b200-trt-mtp from 5d517074c (2026-02-05) and
# dsr1-fp4-b200-trt-mtp from 0aae52d4c (2026-02-06) moved to release:1.2.0rc6.post3 while
# dsr1-fp{4,8}-b200-trt stayed on 1.2.0rc6.post2 (until e43ae2f1b, 2026-05-18). Their scripts
# (`dsr1_fp{4,8}_b200_trt_mtp.sh`) speculate with MTP=3 draft tokens, MTP=1 with DP attention.
# Rows on images both configs ran (1.1.0rc2.post2, SGLang 0.5.9 FP8) cannot be told apart and
# are replayed without speculation.
INFERENCEMAX_MTP_IMAGES = ("tensorrt-llm/release:1.2.0rc6.post3",)
INFERENCEMAX_MTP_TOKENS = 3
INFERENCEMAX_MTP_TOKENS_DP = 1
# ... with DP attention their MAX_BATCH_SIZE is C / 8 (FP8) or C / 4 (FP4) a rank
# (`dsr1_fp{8,4}_b200_trt_mtp.sh` at ec9128280, 2026-02-06, the rows' measurement date).
INFERENCEMAX_MTP_DP_SHARE = {"fp8": 8, "nvfp4": 4}
# InferenceX's vLLM gpt-oss scripts on H100 and H200 (`gptoss_fp4_h{100,200}.sh`) export
# VLLM_MXFP4_USE_MARLIN=1 since 4e52ed4c6 (2026-01-02), the commit that moved them to vLLM
# v0.13.0 ("Fix H100/H200 perf regression"); older images ran vLLM's default, triton_kernels.
INFERENCEMAX_VLLM_MARLIN_SINCE = (0, 13)
INFERENCEMAX_VLLM_MARLIN_SYSTEMS = ("h100_sxm", "h200_sxm")
INFERENCEMAX_SGLANG_RECV_INTERVAL = 10
INFERENCEMAX_SGLANG_RECV_INTERVAL_BUSY = 30
INFERENCEMAX_SGLANG_BUSY_CONCURRENCY = 16
NO_SLA = SLA(name="none")


@dataclass(frozen=True)
class EngineSetup:
    """The scheduler limits one row's engine runs with."""

    max_num_batched_tokens: int
    max_num_seqs: int
    chunked_prefill: bool
    mix_prefill_decode: bool
    batch_wait: tuple[int, int] = (0, 0)  # TensorRT-LLM batch waiting: (steps, tokens)
    adp_balance_wait_iters: int = 0  # TensorRT-LLM attention-DP balancing's timeout_iters
    # TensorRT-LLM `cuda_graph_config`: the largest captured batch per rank, padded up to a
    # captured size (`enable_padding: true`); None: the engine record's defaults.
    padded_graphs_up_to: int | None = None
    recv_interval_steps: int = 1  # SGLang `--scheduler-recv-interval`
    # The engine's memory fraction flag (tuner.perf.memory.kv_pool_bytes reads it its way).
    memory_fraction: float = 0.9
    mtp_tokens: int = 0  # draft tokens of the model's own MTP layers (0: no speculation)
    moe_kernel: MoEKernel = MoEKernel.auto  # the experts' kernels (VLLM_MXFP4_USE_MARLIN)


def shared_setup(backend: str, isl: int, users: int) -> EngineSetup:
    """The shared defaults above; the engine's own record says whether it mixes prefill and
    decode (SGLang runs waiting prefills first, tuner.perf.engines)."""
    mixed = ENGINE_MODELS[backend].mix_prefill_decode
    return EngineSetup(MAX_BATCHED_TOKENS, max(MIN_MAX_NUM_SEQS, users), True, mixed)


def generator_setup(backend: str, isl: int, users: int) -> EngineSetup:
    """AIConfigurator's generated agg config (github.com/ai-dynamo/aiconfigurator, 2026-04).

    src/aiconfigurator/generator/rule_plugin/{vllm,sglang,trtllm}.rule: vLLM and SGLang
    `max_batch_size = 512` below 512 (else twice the given), vLLM `max_num_tokens =
    max_batch_size + isl + 1500`, SGLang `max_prefill_tokens = isl + 1500` with
    `enable_mixed_chunk = true`, TensorRT-LLM `max_num_tokens = max_batch_size + isl + 500`
    rounded up to a 32-token block with `enable_chunked_prefill` false (its templates' default).
    """
    big = 512 if users < 512 else 2 * users
    if backend == "trtllm":
        return EngineSetup(-(-(users + isl + 500) // 32) * 32, users, False, True)
    if backend == "sglang":
        return EngineSetup(isl + 1500, big, True, True)
    return EngineSetup(big + isl + 1500, big, True, True)


ENGINE_SETUPS = {"shared": shared_setup, "generator": generator_setup}


def inferencemax_moe_setup(row: dict[str, str]) -> EngineSetup:
    """The limits InferenceMAX's DeepSeek-R1 / gpt-oss scripts start each engine with
    (benchmarks/data/README.md, `moe_public.csv`, engine limits per script)."""
    users, isl = concurrency_of(row), int(row["isl"])
    gpt_oss = row["model_path"] in MXFP4_CHECKPOINTS
    if row["backend"] == "trtllm":
        tokens = 20000 if gpt_oss else max(8192, -(-(users + isl + 64) // 64) * 64)
        _, dp, _ = parallel_layout(row)
        timeout = TRTLLM_DEFAULT_ADP_TIMEOUT_ITERS if gpt_oss else INFERENCEMAX_ADP_TIMEOUT_ITERS
        balance = timeout if dp > 1 else 0
        mtp, graphs = 0, users
        if source_field(row, "image").endswith(INFERENCEMAX_MTP_IMAGES):
            mtp = INFERENCEMAX_MTP_TOKENS_DP if dp > 1 else INFERENCEMAX_MTP_TOKENS
            # The MTP scripts size the batch per rank and budget every sequence's drafts:
            # MAX_BATCH_SIZE = C (C / 8 FP8, C / 4 FP4 a rank with DP attention, from C 8 / 4),
            # MAX_NUM_TOKENS = ((MTP + 1) x MAX_BATCH_SIZE + ISL + 64) rounded up to 64.
            share = INFERENCEMAX_MTP_DP_SHARE.get(row["gemm_quant_mode"], 8)
            graphs = users // share if dp > 1 and users >= share else users
            tokens = -(-((mtp + 1) * graphs + isl + 64) // 64) * 64
        return EngineSetup(
            tokens,
            max(MIN_MAX_NUM_SEQS, users),
            False,
            True,
            adp_balance_wait_iters=balance,
            padded_graphs_up_to=graphs,
            mtp_tokens=mtp,
            memory_fraction=_trtllm_kv_fraction(row, gpt_oss, mtp > 0, dp > 1),
        )
    if row["backend"] == "sglang":
        chunk = 16384 if row["system"].startswith("b") else 32768
        return EngineSetup(
            chunk, max(MIN_MAX_NUM_SEQS, users), True, False, recv_interval_steps=_sglang_recv(row)
        )
    marlin = (
        gpt_oss
        and row["system"] in INFERENCEMAX_VLLM_MARLIN_SYSTEMS
        and engine_release(row["backend_version"]) >= INFERENCEMAX_VLLM_MARLIN_SINCE
    )
    kernel = MoEKernel.marlin if marlin else MoEKernel.auto
    return EngineSetup(INFERENCEMAX_VLLM_BATCHED_TOKENS, users, True, True, moe_kernel=kernel)


def engine_release(version: str) -> tuple[int, ...]:
    """(major, minor) of an engine version string ('0.18.0' -> (0, 18))."""
    parts = [int(p) for p in version.split(".")[:2] if p.isdigit()]
    return tuple(parts)


def _trtllm_kv_fraction(row: dict[str, str], gpt_oss: bool, mtp: bool, dp: bool) -> float:
    """`kv_cache_config.free_gpu_memory_fraction` of InferenceMAX's TensorRT-LLM script for this
    row (the same at ec9128280, 2026-02-06, and 12ba0ae07, 2026-03-25): gpt-oss 0.85; DeepSeek-R1
    0.8, the FP8 MTP script 0.7 with attention DP, the FP8 plain script 0.75 at TP 4 8k/1k and
    0.7 at 1k/8k from concurrency 256."""
    if gpt_oss:
        return 0.85
    if row["gemm_quant_mode"] != "fp8":
        return 0.8
    tp, _, _ = parallel_layout(row)
    lengths = (row["isl"], row["osl"])
    if mtp:
        return 0.7 if dp else 0.8
    if lengths == ("8192", "1024") and tp == 4:
        return 0.75
    if lengths == ("1024", "8192") and concurrency_of(row) >= 256:
        return 0.7
    return 0.8


def _sglang_recv(row: dict[str, str]) -> int:
    """The `--scheduler-recv-interval` InferenceMAX's SGLang script for this row passes."""
    if row["system"] != "b200_sxm":
        return 1
    tp, _, _ = parallel_layout(row)
    fp8_tp4 = row["gemm_quant_mode"] == "fp8" and tp == 4
    if concurrency_of(row) < INFERENCEMAX_SGLANG_BUSY_CONCURRENCY or fp8_tp4:
        return INFERENCEMAX_SGLANG_RECV_INTERVAL
    return INFERENCEMAX_SGLANG_RECV_INTERVAL_BUSY


def inferencemax_setup(row: dict[str, str]) -> EngineSetup:
    """The limits InferenceMAX's Llama-70B scripts start each engine with (see the docstring)."""
    if row.get("moe_quant_mode"):
        return inferencemax_moe_setup(row)
    users = concurrency_of(row)
    if row["backend"] != "trtllm":
        return EngineSetup(INFERENCEMAX_VLLM_BATCHED_TOKENS, users, True, True)
    wait = (0, 0)
    if (row["isl"], row["osl"]) == ("1024", "1024") and int(float(row["tp_size"])) < 8:
        # the scripts' 1k/1k config below TP 8: batch_wait_timeout_iters 20, max_tokens_ratio 0.9
        tokens = int(INFERENCEMAX_BATCH_WAIT_RATIO * INFERENCEMAX_TRTLLM_MAX_NUM_TOKENS)
        wait = (INFERENCEMAX_BATCH_WAIT_ITERS, tokens)
    return EngineSetup(INFERENCEMAX_TRTLLM_MAX_NUM_TOKENS, max(MIN_MAX_NUM_SEQS, users),
                       False, True, wait)  # fmt: skip


@dataclass(frozen=True)
class Protocol:
    """How one source measured its rows: rounds per user, length range, engine limits."""

    rounds: int
    range_ratio: float | None  # lengths uniform in [ratio x L, L]; None = exact lengths
    setup: Callable[[dict[str, str]], EngineSetup] | None  # None: the --engine-setup choice


AIPERF = Protocol(MEASURED_ROUNDS, None, None)
INFERENCEMAX = Protocol(INFERENCEMAX_ROUNDS, INFERENCEMAX_RANGE_RATIO, inferencemax_setup)


# moe_public.csv names each row's protocol (benchmarks/data/README.md); InferenceMAX's warm-up
# (2C copies of the first prompt, drained before the measured burst) leaves an idle engine, as
# no warm-up does. Rows whose client is not recorded are replayed as AIPerf.
PROTOCOLS = {
    "inferencemax": INFERENCEMAX,
    "inferencemax_warmup": INFERENCEMAX,
    "aiperf": AIPERF,
    "unknown": AIPERF,
}


def protocol_of(row: dict[str, str]) -> Protocol:
    """The measurement protocol of a row: its `protocol` column, else by its id's source."""
    if row.get("protocol") in PROTOCOLS:
        return PROTOCOLS[row["protocol"]]
    return INFERENCEMAX if row["id"].startswith(INFERENCEMAX_ID_PREFIX) else AIPERF


def engine_setup_of(row: dict[str, str], choice: str = "shared") -> EngineSetup:
    """The recorded limits of the row's source, else `choice` from ENGINE_SETUPS."""
    protocol = protocol_of(row)
    if protocol.setup is not None:
        return protocol.setup(row)
    return ENGINE_SETUPS[choice](row["backend"], int(row["isl"]), int(float(row["batch_size"])))


def uniform_lengths(length: int, ratio: float | None) -> tuple[int, float]:
    """Mean and +- spread of integers drawn uniformly from [int(ratio x length), length]."""
    if ratio is None:
        return length, 0.0
    low = max(1, int(length * ratio))  # bench_serving never asks for an empty prompt
    mean = (low + length) / 2.0
    return round(mean), (length - low) / (2.0 * mean)


@dataclass
class SiliconResult:
    """One silicon row: measured and predicted mean TTFT/TPOT, or why it was skipped."""

    row_id: str
    engine: str
    measured_ttft_ms: float
    measured_tpot_ms: float
    predicted_ttft_ms: float | None = None
    predicted_tpot_ms: float | None = None
    skipped: str | None = None

    def errors_pct(self) -> tuple[float, float]:
        """Signed percent errors of TTFT and TPOT."""
        assert self.predicted_ttft_ms is not None and self.predicted_tpot_ms is not None
        ttft = 100.0 * (self.predicted_ttft_ms - self.measured_ttft_ms) / self.measured_ttft_ms
        tpot = 100.0 * (self.predicted_tpot_ms - self.measured_tpot_ms) / self.measured_tpot_ms
        return ttft, tpot


def parallel_layout(row: dict[str, str]) -> tuple[int, int, bool]:
    """(attention TP, attention DP ranks, expert parallel) of a row. AIConfigurator's columns:
    tp_size x attention_dp_size GPUs, experts split moe_tp_size x moe_ep_size ways; a hybrid
    moe_tp x moe_ep split is replayed as EP (same bytes and FLOPs per GPU, all-to-all traffic)."""
    tp = int(float(row["tp_size"]))
    dp = int(float(row.get("attention_dp_size") or 1))
    ep = int(float(row.get("moe_ep_size") or 1)) > 1
    return tp, dp, ep


def source_field(row: dict[str, str], name: str) -> str:
    """One `key=value` field of a row's `silicon_data_source` ('' when absent)."""
    for part in row.get("silicon_data_source", "").split(";"):
        key, _, value = part.strip().partition("=")
        if key == name:
            return value.strip()
    return ""


def concurrency_of(row: dict[str, str]) -> int:
    """Closed-loop users of a row: the source's recorded `silicon_concurrency` when given (DP
    rows count `batch_size` per attention-DP rank), else `batch_size`."""
    users = source_field(row, "silicon_concurrency")
    return int(users) if users.isdigit() else int(float(row["batch_size"]))


def row_case(
    row: dict[str, str], setup: EngineSetup | None = None
) -> tuple[str, str, EngineConfig, Workload]:
    """Model, GPU, engine config and closed-loop workload of one row (LookupError if unmodelled)."""
    model = MODELS.get(row["model_path"])
    gpu = SYSTEMS.get(row["system"])
    # A MoE row's weights are mostly experts: their format decides the bytes and the math.
    mode = row.get("moe_quant_mode") or row["gemm_quant_mode"]
    quant = GEMM_MODES.get(mode)
    if quant is Quantization.nvfp4 and row["model_path"] in MXFP4_CHECKPOINTS:
        quant = Quantization.mxfp4
    if model is None or gpu is None:
        raise LookupError(f"no catalog entry for {row['model_path']} on {row['system']}")
    if quant is None:
        raise LookupError(f"quant mode {mode!r} is not modelled")
    if int(float(row["pp_size"])) != 1:
        raise LookupError("pipeline parallelism is not modelled")
    tp, dp, ep = parallel_layout(row)
    if tp & (tp - 1) or dp & (dp - 1):
        raise LookupError("TP or DP size that is not a power of two is not modelled")
    users = concurrency_of(row)
    protocol = protocol_of(row)
    setup = setup or engine_setup_of(row)
    config = EngineConfig(
        quantization=quant,
        kv_dtype=KV_PRECISIONS.get(row["precision"], KVDtype.auto),
        tensor_parallel_size=tp,
        data_parallel_size=dp,
        expert_parallel=ep,
        max_num_batched_tokens=setup.max_num_batched_tokens,
        max_num_seqs=-(-setup.max_num_seqs // dp),
        enable_chunked_prefill=setup.chunked_prefill,
        enable_prefix_caching=False,
        engine=Engine(row["backend"]),
        draft_model=MTP if setup.mtp_tokens else None,
        num_speculative_tokens=setup.mtp_tokens,
        gpu_memory_utilization=setup.memory_fraction,
        moe_kernel=setup.moe_kernel,
    )
    # Both protocols: burst start from an idle engine, no warm-up inside the measured requests.
    isl, spread = uniform_lengths(int(row["isl"]), protocol.range_ratio)
    osl, _ = uniform_lengths(int(row["osl"]), protocol.range_ratio)  # same ratio, same spread
    workload = Workload(
        input_tokens=isl,
        output_tokens=osl,
        length_spread=spread,
        concurrency=users,
        num_requests=protocol.rounds * users,
        warmup_requests=0,
        ramp_s=0.0,
    )
    return model, gpu, config, workload


def predict_silicon_row(
    row: dict[str, str],
    eff: Efficiency = DEFAULT_EFFICIENCY,
    requests_per_user: int | None = None,
    engine_setup: str = "shared",
) -> SiliconResult:
    """Predict one row's mean TTFT and TPOT (`requests_per_user` overrides the request count)."""
    res = SiliconResult(
        row["id"], row["backend"], float(row["silicon_ttft_ms"]), float(row["silicon_tpot_ms"])
    )
    setup = engine_setup_of(row, engine_setup)
    try:
        model_name, gpu_name, config, workload = row_case(row, setup)
    except LookupError as exc:
        res.skipped = str(exc)
        return res
    if requests_per_user is not None:
        n = requests_per_user * workload.users
        workload = workload.model_copy(update={"num_requests": n})
    ctx = Context(
        model=catalog.load_model(model_name),
        gpu=catalog.load_gpu(gpu_name),
        sla=NO_SLA,
        workload=workload,
        num_gpus=config.tensor_parallel_size * config.data_parallel_size,
    )
    # The engine's own behaviour, with the prefill/decode mixing this source recorded.
    # TensorRT-LLM's padded decode graphs up to the script's batch, each sequence verifying 1 + k
    # tokens: the engine record's own widening (`engine_model`), as the tuner's export sets it.
    graphs = setup.padded_graphs_up_to
    graph_tokens = graphs * (1 + setup.mtp_tokens) if graphs is not None else None
    engine = engine_model(
        config.engine, config.tensor_parallel_size, ctx.gpu.memory_gib, graph_tokens
    )
    engine = dataclasses.replace(engine, mix_prefill_decode=setup.mix_prefill_decode)
    if setup.adp_balance_wait_iters:
        engine = dataclasses.replace(engine, adp_balance_wait_iters=setup.adp_balance_wait_iters)
    if setup.recv_interval_steps > 1:
        engine = dataclasses.replace(engine, recv_interval_steps=setup.recv_interval_steps)
    metrics = predict_metrics(config, ctx, eff, batch_wait=setup.batch_wait, engine=engine)
    if not metrics.feasible:
        res.skipped = f"predicted infeasible: {metrics.reason}"
        return res
    res.predicted_ttft_ms, res.predicted_tpot_ms = metrics.ttft_ms.mean, metrics.tpot_ms.mean
    return res


def load_rows(path: Path) -> list[dict[str, str]]:
    """Rows of the silicon CSV."""
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def summarize_errors(results: list[SiliconResult]) -> dict[str, dict[str, float]]:
    """Median absolute % error of TTFT and TPOT per engine and over all scored rows."""
    groups: dict[str, list[SiliconResult]] = {}
    for r in results:
        if r.skipped is None:
            groups.setdefault(r.engine, []).append(r)
            groups.setdefault("all", []).append(r)
    out = {}
    for name, rows in sorted(groups.items()):
        errs = [r.errors_pct() for r in rows]
        out[name] = {
            "rows": len(rows),
            "ttft_median_abs_pct": statistics.median(abs(e[0]) for e in errs),
            "tpot_median_abs_pct": statistics.median(abs(e[1]) for e in errs),
            "ttft_median_signed_pct": statistics.median(e[0] for e in errs),
            "tpot_median_signed_pct": statistics.median(e[1] for e in errs),
        }
    return out


def score(
    path: Path = DEFAULT_CSV, requests_per_user: int | None = None, engine_setup: str = "shared"
) -> tuple[list[SiliconResult], dict[str, dict[str, float]]]:
    """Predict every row of `path`; the per-row results and the per-engine summary."""
    results = [
        predict_silicon_row(r, requests_per_user=requests_per_user, engine_setup=engine_setup)
        for r in load_rows(path)
    ]
    return results, summarize_errors(results)


def print_summary(results: list[SiliconResult], summary: dict[str, dict[str, float]]) -> None:
    """Skipped-row reasons and the per-engine median errors, one line each."""
    skipped: dict[str, int] = {}
    for r in results:
        if r.skipped:
            skipped[r.skipped] = skipped.get(r.skipped, 0) + 1
    print(f"\nsilicon rows (closed-loop mean TTFT/TPOT), {len(results)} rows:")
    for reason, count in sorted(skipped.items()):
        print(f"  skipped {count}: {reason}")
    width = max([8, *map(len, summary)])  # protocol names are longer than engine names
    print(
        f"  {'engine':{width}} {'rows':>5} {'TTFT |err|':>11} {'TPOT |err|':>11} {'TTFT bias':>10}"
    )
    for name, s in summary.items():
        print(
            f"  {name:{width}} {s['rows']:5d} {s['ttft_median_abs_pct']:10.1f}% "
            f"{s['tpot_median_abs_pct']:10.1f}% {s['ttft_median_signed_pct']:+9.1f}%"
        )


def main(argv: list[str] | None = None) -> int:
    """Score the silicon rows and print (or --json) the per-engine summary."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--csv", type=Path, default=DEFAULT_CSV)
    ap.add_argument("--requests-per-user", type=int, default=None)
    ap.add_argument("--engine-setup", choices=sorted(ENGINE_SETUPS), default="shared")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    results, summary = score(args.csv, args.requests_per_user, args.engine_setup)
    if args.json:
        print(json.dumps(summary))
    else:
        print_summary(results, summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
