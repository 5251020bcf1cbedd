"""Shared pytest configuration: the `gpu` marker skips without CUDA."""

from __future__ import annotations

import os

import pytest

# Rich wraps tables to the terminal width; tests read whole cell values.
os.environ.setdefault("COLUMNS", "200")


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip tests marked `gpu` when no CUDA device is present."""
    if _cuda_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if item.get_closest_marker("gpu") is not None:
            item.add_marker(skip)
