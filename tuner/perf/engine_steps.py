"""What one engine step costs on a given engine, and when the scheduler reads new requests:
the engine behaviours (tuner.perf.engines) the simulator applies per step."""

from __future__ import annotations

from dataclasses import dataclass

from tuner.perf.costs import StepCostModel
from tuner.perf.engines import EngineModel
from tuner.perf.speculative import Speculation, step_coeffs

__all__ = ["RecvPoll", "engine_step_coeffs"]


def engine_step_coeffs(
    target: StepCostModel,
    spec: Speculation | None,
    engine: EngineModel | None,
    dp_ranks: int,
    shape: tuple[int, int, int],
) -> tuple[float, float]:
    """`step_coeffs` of a (decodes, prefill tokens, logits) step on `engine`: a step no captured
    CUDA graph covers also pays the host's launch of every kernel (StepCostModel.eager_s)."""
    num_decode, prefill_tokens, _ = shape
    const, per_ctx = step_coeffs(target, spec, *shape)
    queries = spec.queries_per_seq if spec else 1
    # Each attention-DP rank replays its own graphs, sized for its share of the batch.
    tokens = -(-(num_decode * queries + prefill_tokens) // dp_ranks)
    if engine is not None and not engine.graph_step(tokens, prefill_tokens):
        per_kernel = engine.eager_kernel_s or target.eager_kernel_s  # measured on this engine
        launch = target.eager_kernels * per_kernel
        if engine.eager_overlaps_gpu:  # only what the GPU's work does not hide
            launch = max(0.0, launch - (const - target.fixed_s))
        const += launch
    return const, per_ctx


@dataclass
class RecvPoll:
    """When the scheduler reads new requests: every iteration (`every` 1), or every `every`
    decode steps (SGLang `--scheduler-recv-interval`; its `SchedulerRecvSkipper.handle` counts a
    decode step 1 and a prefill step 1000 toward the interval, and an idle loop polls at once)."""

    every: int = 1
    count: int = 0  # decode steps run since the last poll

    @property
    def gated(self) -> bool:
        """Whether arrivals can wait for a poll while others decode."""
        return self.every > 1

    def now(self, decoding: bool) -> bool:
        """Whether this iteration polls (and restarts the count)."""
        if not self.gated or not decoding or self.count >= self.every:
            self.count = 0
            return True
        return False

    def steps_to_poll(self) -> int:
        """Decode steps until the next poll (at least 1)."""
        return max(1, self.every - self.count)

    def decoded(self, steps: int) -> None:
        """`steps` decode steps ran."""
        self.count += steps

    def prefilled(self) -> None:
        """A step with prefill ran: the next iteration polls."""
        self.count = self.every
