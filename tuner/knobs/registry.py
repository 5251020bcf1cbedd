"""The knob registry: what a knob is, and the ordered table every other layer derives from.

A knob is declared once (tuner/knobs/declared.py, or `register` for a plug-in); EngineConfig,
SearchSpace, the search's sampling order and conditions, the CLI flags of predict/tune, the
report's columns and colours and the CSV columns are all derived from this table.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

from tuner.errors import echo

__all__ = [
    "PALETTE",
    "Knob",
    "color_for",
    "footprint_knobs",
    "footprint_of",
    "footprint_text",
    "footprint_words",
    "get",
    "register",
    "registered",
    "searched",
    "short_config",
    "unhandled",
]

# Plotly's qualitative "D3" palette; a knob's choices take colours in declaration order and any
# value beyond the palette (or unknown to the registry) still gets one, cycled, never dropped.
PALETTE: tuple[str, ...] = (
    "#1f77b4",
    "#17becf",
    "#ff7f0e",
    "#2ca02c",
    "#98df8a",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
)


@dataclass(frozen=True)
class Knob:
    """One engine knob: its type and range, defaults, help, CLI flag and sampling conditions."""

    name: str
    kind: type  # an Enum subclass, int, float, bool, or str (a name; `optional` allows None)
    default: Any
    help: str
    flag: str  # predict/tune long option
    label: str  # short column title in tables
    unit: str = ""
    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    optional: bool = False  # None is a value (e.g. no draft model)
    searched: bool = True  # a SearchSpace field that the search varies
    space_default: tuple[Any, ...] | None = None  # SearchSpace default; None = the space must say
    ranged: bool = False  # the space may give an {low, high, step, log} range instead of a list
    power_of_two: bool = False
    # Sampled only when this knob has a truthy value; otherwise fixed at `default` (and only its
    # values above `default` are sampled, since the default is the "off" variant).
    needs: str | None = None
    # Values smallest memory footprint first, for the knobs that decide whether a model fits a
    # GPU at all (a plan tries each combination of these before it searches the rest).
    footprint: tuple[Any, ...] = ()
    noun: str = ""  # what a value names in a sentence ("int8 weights", "fp8 KV")
    words: tuple[tuple[Any, str], ...] = ()  # values read differently in a sentence

    @property
    def choices(self) -> tuple[Any, ...] | None:
        """The closed set of values (enums and bools), as plain JSON values; None if open."""
        if isinstance(self.kind, type) and issubclass(self.kind, Enum):
            return tuple(e.value for e in self.kind)
        if self.kind is bool:
            return (True, False)
        return None

    def plain(self, value: Any) -> Any:
        """The JSON value of `value` (enum members become their string)."""
        return value.value if isinstance(value, Enum) else value

    def parse(self, text: str) -> Any:
        """One command-line value as this knob's type; ValueError naming the flag and the
        allowed values otherwise."""
        choices = self.choices
        if isinstance(self.kind, type) and issubclass(self.kind, Enum):
            if text not in (choices or ()):
                allowed = ", ".join(choices or ())
                raise ValueError(f"{self.flag} {echo(text)} is not one of: {allowed}")
            return self.kind(text)
        if self.kind is bool:
            if text.lower() not in _TRUE | _FALSE:
                raise ValueError(f"{self.flag} {echo(text)} is not one of: on, off")
            return text.lower() in _TRUE
        if self.optional and text.lower() in ("none", "null"):
            return None
        if self.kind in (int, float):
            try:
                return self.kind(text)
            except ValueError:
                raise ValueError(f"{self.flag} {echo(text)} is not a number") from None
        return text

    def parse_list(self, text: str) -> list[Any]:
        """A comma-separated command-line value as a list of this knob's values."""
        return [self.parse(part.strip()) for part in text.split(",") if part.strip()]

    def phrase(self, value: Any) -> str:
        """One value in words, e.g. "16-bit KV" (the value, renamed by `words`, then `noun`)."""
        plain = self.plain(value)
        said = dict(self.words).get(plain, plain)
        return f"{said} {self.noun}".strip()

    def describe(self) -> str:
        """One-line help with the allowed values, unit and default, for --help and docs."""
        choices = self.choices
        listed = choices and self.kind is not bool
        allowed = f": {', '.join(str(c) for c in choices or ())}" if listed else ""
        unit = f" ({self.unit})" if self.unit else ""
        return f"{self.help}{unit}{allowed}"


_REGISTRY: dict[str, Knob] = {}
_TRUE = frozenset({"true", "on", "yes", "1"})
_FALSE = frozenset({"false", "off", "no", "0"})


def register(knob: Knob) -> Knob:
    """Add a knob (before tuner.specs is imported: the pydantic models are built from the table)."""
    if knob.name in _REGISTRY:
        raise ValueError(f"knob {knob.name!r} is already registered")
    _REGISTRY[knob.name] = knob
    return knob


def registered() -> tuple[Knob, ...]:
    """Every knob, in declaration order (the order samplers ask for them)."""
    return tuple(_REGISTRY.values())


def unhandled(config: Any, handled: set[str] | frozenset[str]) -> str | None:
    """The first knob outside `handled` that `config` sets off its default, as "name=value",
    or None: a consumer written before a knob existed refuses it rather than drop it silently."""
    for knob in _REGISTRY.values():
        value = getattr(config, knob.name, knob.default)
        if knob.name not in handled and value != knob.default:
            return f"{knob.name}={knob.plain(value)}"
    return None


def searched() -> tuple[Knob, ...]:
    """The knobs a search varies, in sampling order."""
    return tuple(k for k in _REGISTRY.values() if k.searched)


def footprint_knobs() -> tuple[Knob, ...]:
    """The knobs that decide whether a model fits a GPU (weights and KV precision)."""
    return tuple(k for k in _REGISTRY.values() if k.footprint)


def footprint_of(config: Any) -> dict[str, Any]:
    """The footprint knobs' values of a config, by knob name."""
    return {k.name: getattr(config, k.name) for k in footprint_knobs()}


def footprint_text(config: Any) -> str:
    """The footprint knobs' values of a config as "bf16/auto"."""
    return "/".join(str(k.plain(getattr(config, k.name))) for k in footprint_knobs())


def short_config(c: Any) -> str:
    """A variant in a few words: weights/KV, TP, seqs and batched-token limits, speculation."""
    spec = f" {c.draft_model}x{c.num_speculative_tokens}" if c.num_speculative_tokens else ""
    prefix = "" if c.enable_prefix_caching else " no-prefix"
    layout = (f" dp{c.data_parallel_size}" if c.data_parallel_size > 1 else "") + (
        " ep" if c.expert_parallel else ""
    )
    moe = _REGISTRY.get("moe_kernel")
    kernel = moe.plain(getattr(c, "moe_kernel", moe.default)) if moe else None
    experts = f" {kernel}" if moe and kernel != moe.plain(moe.default) else ""
    return (
        f"{footprint_text(c)} tp{c.tensor_parallel_size}{layout} "
        f"s{c.max_num_seqs} b{c.max_num_batched_tokens}{spec}{prefix}{experts}"
    )


def footprint_words(config: Any, sep: str = ", ") -> str:
    """The footprint knobs' values of a config in words: "int8 weights, 16-bit KV"."""
    return sep.join(k.phrase(getattr(config, k.name)) for k in footprint_knobs())


def get(name: str) -> Knob:
    """The knob called `name`."""
    return _REGISTRY[name]


def color_for(name: str, value: Any) -> str:
    """The plot colour of one value of a knob: its position among the choices, else a hash."""
    knob = _REGISTRY.get(name)
    choices = knob.choices if knob else None
    plain = value.value if isinstance(value, Enum) else value
    if choices and plain in choices:
        return PALETTE[choices.index(plain) % len(PALETTE)]
    return PALETTE[sum(str(plain).encode()) % len(PALETTE)]
