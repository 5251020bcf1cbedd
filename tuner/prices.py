"""GPU price tables: on-demand $/GPU-hour per profile, each figure with its source and date."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from pydantic import Field

from tuner import catalog
from tuner.errors import InputError
from tuner.knobs.models import Strict
from tuner.yaml_read import load_yaml_model

__all__ = ["DEFAULT_PRICES", "GPUPrice", "PriceTable", "load_prices"]

# The price table shipped in prices/ (force-included into the wheel like the other catalogs).
DEFAULT_PRICES = "on-demand"


class GPUPrice(Strict):
    """One GPU's on-demand price and where it was read."""

    usd_per_gpu_hour: float = Field(gt=0, description="On-demand price of one GPU for one hour")
    provider: str = Field(min_length=1)
    product: str = Field(default="", description="The provider's name for what is rented")
    source: str = Field(min_length=8, description="URL of the public price page")
    checked: dt.date = Field(description="Date the price was read from the source")
    note: str = ""


class PriceTable(Strict):
    """Prices keyed by GPU profile name; profiles left out have no price (never invented)."""

    name: str = "custom"
    description: str = ""
    currency: Literal["USD"] = "USD"
    prices: dict[str, GPUPrice] = Field(default_factory=dict)

    def get(self, gpu: str) -> GPUPrice | None:
        """The price of GPU profile `gpu`, or None when the table has none."""
        return self.prices.get(gpu)

    def with_price(self, gpu: str, usd_per_gpu_hour: float) -> PriceTable:
        """A copy with `gpu`'s hourly price replaced (source and date kept)."""
        old = self.prices[gpu]
        new = old.model_copy(update={"usd_per_gpu_hour": usd_per_gpu_hour})
        return self.model_copy(update={"prices": {**self.prices, gpu: new}})


def load_prices(path: Path | None = None, extra_names: Sequence[str] = ()) -> PriceTable:
    """The shipped table, or `path` validated: a GPU name that is neither a catalog profile nor in
    `extra_names` (custom profiles being planned) is an error, so a typo is never ignored."""
    file = path if path is not None else catalog.data_dir("prices") / f"{DEFAULT_PRICES}.yaml"
    if path is not None and not path.is_file():
        raise InputError(f"--prices {path}: no such file")
    table = load_yaml_model(file, PriceTable)
    known = sorted({*catalog.list_names("hardware_profiles"), *extra_names})
    unknown = sorted(set(table.prices) - set(known))
    if unknown:
        raise InputError(
            f"{file}: unknown GPU profile(s) {', '.join(unknown)}; allowed: {', '.join(known)}"
        )
    return table
