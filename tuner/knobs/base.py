"""The knob models' building blocks: the strict base of every noun and the integer range."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = ["IntKnob", "IntRange", "Strict"]


class Strict(BaseModel):
    """Base for every noun: unknown keys are errors, assignments are validated."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, frozen=False)


class IntRange(Strict):
    """An integer knob sampled from [low, high] with a step or on a log scale."""

    low: int = Field(ge=0)
    high: int = Field(ge=0)
    step: int = Field(default=1, ge=1)
    log: bool = False

    @model_validator(mode="after")
    def _ordered(self) -> IntRange:
        if self.low > self.high:
            raise ValueError(f"low={self.low} is above high={self.high}")
        if self.log and (self.step != 1 or self.low < 1):
            raise ValueError(
                f"log scale needs step=1 and low>=1 (got step={self.step}, low={self.low})"
            )
        return self


IntKnob = Annotated[list[int] | IntRange, Field(union_mode="left_to_right")]
