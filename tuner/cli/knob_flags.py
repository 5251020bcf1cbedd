"""CLI options derived from the knob registry: one flag per knob for `predict` (a value) and
`tune` (a comma-separated list that replaces the space's choices)."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from enum import Enum
from typing import Annotated, Any, Literal, TypeVar

import typer

from tuner.errors import InputError
from tuner.knobs import Knob, registered, searched

__all__ = ["FLAGS_PARAM", "knob_options", "parse_knob_value", "parse_knob_values", "with_flags"]

F = TypeVar("F", bound=Callable[..., Any])
FLAGS_PARAM = "knob_flags"  # the keyword the decorated command receives: {knob name: text}
_TRUE = {"true", "on", "yes", "1"}
_FALSE = {"false", "off", "no", "0"}


def _param(knob: Knob) -> str:
    return "knob__" + knob.name


def parse_knob_value(knob: Knob, text: str) -> Any:
    """One flag value as the knob's type; InputError naming the flag and what is allowed."""
    choices = knob.choices
    if isinstance(knob.kind, type) and issubclass(knob.kind, Enum):
        if text not in choices:  # type: ignore[operator]
            raise InputError(f"{knob.flag} {text!r} is not one of: {', '.join(choices or ())}")
        return knob.kind(text)
    if knob.kind is bool:
        if text.lower() not in _TRUE | _FALSE:
            raise InputError(f"{knob.flag} {text!r} is not one of: on, off")
        return text.lower() in _TRUE
    if knob.optional and text.lower() in ("none", "null"):
        return None
    if knob.kind in (int, float):
        try:
            return knob.kind(text)
        except ValueError:
            raise InputError(f"{knob.flag} {text!r} is not a number") from None
    return text


def parse_knob_values(knob: Knob, text: str) -> list[Any]:
    """A comma-separated flag value as a list of the knob's values."""
    return [parse_knob_value(knob, part.strip()) for part in text.split(",") if part.strip()]


def _help(knob: Knob, mode: Literal["value", "choices"]) -> str:
    if mode == "choices":
        return f"{knob.describe()}; comma-separated values replace the space's"
    default = knob.plain(knob.default)
    return f"{knob.describe()}; default {'none' if default is None else default}"


def knob_options(mode: Literal["value", "choices"]) -> Callable[[F], F]:
    """Add one `--flag TEXT` option per knob (every knob for values, searched ones for lists);
    the command receives them as `knob_flags={name: text or None}`."""
    knobs = registered() if mode == "value" else searched()

    def decorate(func: F) -> F:
        sig = inspect.signature(func, eval_str=True)
        own = [p for p in sig.parameters.values() if p.name != FLAGS_PARAM]
        added = [
            inspect.Parameter(
                _param(k), inspect.Parameter.KEYWORD_ONLY, default=None,
                annotation=Annotated[str | None, typer.Option(k.flag, help=_help(k, mode))],
            )
            for k in knobs
        ]  # fmt: skip

        @functools.wraps(func)
        def command(**kwargs: Any) -> Any:
            flags = {k.name: kwargs.pop(_param(k), None) for k in knobs}
            return func(**kwargs, **{FLAGS_PARAM: flags})

        command.__signature__ = sig.replace(parameters=[*own, *added])  # type: ignore[attr-defined]
        command.__annotations__ = {p.name: p.annotation for p in [*own, *added]}
        return command  # type: ignore[return-value]

    return decorate


def with_flags(message: str) -> str:
    """A rule message with knob names spelled as their CLI flags (for pydantic field errors)."""
    for knob in registered():
        message = message.replace(knob.name, knob.flag)
    return message
