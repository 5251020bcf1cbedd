"""The measured `torch` backend: build the variant in the reference engine, warm it up, replay
the workload on this machine and report wall-clock Metrics (vLLM bench-serve definitions).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from tuner.bench.stats import aggregate_steady
from tuner.errors import TunerError
from tuner.perf.precision import DRAFT_QUANTIZATION
from tuner.specs import Context, EngineConfig, Metrics, ModelSpec
from tuner.validity import invalid_reason

__all__ = ["TorchBackend"]

_GIB = 1024**3
_WARMUP_PROMPT_TOKENS = 16
_WARMUP_OUTPUT_TOKENS = 4
_QUANT_ERROR_TOKENS = 64  # prompt length of the quantization error probe
_ACTIVATION_RESERVE = 0.1  # fraction of the memory budget kept for activations and logits
_REAL_WEIGHTS = {"smollm2-135m": "smollm2"}  # catalog name -> converted real checkpoint


def _device_memory_bytes(device: str) -> int:
    import torch

    if device.startswith("cuda"):
        return int(torch.cuda.get_device_properties(device).total_memory)
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


class TorchBackend:
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
    ) -> None:
        """Options: model_path (HF safetensors folder; smollm2-135m resolves to the converted
        real checkpoint by itself), device (default cuda if present else cpu), seed (random
        weights, prompts), temperature (0 = greedy), max_requests (cap on replayed requests),
        memory_gib (memory budget instead of the device's), draft_quantization (applied to draft
        models; default 16-bit, as the simulator assumes), use_triton (default: on CUDA),
        report_quant_error, int4_group_size, threads
        (torch CPU threads; 1 avoids OpenMP thrashing on a shared, loaded CPU), compile
        (torch.compile the engine step; compilation is timed as extra['compile_s'], apart from
        the replayed workload)."""
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

    def evaluate(self, config: EngineConfig, ctx: Context) -> Metrics:
        """Measure `config`; any failure comes back as infeasible Metrics with the reason."""
        if reason := invalid_reason(config, ctx):  # the same rules and words as predict/tune
            return Metrics.infeasible(reason, self.name)
        try:
            return self._evaluate(config, ctx)
        except (
            TunerError,
            RuntimeError,
            MemoryError,
            ValueError,
            NotImplementedError,
            OSError,
        ) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            return Metrics.infeasible(f"{type(exc).__name__}: {first}", backend=self.name)

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
        import torch

        from tuner.bench.arrivals import plan_workload
        from tuner.bench.lengths import workload_length_pairs as pairs
        from tuner.bench.loadgen import plan_requests
        from tuner.engine.generate import Engine, EngineLimits
        from tuner.engine.quantize import quantization_error, quantize_model
        from tuner.engine.scheduler import blocks_needed
        from tuner.perf.memory import config_kv_bytes_per_token

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
        quant = config.quantization.value
        spec = ctx.model
        weights_path = self._weights_for(spec, self.model_path)
        model = self._build(spec, quant, weights_path, device)
        extra: dict[str, float | int | str | bool | None] = {
            "device": device,
            "weights": str(weights_path) if weights_path else f"random(seed={self.seed})",
            "prefix_caching": "not implemented in the reference engine (ignored)",
        }
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
            paths = {p.replace("aten._weight_int8pack_mm", "inductor(int8 WOQ mm)"): n
                     for p, n in paths.items()}  # fmt: skip
        extra["kernel_path"] = ", ".join(f"{p} x{n}" for p, n in paths.items())
        extra["decode_attention_path"] = (
            "triton.paged_decode_attention" if use_triton and device.startswith("cuda")
            else "torch.sdpa(gathered paged KV)"
        )  # fmt: skip
        extra["cpu_threads"] = torch.get_num_threads()
        if ref_logits is not None and quant not in ("bf16", "fp16"):
            err = quantization_error(ref_logits, self._probe_logits(model, probe))
            extra.update({f"quant_{k}": v for k, v in err.items()})

        draft = None
        k = config.num_speculative_tokens
        ngram = bool(k) and config.draft_model == "ngram"
        if k and not ngram:
            draft = self._build_draft(config, ctx, device)
            paths = quantize_model(draft, self.draft_quantization, use_triton=use_triton)
            extra["draft_kernel_path"] = ", ".join(paths)

        # KV cache sized by the memory budget, capped at what max_num_seqs full requests need.
        wl = ctx.workload
        measured = min(wl.measured_requests, self.max_requests or wl.measured_requests)
        plan = plan_workload(
            wl.model_copy(update={"num_requests": measured}), pairs(wl.lengths_file)
        )
        # One KV formula for sim and engine (auto = the 16-bit activations the engine runs in).
        per_token = config_kv_bytes_per_token(spec, config)
        if draft is not None:
            per_token += config_kv_bytes_per_token(draft.spec, config)
        weight_bytes = sum(t.numel() * t.element_size() for t in model.state_dict().values())
        if draft is not None:
            weight_bytes += sum(t.numel() * t.element_size() for t in draft.state_dict().values())
        total = self.memory_gib * _GIB if self.memory_gib else _device_memory_bytes(device)
        budget = total * config.gpu_memory_utilization * (1 - _ACTIVATION_RESERVE) - weight_bytes
        max_len = int((plan.input_tokens + plan.output_tokens).max()) + k + 1
        per_seq_blocks = blocks_needed(max_len, config.block_size)
        budget_blocks = int(budget // (per_token * config.block_size))
        if budget_blocks < per_seq_blocks:
            return Metrics.infeasible(
                f"KV cache of {max(budget, 0) / _GIB:.2f} GiB holds {max(budget_blocks, 0)} "
                f"blocks; one {max_len}-token request needs {per_seq_blocks}",
                backend=self.name,
                weights_gib=weight_bytes / _GIB,
            )
        if not config.enable_chunked_prefill and max_len > config.max_num_batched_tokens:
            return Metrics.infeasible(
                f"chunked prefill is off and prompts up to {int(plan.input_tokens.max())} tokens "
                f"exceed max_num_batched_tokens={config.max_num_batched_tokens}",
                backend=self.name,
            )
        num_blocks = min(budget_blocks, per_seq_blocks * config.max_num_seqs)
        limits = EngineLimits(
            max_num_seqs=config.max_num_seqs,
            max_num_batched_tokens=config.max_num_batched_tokens,
            num_blocks=num_blocks,
            block_size=config.block_size,
            kv_dtype=config.kv_dtype.value,
            enable_chunked_prefill=config.enable_chunked_prefill,
        )
        engine = Engine(
            model,
            limits,
            draft=draft,
            ngram_draft=ngram,
            num_speculative_tokens=k,
            temperature=self.temperature,
            seed=self.seed,
            use_triton=use_triton,
            compile=self.compile,
        )
        extra["compile"] = self.compile
        sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)

        pool = torch.randint(
            0,
            spec.vocab_size,
            (max(4 * max_len, 1024),),
            generator=torch.Generator().manual_seed(wl.seed),
        ).tolist()
        requests = plan_requests(wl, plan, pool)
        warm_start = time.perf_counter()
        self._warm_up(engine)
        extra["warmup_s"] = time.perf_counter() - warm_start
        # With compile, warm-up is where the step graphs are compiled (its cost, not workload).
        extra["compile_s"] = extra["warmup_s"] if self.compile else 0.0
        timed_start = time.perf_counter()
        self._warm_up(engine)  # again, warm (compiled): its per-token time sets the ramp
        per_token_s = (time.perf_counter() - timed_start) / _WARMUP_OUTPUT_TOKENS
        engine.proposed_tokens = engine.accepted_tokens = 0

        from tuner.engine.replay import replay

        # Closed-loop users start spread over one request's time (per-token time x output
        # length) unless the workload states the ramp.
        ramp_s = wl.ramp_s if wl.ramp_s is not None else per_token_s * wl.output_tokens
        stats = replay(engine, plan, requests, sync, ramp_s=ramp_s)
        metrics = aggregate_steady(stats.results, plan.warmup, backend=self.name, sla=ctx.sla)
        metrics.weights_gib = weight_bytes / _GIB
        metrics.kv_capacity_tokens = num_blocks * config.block_size
        metrics.max_concurrent_seqs = stats.max_running
        metrics.preemptions = engine.scheduler.preemptions
        metrics.kv_utilization = stats.peak_blocks_used / num_blocks
        extra.update(metrics.extra)
        extra["engine_steps"] = stats.steps
        extra["replayed_requests"] = plan.count
        if k:
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
