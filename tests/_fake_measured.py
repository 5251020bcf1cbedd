"""A measuring backend in closed form for the screened-tune tests (no engine, no server).

It stands in for `torch` (tests swap it into `tuner.backends.BACKENDS`): each variant's TTFT
grows linearly with the offered rate, so its capacity is `10 * max_num_seqs / 64` req/s at a
1000 ms TTFT bound; the variants listed in `refused` cannot run here.
"""

from __future__ import annotations

import time

from tuner.backends.base import CheckedBackend
from tuner.perf.capacity import measured_capacity
from tuner.perf.load import Capacity, LoadMode, ProbeBudget
from tuner.specs import Context, EngineConfig, Metrics, Percentiles


def _p(v: float) -> Percentiles:
    return Percentiles(mean=v, p50=v, p90=v, p95=v, p99=v)


class FakeMeasured(CheckedBackend):
    """Closed-form 'measurements'; records every variant it was asked to measure."""

    name = "torch"
    measured: list[EngineConfig] = []  # class-wide: the CLI builds its own instance
    refused: list[EngineConfig] = []
    seconds_per_variant = 0.0

    def __init__(self, **_options: object) -> None:
        pass

    def cannot_run(self, config: EngineConfig, ctx: Context) -> str | None:
        if config in self.refused:
            return "refused by the fake"
        return super().cannot_run(config, ctx)

    def _evaluate(self, config: EngineConfig, ctx: Context) -> Metrics:
        rate = ctx.workload.rate_rps or 1.0
        slope = 100.0 * 64 / config.max_num_seqs  # ms of TTFT per req/s
        tokens = rate * ctx.workload.output_tokens
        return Metrics(backend="torch", ttft_ms=_p(slope * rate), tpot_ms=_p(20.0),
                       output_tokens_per_s=tokens, output_tokens_per_s_per_gpu=tokens,
                       requests_per_s=rate)  # fmt: skip

    def _capacity(self, config: EngineConfig, ctx: Context, mode: LoadMode,
                  budget: ProbeBudget | None) -> tuple[Capacity, Metrics]:  # fmt: skip
        type(self).measured.append(config)
        time.sleep(self.seconds_per_variant)
        return measured_capacity(lambda at: self._evaluate(config, at), config, ctx, mode=mode,
                                 budget=budget or ProbeBudget(max_probes=8))  # fmt: skip
