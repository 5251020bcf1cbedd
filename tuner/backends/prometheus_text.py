"""Samples of a server's `/metrics` (the Prometheus text exposition format), read with the
`prometheus_client` parser (the library vLLM itself exports them with, so it is installed
wherever the vllm backend runs); pure."""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["Sample", "label_value", "parse", "total"]


@dataclass(frozen=True)
class Sample:
    """One exposed time series value."""

    name: str
    labels: dict[str, str]
    value: float


def parse(text: str) -> list[Sample]:
    """Every sample of an exposition; a malformed line is skipped, not the whole scrape."""
    try:
        return _samples(text)
    except ValueError:
        samples: list[Sample] = []
        for line in text.splitlines():
            if line.strip() and not line.lstrip().startswith("#"):
                try:
                    samples.extend(_samples(line + "\n"))
                except ValueError:
                    continue
        return samples


def _samples(text: str) -> list[Sample]:
    from prometheus_client.parser import text_string_to_metric_families

    return [
        Sample(s.name, dict(s.labels), float(s.value))
        for family in text_string_to_metric_families(text)
        for s in family.samples
    ]


def total(samples: list[Sample], name: str) -> float | None:
    """Sum over every label set of `name` (or counter `name_total`); None if absent."""
    values = [s.value for s in samples if s.name in (name, f"{name}_total")]
    finite = [v for v in values if math.isfinite(v)]
    return sum(finite) if finite else None


def label_value(samples: list[Sample], name: str, label: str) -> str | None:
    """The value of `label` on the first sample of `name` (info-style metrics), or None."""
    return next((s.labels[label] for s in samples if s.name == name and label in s.labels), None)
