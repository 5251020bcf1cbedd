"""Engine step shapes and the simulator's time for each: what step-level calibration fits.

A step is (prefill chunk tokens, cached context before the chunk, sampled positions, decoding
sequences, their summed context): the same quantities `StepCostModel.step_s` prices, so a
measured step time and its prediction differ only by the efficiency constants.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from pydantic import BaseModel, Field

from tuner.perf.costs import step_cost_model
from tuner.perf.efficiency import Efficiency
from tuner.specs import EngineConfig, GPUProfile, ModelSpec

__all__ = ["StepSample", "predict_step_seconds"]


class StepSample(BaseModel):
    """One timed engine step: its shape and the measured seconds (None = not yet measured)."""

    kind: str = Field(description="'prefill_step' or 'decode_step'")
    chunk: int = Field(default=0, ge=0, description="Prefill tokens in the step")
    ctx_before: int = Field(default=0, ge=0, description="Cached tokens before the chunk")
    logits: int = Field(default=0, ge=0, description="Positions sampled in the step")
    batch: int = Field(default=0, ge=0, description="Decoding sequences in the step")
    decode_ctx: int = Field(default=0, ge=0, description="Context tokens per decoding sequence")
    seconds: float | None = Field(default=None, gt=0)


def predict_step_seconds(
    samples: Sequence[StepSample],
    model: ModelSpec,
    gpu: GPUProfile,
    config: EngineConfig,
    eff: Efficiency | None = None,
) -> np.ndarray:
    """The simulator's duration of each step shape (seconds), under `eff`."""
    cost = step_cost_model(model, gpu, config, eff)
    out = np.empty(len(samples))
    for i, s in enumerate(samples):
        prefill_attn = cost.prefill_attn_s(s.chunk, s.ctx_before) if s.chunk else 0.0
        out[i] = cost.step_s(
            s.chunk + s.batch, s.logits + s.batch, s.batch * s.decode_ctx, prefill_attn
        )
    return out
