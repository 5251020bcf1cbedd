"""Parse the Prometheus text exposition format (a server's `/metrics`) into samples; pure."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

__all__ = ["Sample", "label_value", "parse", "total"]

# name{labels} value [timestamp]; see prometheus.io/docs/instrumenting/exposition_formats
_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+\S+)?$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


@dataclass(frozen=True)
class Sample:
    """One exposed time series value."""

    name: str
    labels: dict[str, str]
    value: float


def parse(text: str) -> list[Sample]:
    """Every sample of an exposition; comments, blank and malformed lines are skipped."""
    samples = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = _LINE.match(line)
        if not m:
            continue
        try:
            value = float(m.group(3))
        except ValueError:
            continue
        labels = {k: v.replace('\\"', '"') for k, v in _LABEL.findall(m.group(2) or "")}
        samples.append(Sample(m.group(1), labels, value))
    return samples


def total(samples: list[Sample], name: str) -> float | None:
    """Sum over every label set of `name` (or counter `name_total`); None if absent."""
    values = [s.value for s in samples if s.name in (name, f"{name}_total")]
    finite = [v for v in values if math.isfinite(v)]
    return sum(finite) if finite else None


def label_value(samples: list[Sample], name: str, label: str) -> str | None:
    """The value of `label` on the first sample of `name` (info-style metrics), or None."""
    return next((s.labels[label] for s in samples if s.name == name and label in s.labels), None)
