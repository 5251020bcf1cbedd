"""A tiny closed-form backend for testing the search loop mechanics (not the sim)."""

from __future__ import annotations

from tuner.specs import Context, EngineConfig, Metrics, Percentiles


def _p(v: float) -> Percentiles:
    return Percentiles(mean=v, p50=v, p90=v * 1.1, p95=v * 1.2, p99=v * 1.3)


class FakeBackend:
    """Latency grows with batch size and shrinks with TP and low-bit weights; OOM at huge batch."""

    name = "fake"

    def __init__(self) -> None:
        self.calls = 0

    def evaluate(self, config: EngineConfig, ctx: Context) -> Metrics:
        self.calls += 1
        bits = {"bf16": 16, "fp16": 16, "fp8": 8, "int8": 8, "int8-wo": 8}.get(
            config.quantization.value, 4
        )
        if config.max_num_seqs * (2 if config.kv_dtype.value == "auto" else 1) > 600:
            return Metrics.infeasible("KV cache out of memory", "fake")
        tp = config.tensor_parallel_size
        tpot = (2.0 + bits * 0.5 + config.max_num_seqs * 0.15) / tp
        ttft = 40.0 + 4e4 / config.max_num_batched_tokens + config.max_num_seqs * 0.5
        tput = config.max_num_seqs * 1000.0 / tpot / tp
        return Metrics(
            backend="fake",
            ttft_ms=_p(ttft),
            tpot_ms=_p(tpot),
            output_tokens_per_s=tput * tp,
            output_tokens_per_s_per_gpu=tput,
        )
