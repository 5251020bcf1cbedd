"""`tuner calibrate --backend vllm`: request latencies of one real vLLM server, fitted.

One server start serves every run: single requests over prompt lengths (TTFT: prefill and the
per-request overhead) and closed-loop users x contexts (TPOT: decode steps at several batch
sizes), through the same load generator as `--backend vllm`. Each run becomes an Observation;
the fit (`tuner.calibrate.refit.fit_requests`) replays each in the simulator.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tuner.calibrate.device import measure_device
from tuner.calibrate.profile import build_calibration, host_label, with_calibration
from tuner.calibrate.refit import Observation, fit_requests, observed_grid
from tuner.calibrate.torch_run import Calibrated
from tuner.errors import BackendError
from tuner.perf.efficiency import DEFAULT_EFFICIENCY
from tuner.specs import SLA, Context, EngineConfig, GPUProfile, ModelSpec, Workload

__all__ = ["QUICK_RUNS", "REQUEST_RUNS", "RequestRuns", "calibrate_vllm"]

Progress = Callable[[str], None]


@dataclass(frozen=True)
class RequestRuns:
    """The runs to measure: single-request prompt lengths, and users x context for decode."""

    prompts: tuple[int, ...]
    users: tuple[int, ...]
    contexts: tuple[int, ...]
    output_tokens: int
    requests_per_user: int

    def workloads(self) -> list[Workload]:
        """Every run as a closed-loop workload (one warm-up request each)."""
        prefill = [
            Workload(
                input_tokens=p,
                output_tokens=4,
                concurrency=1,
                num_requests=3,
                warmup_requests=1,
                ramp_s=0.0,
            )
            for p in self.prompts
        ]
        decode = [
            Workload(
                input_tokens=c,
                output_tokens=self.output_tokens,
                concurrency=u,
                num_requests=u * self.requests_per_user,
                warmup_requests=1,
                ramp_s=0.0,
            )
            for u in self.users
            for c in self.contexts
        ]
        return prefill + decode


# Decode runs reach 16 users at two contexts: a capacity search drives the server to tens of
# running sequences, and with only 1-4 users nothing tells per-sequence costs from KV reads
# (vLLM-CPU, SmolLM2-135M: calibrated on 1 and 4 users at one context, the screen predicted
# the defaults' capacity 60% above the measured one; with 16 users at 128 and 512 tokens, 9%
# and 19% above in two calibrations).
REQUEST_RUNS = RequestRuns(
    prompts=(32, 256, 1024),
    users=(1, 4, 16),
    contexts=(128, 512),
    output_tokens=32,
    requests_per_user=2,
)
QUICK_RUNS = RequestRuns(
    prompts=(32, 512), users=(1, 4, 16), contexts=(128, 512), output_tokens=16, requests_per_user=1
)


def _measure_runs(
    backend: Any, spec: ModelSpec, gpu: GPUProfile, runs: list[Workload], progress: Progress
) -> list[Observation]:
    """Start one server (the default variant) and measure every run on it."""
    from tuner.backends.vllm import for_platform, vllm_batch_defaults

    longest = max(runs, key=lambda w: w.input_tokens + w.output_tokens)
    ctx = Context(model=spec, gpu=gpu, sla=SLA(), workload=longest)
    # vLLM's own batch defaults: its start-up warm-up runs one max_num_batched_tokens forward
    # pass, minutes at the registry's 8192 on a CPU. The variant as the server runs it (the CPU
    # build changes the block size) is what the fit replays.
    seqs, tokens = vllm_batch_defaults(gpu, backend.cpu_build)
    default = EngineConfig(max_num_seqs=seqs, max_num_batched_tokens=tokens)
    config, _ = for_platform(default, backend.cpu_build)
    progress(f"starting one vLLM server (1-2 min on a CPU), then {len(runs)} runs")
    measured = backend.evaluate_loads(config, ctx, runs)
    observations = []
    for wl, m in zip(runs, measured, strict=True):
        progress(
            f"  isl {wl.input_tokens} osl {wl.output_tokens} users {wl.concurrency}: "
            f"TTFT p50 {m.ttft_ms.p50:.1f} ms, TPOT p50 {m.tpot_ms.p50:.1f} ms"
            if m.feasible
            else f"  run failed: {m.reason}"
        )
        observations.append(Observation(config=config, workload=wl, measured=m))
    return observations


def calibrate_vllm(
    spec: ModelSpec,
    *,
    runs: RequestRuns = REQUEST_RUNS,
    model_path: str | None = None,
    progress: Progress = lambda _: None,
    backend: Any = None,
) -> Calibrated:
    """Measure this device, then request latencies of a vLLM server on `spec`; fit; profile.

    `backend`: a configured VLLMBackend (default: one for `model_path` with its defaults).
    """
    import torch

    from tuner.backends.vllm import VLLMBackend

    where = "cuda" if torch.cuda.is_available() else "cpu"
    progress(f"measuring the device ({where}): copy bandwidth, GEMM throughput per dtype")
    base, peaks = measure_device(where)
    progress(", ".join(f"{k} {v:.4g}" for k, v in peaks.items()))
    backend = backend or VLLMBackend(model_path=model_path)
    observations = _measure_runs(backend, spec, base, runs.workloads(), progress)
    usable = [o for o in observations if o.measured.feasible]
    if not usable:
        reason = observations[0].measured.reason
        raise BackendError(f"vLLM calibration: every run failed ({reason})")
    progress(f"fitting the efficiency constants to {len(usable)} runs (TTFT, TPOT)")
    fit = fit_requests(base, spec, usable, start=DEFAULT_EFFICIENCY)
    host = host_label(base, where) + f", vLLM server ({backend.run_dir})"
    calibration = build_calibration("vllm", spec.name, host, fit, observed_grid(usable))
    return Calibrated(with_calibration(base, calibration), fit, peaks, 2 * len(usable))
