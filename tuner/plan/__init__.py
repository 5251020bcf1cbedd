"""Capacity planning: how many GPUs of which kind, at what cost, serve a target load in an SLA."""

from tuner.plan.models import KindPlan, Option, PlanRequest, PlanResult
from tuner.plan.planner import plan
from tuner.prices import GPUPrice, PriceTable, load_prices

__all__ = [
    "GPUPrice",
    "KindPlan",
    "Option",
    "PlanRequest",
    "PlanResult",
    "PriceTable",
    "load_prices",
    "plan",
]
