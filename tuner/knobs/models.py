"""The pydantic models derived from the knob registry: EngineConfig and SearchSpace fields."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import Field, create_model, model_validator

from tuner.knobs.base import IntKnob, IntRange, Strict
from tuner.knobs.declared import EngineKnobs, SpaceKnobs
from tuner.knobs.registry import Knob, registered
from tuner.knobs.rules import config_reason

__all__ = [
    "EngineConfigBase",
    "IntKnob",
    "IntRange",
    "SearchSpaceBase",
    "Strict",
    "build_engine_config",
    "build_search_space",
]


# The checker reads the declared knobs' types from tuner/knobs/declared.py; at run time the fields
# come from the registry (build_engine_config), so a plug-in knob needs no typed line.
if TYPE_CHECKING:
    _EngineTyped = EngineKnobs
    _SpaceTyped = SpaceKnobs
else:
    _EngineTyped = _SpaceTyped = object


class EngineConfigBase(Strict, _EngineTyped):
    """One engine variant: every registered knob (fields added by build_engine_config)."""

    if TYPE_CHECKING:  # the fields are built at import time from the registry

        def __init__(self, **data: Any) -> None: ...

    @model_validator(mode="after")
    def _rules(self) -> EngineConfigBase:
        reason = config_reason(self)
        if reason:
            raise ValueError(reason)
        return self

    def key(self) -> tuple[object, ...]:
        """Hashable identity used to evaluate duplicate variants once."""
        return tuple(self.model_dump(mode="json").values())


def _value_type(knob: Knob) -> Any:
    return knob.kind | None if knob.optional else knob.kind


def _engine_field(knob: Knob) -> tuple[Any, Any]:
    bounds: dict[str, Any] = {
        k: v for k, v in (("ge", knob.ge), ("gt", knob.gt), ("le", knob.le)) if v is not None
    }
    return _value_type(knob), Field(default=knob.default, description=knob.describe(), **bounds)


def build_engine_config() -> type[EngineConfigBase]:
    """EngineConfig with one field per registered knob, in registry order."""
    fields: dict[str, Any] = {k.name: _engine_field(k) for k in registered()}
    return create_model(  # type: ignore[call-overload,no-any-return]
        "EngineConfig", __base__=EngineConfigBase, __module__="tuner.specs", **fields
    )


def _bounds(knob: Knob, spec: Any) -> tuple[Any, Any] | None:
    if isinstance(spec, IntRange):
        return spec.low, spec.high
    numbers = [v for v in spec if isinstance(v, int | float) and not isinstance(v, bool)]
    return (min(numbers), max(numbers)) if numbers else None


class SearchSpaceBase(Strict, _SpaceTyped):
    """Knobs a search may vary, each a list of choices or an int range (fields: the registry)."""

    name: str = "custom"
    description: str = ""

    if TYPE_CHECKING:

        def __init__(self, **data: Any) -> None: ...

    @model_validator(mode="after")
    def _check_values(self) -> SearchSpaceBase:
        for knob in registered():
            spec = getattr(self, knob.name, None)
            if not knob.searched or spec is None:
                continue
            if knob.power_of_two and not isinstance(spec, IntRange):
                for v in spec:
                    if v < 1 or v & (v - 1):
                        raise ValueError(f"{knob.name} {v} must be a power of two >= 1")
            span = _bounds(knob, spec)
            if span is None:
                continue
            lo_ok = knob.ge is None or span[0] >= knob.ge
            hi_ok = knob.le is None or span[1] <= knob.le
            if knob.ge is not None and knob.le is not None and not (lo_ok and hi_ok):
                raise ValueError(
                    f"{knob.name} must lie in {knob.ge:g}..{knob.le:g} (got {span[0]}..{span[1]})"
                )
            if not lo_ok:  # every value a space can sample must be one EngineConfig accepts
                raise ValueError(
                    f"{knob.name} value {span[0]} is not allowed (must be >= {knob.ge:g})"
                )
            if not hi_ok:
                raise ValueError(
                    f"{knob.name} value {span[1]} is not allowed (must be <= {knob.le:g})"
                )
        return self


def _space_field(knob: Knob) -> tuple[Any, Any]:
    if knob.ranged and knob.kind is int:
        kind: Any = IntKnob
        extra: dict[str, Any] = {}
    else:
        kind = list[_value_type(knob)]  # type: ignore[misc]
        extra = {"min_length": 1}
    if knob.space_default is None:
        return kind, Field(description=knob.describe(), **extra)
    default = [knob.plain(v) for v in knob.space_default]
    # Validated, so an enum knob's default list holds its members (as a space read from YAML
    # does) and dumps without pydantic's serializer warning.
    return kind, Field(default=default, validate_default=True, description=knob.describe(), **extra)


def build_search_space() -> type[SearchSpaceBase]:
    """SearchSpace with one field per searched knob."""
    fields: dict[str, Any] = {k.name: _space_field(k) for k in registered() if k.searched}
    return create_model(  # type: ignore[call-overload,no-any-return]
        "SearchSpace", __base__=SearchSpaceBase, __module__="tuner.specs", **fields
    )
