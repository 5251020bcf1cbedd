"""The arithmetic of a plan: replicas, GPUs, dollars, utilisation, energy. Pure functions."""

from __future__ import annotations

import math

__all__ = [
    "DEFAULT_HEADROOM",
    "SECONDS_PER_HOUR",
    "energy_j_per_token",
    "offered_rate_rps",
    "replicas_needed",
    "usd_per_hour",
    "usd_per_million_tokens",
    "utilisation",
]

SECONDS_PER_HOUR = 3600.0
# Spare capacity planned on top of the target: capacity is the Poisson rate at which the SLA
# percentile is just met, a cliff; 20% keeps a burst or one replica restarting inside the SLA.
DEFAULT_HEADROOM = 0.2
# Float noise must not add a replica when target x (1 + headroom) is an exact multiple.
_CEIL_EPS = 1e-9


def replicas_needed(target_rps: float, capacity_rps: float, headroom: float) -> int:
    """ceil(target x (1 + headroom) / capacity per replica); at least one replica."""
    if capacity_rps <= 0:
        raise ValueError(f"capacity per replica must be > 0 (got {capacity_rps})")
    if target_rps < 0 or headroom < 0:
        raise ValueError(f"target ({target_rps}) and headroom ({headroom}) must be >= 0")
    return max(1, math.ceil(target_rps * (1.0 + headroom) / capacity_rps - _CEIL_EPS))


def utilisation(target_rps: float, replicas: int, capacity_rps: float) -> float:
    """Fraction of the fleet's SLA capacity the target load uses."""
    return target_rps / (replicas * capacity_rps)


def usd_per_hour(gpus: int, usd_per_gpu_hour: float) -> float:
    """Fleet price per hour."""
    return gpus * usd_per_gpu_hour


def usd_per_million_tokens(fleet_usd_per_hour: float, tokens_per_s: float) -> float:
    """Dollars per million tokens served at `tokens_per_s` by a fleet costing this per hour."""
    return fleet_usd_per_hour / (tokens_per_s * SECONDS_PER_HOUR) * 1e6


def energy_j_per_token(
    gpus: int, tdp_w: float, load_fraction: float, tokens_per_s: float
) -> float | None:
    """Estimate: every GPU draws TDP x the load fraction; idle power is not counted (None when
    the profile does not know its power)."""
    if tdp_w <= 0:
        return None
    return gpus * tdp_w * load_fraction / tokens_per_s


def offered_rate_rps(users: int, think_time_s: float, e2e_s: float) -> float:
    """Little's law for closed-loop users: each sends, waits E2E, thinks, sends again."""
    cycle_s = think_time_s + e2e_s
    if cycle_s <= 0:
        raise ValueError(f"think time + E2E must be > 0 (got {cycle_s})")
    return users / cycle_s
