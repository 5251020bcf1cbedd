"""Engine step times of the reference engine (torch backend) over a batch x context x chunk grid.

Each grid point is one step shape timed around `Engine.step()` (scheduling, the batched forward,
sampling: everything the simulator's step prices). The cached context of a shape is installed
directly in the paged cache's block tables rather than computed by a prefill first: a step's
work depends on how many cached tokens it reads, not on their values, and computing them would
cost far more than the measurement. Each point is the fastest of a few repeats after a warm-up
(as for the device peaks: the device's capability, not a shared machine's noise).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from tuner.calibrate.steps import StepSample
from tuner.specs import ModelSpec

__all__ = ["QUICK_GRID", "STEP_GRID", "StepGrid", "measure_steps"]

_BLOCK_SIZE = 16
_WARMUP = 2


@dataclass(frozen=True)
class StepGrid:
    """The step shapes to time: decode batch x context, prefill chunk x cached context."""

    batch: tuple[int, ...]
    context: tuple[int, ...]
    chunk: tuple[int, ...]
    repeats: int

    def samples(self) -> list[StepSample]:
        """Every shape of the grid, unmeasured."""
        decode = [
            StepSample(kind="decode_step", batch=b, decode_ctx=c)
            for b in self.batch
            for c in self.context
        ]
        prefill = [
            StepSample(kind="prefill_step", chunk=n, ctx_before=c, logits=1)
            for n in self.chunk
            for c in (0, *self.context)
        ]
        return decode + prefill


STEP_GRID = StepGrid(
    batch=(1, 2, 4, 8, 16, 32), context=(64, 256, 1024), chunk=(16, 64, 256, 512), repeats=5
)
# For tests: a handful of shapes that still vary every term.
QUICK_GRID = StepGrid(batch=(1, 8), context=(64, 512), chunk=(32, 256), repeats=3)


class _StepTimer:
    """One engine sized for the largest shape; installs a shape, times `Engine.step()`."""

    def __init__(self, model: Any, grid: StepGrid, cuda: bool, sync: Callable[[], None]) -> None:
        from tuner.engine.generate import Engine, EngineLimits

        longest = max(grid.context) + max(grid.chunk) + grid.repeats + _WARMUP + 2
        seqs = max(grid.batch)
        per_seq = -(-longest // _BLOCK_SIZE)
        limits = EngineLimits(
            max_num_seqs=seqs,
            max_num_batched_tokens=max(max(grid.chunk), seqs),
            num_blocks=seqs * per_seq,
            block_size=_BLOCK_SIZE,
        )
        # As the torch backend builds it: Triton paged attention on CUDA.
        self.engine = Engine(model, limits, use_triton=cuda)
        self.vocab = model.spec.vocab_size
        self.sync = sync

    def _install(self, ctx: int, pending: int, max_new: int) -> Any:
        """A running sequence with `ctx` cached tokens and `pending` tokens still to compute."""
        from tuner.engine.scheduler import Sequence, blocks_needed

        sched = self.engine.scheduler
        tokens = [(7 * i + 3) % self.vocab for i in range(ctx + pending)]
        seq = Sequence(len(sched.running) + 10**6, tokens, len(tokens), max_new)
        seq.blocks = sched.allocator.allocate(blocks_needed(max(ctx, 1), _BLOCK_SIZE))
        seq.num_computed = ctx
        sched.running.append(seq)
        return seq

    def _clear(self) -> None:
        sched = self.engine.scheduler
        for seq in list(sched.running):
            sched.finish(seq)

    def _timed_step(self) -> float:
        self.sync()
        start = time.perf_counter()
        self.engine.step()
        self.sync()
        return time.perf_counter() - start

    def decode(self, batch: int, ctx: int, repeats: int) -> float:
        """Fastest seconds of a decode step of `batch` sequences at about `ctx` tokens each."""
        for _ in range(batch):
            self._install(ctx, 1, repeats + _WARMUP + 1)
        times = [self._timed_step() for _ in range(repeats + _WARMUP)][_WARMUP:]
        self._clear()
        return min(times)

    def prefill(self, chunk: int, ctx_before: int, repeats: int) -> float:
        """Fastest seconds of a step computing the last `chunk` prompt tokens after `ctx_before`."""
        times = []
        self.engine.scheduler.max_num_batched_tokens = chunk
        for _ in range(repeats + _WARMUP):
            self._install(ctx_before, chunk, 1)
            times.append(self._timed_step())
            self._clear()
        return min(times[_WARMUP:])


def measure_steps(
    spec: ModelSpec,
    grid: StepGrid,
    device: str = "cpu",
    progress: Callable[[str], None] | None = None,
    model_path: str | None = None,
) -> list[StepSample]:
    """Build `spec` in bfloat16 as the torch backend does and time every step shape of `grid`."""
    import torch

    from tuner.engine.quantize import quantize_model
    from tuner.engine.weights import build_model

    model = build_model(spec, model_path=model_path, dtype=torch.bfloat16, device=device)
    quantize_model(model, "bf16", use_triton=device.startswith("cuda"))
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    timer = _StepTimer(model, grid, device.startswith("cuda"), sync)
    out = []
    for sample in _each(grid.samples(), progress):
        if sample.kind == "decode_step":
            seconds = timer.decode(sample.batch, sample.decode_ctx, grid.repeats)
            # The context grows by one token per step: report the mean over the timed ones.
            sample = sample.model_copy(
                update={"decode_ctx": sample.decode_ctx + _WARMUP + grid.repeats // 2}
            )
        else:
            seconds = timer.prefill(sample.chunk, sample.ctx_before, grid.repeats)
        out.append(sample.model_copy(update={"seconds": seconds}))
    return out


def _each(
    samples: list[StepSample], progress: Callable[[str], None] | None
) -> Iterable[StepSample]:
    """The samples, announcing each kind once as its timing starts."""
    seen: set[str] = set()
    for sample in samples:
        if progress and sample.kind not in seen:
            count = sum(s.kind == sample.kind for s in samples)
            progress(f"timing {count} {sample.kind.replace('_', ' ')} shapes")
            seen.add(sample.kind)
        yield sample
