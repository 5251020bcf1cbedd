"""The knob models' building blocks: the strict base of every noun and the integer range."""

from __future__ import annotations

import types
import typing
from typing import Annotated, Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

__all__ = ["IntKnob", "IntRange", "Strict", "takes_bool"]


def takes_bool(annotation: Any) -> bool:
    """Whether a field of this type may hold a bool (it names bool, or is not a number type)."""
    if annotation is bool or annotation is Any or annotation is object:
        return True
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return any(takes_bool(a) for a in typing.get_args(annotation) if a is not type(None))
    return annotation not in (int, float)


class Strict(BaseModel):
    """Base for every noun: unknown keys are errors, assignments are validated, a number is
    finite (no inf or NaN) and never a bool (`true` is not 1)."""

    model_config = ConfigDict(
        extra="forbid", validate_assignment=True, frozen=False, allow_inf_nan=False
    )
    _number_fields: ClassVar[frozenset[str]] = frozenset()

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        """Note once which fields are plain numbers, so the bool check is a set lookup."""
        super().__pydantic_init_subclass__(**kwargs)
        cls._number_fields = frozenset(
            name for name, f in cls.model_fields.items() if not takes_bool(f.annotation)
        )

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        # pydantic reads `true` as 1 in a number field; a YAML typo is an error instead.
        if isinstance(value, bool) and info.field_name in cls._number_fields:
            raise ValueError(f"{value} is a boolean, not a number")
        return value


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
