"""The measured `torch` backend: build the variant in the reference engine, warm it up, replay
the workload on this machine and report wall-clock Metrics (vLLM bench-serve definitions).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tuner.backends.base import CheckedBackend, no_capacity
from tuner.bench.stats import aggregate_steady
from tuner.errors import TunerError
from tuner.perf.capacity import measured_capacity
from tuner.perf.load import Capacity, LoadMode, ProbeBudget
from tuner.perf.precision import DRAFT_QUANTIZATION
from tuner.specs import NGRAM, Context, EngineConfig, Metrics, ModelSpec, Workload, is_model_draft

__all__ = ["TorchBackend"]

_GIB = 1024**3
_WARMUP_PROMPT_TOKENS = 16
_WARMUP_OUTPUT_TOKENS = 4
_QUANT_ERROR_TOKENS = 64  # prompt length of the quantization error probe
_ACTIVATION_RESERVE = 0.1  # fraction of the memory budget kept for activations and logits
_REAL_WEIGHTS = {"smollm2-135m": "smollm2"}  # catalog name -> converted real checkpoint


# What a variant can fail with while building or running (reported as infeasible).
_FAILURES = (TunerError, RuntimeError, MemoryError, ValueError, NotImplementedError, OSError)


def _failure(exc: BaseException, backend: str) -> Metrics:
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return Metrics.infeasible(f"{type(exc).__name__}: {first}", backend=backend)


def _max_len(plan: Any, spec_tokens: int) -> int:
    """Longest request of the arrival plan in tokens (prompt + output + speculative lookahead)."""
    return int((plan.input_tokens + plan.output_tokens).max()) + spec_tokens + 1


@dataclass
class _Built:
    """A warmed-up engine of one variant, reusable across workload replays."""

    engine: Any
    extra: dict[str, Any]
    weight_bytes: int
    num_blocks: int
    sync: Callable[[], None]
    per_token_s: float  # warm per-token decode time: sets the closed-loop ramp


def _device_memory_bytes(device: str) -> int:
    import torch

    if device.startswith("cuda"):
        return int(torch.cuda.get_device_properties(device).total_memory)
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


class TorchBackend(CheckedBackend):
    """Measures engine variants of the in-repo PyTorch/Triton engine on the local device."""

    name = "torch"

    def __init__(
        self,
        *,
        model_path: str | Path | None = None,
        device: str | None = None,
        seed: int = 0,
        temperature: float = 0.0,
        max_requests: int | None = None,
        memory_gib: float | None = None,
        draft_quantization: str = DRAFT_QUANTIZATION.value,
        use_triton: bool | None = None,
        report_quant_error: bool = True,
        int4_group_size: int = 128,
        threads: int | None = None,
        compile: bool = False,
        probe_budget: ProbeBudget | None = None,
    ) -> None:
        """Options: model_path (HF safetensors folder; smollm2-135m resolves to the converted
        real checkpoint by itself), device (default cuda if present else cpu), seed (random
        weights, prompts), temperature (0 = greedy), max_requests (cap on replayed requests),
        memory_gib (memory budget instead of the device's), draft_quantization (applied to draft
        models; default 16-bit, as the simulator assumes), use_triton (default: on CUDA),
        report_quant_error, int4_group_size, threads
        (torch CPU threads; 1 avoids OpenMP thrashing on a shared, loaded CPU), compile
        (torch.compile the engine step; compilation is timed as extra['compile_s'], apart from
        the replayed workload), probe_budget (capacity search: probes and seconds)."""
        self.model_path = Path(model_path) if model_path else None
        self.device = device
        self.seed, self.temperature = seed, temperature
        self.max_requests = max_requests
        self.memory_gib = memory_gib
        self.draft_quantization = draft_quantization
        self.use_triton = use_triton
        self.report_quant_error = report_quant_error
        self.int4_group_size = int4_group_size
        self.threads = threads
        self.compile = compile
        self.probe_budget = probe_budget or ProbeBudget.measured()

    # ------------------------------------------------------------------ building

    def _weights_for(self, spec: ModelSpec, explicit: Path | None) -> Path | None:
        if explicit is not None:
            return explicit
        if _REAL_WEIGHTS.get(spec.name) == "smollm2":
            from tuner.real_model import ensure_smollm2

            return ensure_smollm2()
        return None

    def _build(self, spec: ModelSpec, quant: str, path: Path | None, device: str) -> Any:
        import torch

        from tuner.engine.weights import build_model

        dtype = torch.float16 if quant == "fp16" else torch.bfloat16
        return build_model(spec, model_path=path, dtype=dtype, device=device, seed=self.seed)

    def _evaluate(self, config: EngineConfig, ctx: Context) -> Metrics:
        """Measure `config`; any failure comes back as infeasible Metrics with the reason."""
        try:
            built = self._prepare(config, ctx)
            if isinstance(built, Metrics):
                return built
            return self._replay(built, config, ctx)
        except _FAILURES as exc:
            return _failure(exc, self.name)

    def _capacity(
        self, config: EngineConfig, ctx: Context, mode: LoadMode, budget: ProbeBudget | None
    ) -> tuple[Capacity, Metrics]:
        """Capacity of `config`: the engine is built and warmed up once, every probe replays the
        workload at one load on it."""
        empty = no_capacity(config, mode)
        try:
            built = self._prepare(config, ctx)
        except _FAILURES as exc:
            return empty, _failure(exc, self.name)
        if isinstance(built, Metrics):
            return empty, built

        def measure(at: Context) -> Metrics:
            try:
                return self._replay(built, config, at)
            except _FAILURES as exc:
                return _failure(exc, self.name)

        return measured_capacity(
            measure, config, ctx, mode=mode, budget=budget or self.probe_budget
        )

    # ------------------------------------------------------------------ named steps

    def _prepare(self, config: EngineConfig, ctx: Context) -> _Built | Metrics:
        """Build, quantize, size the KV cache, construct and warm up the engine (or why not)."""
        import torch

        from tuner.engine.generate import unsupported_knob

        if reason := unsupported_knob(config):
            return Metrics.infeasible(reason, backend=self.name)
        if config.tensor_parallel_size != 1:
            return Metrics.infeasible(
                f"tensor_parallel_size={config.tensor_parallel_size}: the reference engine runs "
                "on one device",
                backend=self.name,
            )
        if self.threads:
            torch.set_num_threads(self.threads)
        device = self.device or ("cuda" if torch.cuda.is_available() else "cpu")
        use_triton = device.startswith("cuda") if self.use_triton is None else self.use_triton
        weights_path = self._weights_for(ctx.model, self.model_path)
        model = self._build(ctx.model, config.quantization.value, weights_path, device)
        extra: dict[str, float | int | str | bool | None] = {
            "device": device,
            "weights": str(weights_path) if weights_path else f"random(seed={self.seed})",
            "prefix_caching": "not implemented in the reference engine (ignored)",
        }
        self._quantize(model, config, ctx.model, (device, use_triton), extra)
        draft = self._draft_for(config, ctx, device, use_triton, extra)
        sized = self._size_kv(config, ctx, model, draft, device)
        if isinstance(sized, Metrics):
            return sized
        num_blocks, weight_bytes = sized
        engine = self._engine(config, model, draft, num_blocks, use_triton)
        extra["compile"] = self.compile
        warm_start = time.perf_counter()
        self._warm_up(engine)
        extra["warmup_s"] = time.perf_counter() - warm_start
        # With compile, warm-up is where the step graphs are compiled (its cost, not workload).
        extra["compile_s"] = extra["warmup_s"] if self.compile else 0.0
        timed_start = time.perf_counter()
        self._warm_up(engine)  # again, warm (compiled): its per-token time sets the ramp
        per_token_s = (time.perf_counter() - timed_start) / _WARMUP_OUTPUT_TOKENS
        sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
        return _Built(engine, extra, weight_bytes, num_blocks, sync, per_token_s)

    def _quantize(
        self,
        model: Any,
        config: EngineConfig,
        spec: ModelSpec,
        where: tuple[str, bool],
        extra: dict[str, Any],
    ) -> None:
        """Quantize the weights in place; record kernel paths and the logit error it causes."""
        import torch

        from tuner.engine.quantize import quantization_error, quantize_model

        device, use_triton = where
        quant = config.quantization.value
        probe = torch.randint(
            0,
            spec.vocab_size,
            (_QUANT_ERROR_TOKENS,),
            generator=torch.Generator().manual_seed(self.seed),
        ).tolist()
        ref_logits = self._probe_logits(model, probe) if self.report_quant_error else None
        if self.compile and quant in ("bf16", "fp16", "fp32"):
            # Inductor freezes and prepacks plain nn.Linear itself; opaque oneDNN-prepacked
            # weights cannot be traced.
            paths = {
                "inductor(F.linear)": sum(isinstance(m, torch.nn.Linear) for m in model.modules())
            }
        else:
            paths = quantize_model(
                model, quant, use_triton=use_triton, int4_group_size=self.int4_group_size
            )
        if self.compile:
            # Compiled int8 layers trace a plain mm that Inductor swaps for its own WOQ GEMM.
            paths = {
                p.replace("aten._weight_int8pack_mm", "inductor(int8 WOQ mm)"): n
                for p, n in paths.items()
            }
        extra["kernel_path"] = ", ".join(f"{p} x{n}" for p, n in paths.items())
        extra["decode_attention_path"] = (
            "triton.paged_decode_attention"
            if use_triton and device.startswith("cuda")
            else "torch.sdpa(gathered paged KV)"
        )
        extra["cpu_threads"] = torch.get_num_threads()
        if ref_logits is not None and quant not in ("bf16", "fp16"):
            err = quantization_error(ref_logits, self._probe_logits(model, probe))
            extra.update({f"quant_{k}": v for k, v in err.items()})

    def _draft_for(
        self,
        config: EngineConfig,
        ctx: Context,
        device: str,
        use_triton: bool,
        extra: dict[str, Any],
    ) -> Any:
        """The quantized draft model of a draft-model variant (None for n-gram or no draft)."""
        from tuner.engine.quantize import quantize_model

        k = config.num_speculative_tokens
        if not k or not is_model_draft(config.draft_model):
            return None
        draft = self._build_draft(config, ctx, device)
        paths = quantize_model(draft, self.draft_quantization, use_triton=use_triton)
        extra["draft_kernel_path"] = ", ".join(paths)
        return draft

    def _size_kv(
        self, config: EngineConfig, ctx: Context, model: Any, draft: Any, device: str
    ) -> tuple[int, int] | Metrics:
        """(KV blocks, weight bytes): the memory budget's blocks, capped at what max_num_seqs
        full requests need; infeasible when one request does not fit."""
        from tuner.engine.scheduler import blocks_needed
        from tuner.perf.memory import config_kv_bytes_per_token

        wl, spec = ctx.workload, ctx.model
        # One KV formula for sim and engine (auto = the 16-bit activations the engine runs in).
        per_token = config_kv_bytes_per_token(spec, config)
        weight_bytes = sum(t.numel() * t.element_size() for t in model.state_dict().values())
        if draft is not None:
            per_token += config_kv_bytes_per_token(draft.spec, config)
            weight_bytes += sum(t.numel() * t.element_size() for t in draft.state_dict().values())
        total = self.memory_gib * _GIB if self.memory_gib else _device_memory_bytes(device)
        budget = total * config.gpu_memory_utilization * (1 - _ACTIVATION_RESERVE) - weight_bytes
        plan = self._plan(wl)
        max_len = _max_len(plan, config.num_speculative_tokens)
        per_seq_blocks = blocks_needed(max_len, config.block_size)
        budget_blocks = int(budget // (per_token * config.block_size))
        if budget_blocks < per_seq_blocks:
            return Metrics.infeasible(
                f"KV cache of {max(budget, 0) / _GIB:.2f} GiB holds {max(budget_blocks, 0)} "
                f"blocks; one {max_len}-token request needs {per_seq_blocks}",
                backend=self.name,
                weights_gib=weight_bytes / _GIB,
            )
        return min(budget_blocks, per_seq_blocks * config.max_num_seqs), weight_bytes

    def _engine(
        self, config: EngineConfig, model: Any, draft: Any, num_blocks: int, use_triton: bool
    ) -> Any:
        """The continuous-batching engine with the variant's limits."""
        from tuner.engine.generate import Engine, limits_for

        k = config.num_speculative_tokens
        return Engine(
            model,
            limits_for(config, num_blocks),
            draft=draft,
            ngram_draft=bool(k) and config.draft_model == NGRAM,
            num_speculative_tokens=k,
            temperature=self.temperature,
            seed=self.seed,
            use_triton=use_triton,
            compile=self.compile,
        )

    def _plan(self, wl: Workload) -> Any:
        """The workload's arrival plan (warm-up included), capped at max_requests measured."""
        from tuner.bench.arrivals import plan_workload
        from tuner.bench.lengths import workload_length_pairs

        measured = min(wl.measured_requests, self.max_requests or wl.measured_requests)
        return plan_workload(
            wl.model_copy(update={"num_requests": measured}), workload_length_pairs(wl.lengths_file)
        )

    def _replay(self, built: _Built, config: EngineConfig, ctx: Context) -> Metrics:
        """Replay `ctx.workload` on the warmed-up engine and report its Metrics."""
        import torch

        from tuner.bench.prompts import plan_requests
        from tuner.engine.replay import replay

        wl, engine = ctx.workload, built.engine
        plan = self._plan(wl)
        pool = torch.randint(
            0,
            ctx.model.vocab_size,
            (max(4 * _max_len(plan, config.num_speculative_tokens), 1024),),
            generator=torch.Generator().manual_seed(wl.seed),
        ).tolist()
        requests = plan_requests(wl, plan, pool)
        engine.proposed_tokens = engine.accepted_tokens = 0
        preempted_before = engine.scheduler.preemptions
        # Closed-loop users start spread over one request's time (per-token time x output
        # length) unless the workload states the ramp.
        ramp_s = wl.start_ramp_s
        if ramp_s is None:
            ramp_s = built.per_token_s * wl.output_tokens
        stats = replay(engine, plan, requests, built.sync, ramp_s=ramp_s)
        metrics = aggregate_steady(stats.results, plan.warmup, backend=self.name, sla=ctx.sla)
        metrics.weights_gib = built.weight_bytes / _GIB
        metrics.kv_capacity_tokens = built.num_blocks * config.block_size
        metrics.max_concurrent_seqs = stats.max_running
        metrics.preemptions = engine.scheduler.preemptions - preempted_before
        metrics.kv_utilization = stats.peak_blocks_used / built.num_blocks
        extra = {**built.extra, **metrics.extra}
        extra["engine_steps"] = stats.steps
        extra["replayed_requests"] = plan.count
        if config.num_speculative_tokens:
            extra["spec_acceptance_rate"] = engine.acceptance_rate
            extra["spec_proposed_tokens"] = engine.proposed_tokens
        metrics.extra = extra
        return metrics

    def _build_draft(self, config: EngineConfig, ctx: Context, device: str) -> Any:
        from tuner.catalog import load_model

        assert config.draft_model is not None
        dspec = ctx.draft or load_model(config.draft_model)
        if dspec.vocab_size != ctx.model.vocab_size:
            raise ValueError(
                f"draft {dspec.name} has vocab_size={dspec.vocab_size}, the target "
                f"{ctx.model.name} has {ctx.model.vocab_size}; speculation needs one vocabulary"
            )
        same = dspec.name == ctx.model.name
        path = self._weights_for(dspec, self.model_path if same else None)
        return self._build(dspec, "bf16", path, device)

    def _probe_logits(self, model: Any, tokens: list[int]) -> Any:
        from tuner.engine.generate import prefill_logits

        return prefill_logits(model, tokens)

    def _warm_up(self, engine: Any) -> None:
        """Two short requests through every code path (prefill, decode, speculation)."""
        vocab = engine.model.spec.vocab_size
        prompt = [(7 * i + 3) % vocab for i in range(_WARMUP_PROMPT_TOKENS)]
        for _ in range(2):
            engine.add_request(prompt, _WARMUP_OUTPUT_TOKENS)
        while engine.has_work:
            engine.step()
