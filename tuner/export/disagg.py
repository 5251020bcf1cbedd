"""Disaggregated prefill/decode launch files: one Deployment -> its engine's scripts and configs.

Each pool's worker is launched with the flags the aggregated exporter gives its EngineConfig
(`get_exporter(engine).export` runs first, so a layout or quantization the engine cannot express
is refused exactly as for one replica, named by its pool); the engine modules
(`tuner.export.disagg_<engine>`) add the disaggregation flags, the KV-transfer settings and the
front door that splits each request into a prefill and a decode (SGLang's router, vLLM's example
proxy, TensorRT-LLM's disaggregated server). This module holds what every engine shares: the
placement of workers on one host's GPUs, the port plan and the launch script's frame.
"""

from __future__ import annotations

import importlib
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tuner.deployment import Deployment, Pool
from tuner.errors import InputError
from tuner.export.bundle import EngineExport, ExportTarget, comment, shell_join
from tuner.export.registry import get_exporter
from tuner.export.tables import unspelled_reason
from tuner.specs import EngineConfig

__all__ = [
    "DISAGG_ENGINES",
    "FRONT_PORT",
    "HOST",
    "PortPlan",
    "Worker",
    "background",
    "disagg_export",
    "export_disagg",
    "placement_note",
    "place",
    "pool_export",
    "pooled_notes",
    "script",
]

# engine -> module writing its disaggregated launch files (imported on first use: each imports
# this module for the shared pieces).
DISAGG_ENGINES: dict[str, str] = {
    "vllm": "tuner.export.disagg_vllm",
    "sglang": "tuner.export.disagg_sglang",
    "trtllm": "tuner.export.disagg_trtllm",
}

# Everything listens on loopback: the script starts every worker on this host, and nothing is
# exposed to the network unless the user changes it (placement_note says how).
HOST = "127.0.0.1"
FRONT_PORT = 8000  # the router / proxy / disaggregated server: the one port clients use
WORKER_PORT_START = 8100  # worker HTTP ports, prefill workers first, then decode workers
MAX_PORT = 65535


class PortPlan:
    """The ports of one host, each handed out once: a process reserves every port it binds."""

    def __init__(self) -> None:
        self._taken: set[int] = set()

    def take(self, start: int, footprint: Sequence[int] = (0,)) -> int:
        """The lowest base >= `start` with base + each offset of `footprint` free; all taken."""
        base = start
        while any(base + off in self._taken for off in footprint):
            base += 1
        if base + max(footprint) > MAX_PORT:
            raise InputError(f"no free ports above {start} for this deployment on one host")
        self._taken.update(base + off for off in footprint)
        return base


@dataclass(frozen=True)
class Worker:
    """One engine replica of a pool, placed on this host's GPUs and given its HTTP port."""

    phase: str  # "prefill" or "decode"
    index: int  # within its pool
    config: EngineConfig
    gpus: tuple[int, ...]
    port: int

    @property
    def name(self) -> str:
        """`prefill-0`: the worker's log file and its key in the server-args mappings."""
        return f"{self.phase}-{self.index}"

    @property
    def gpu_range(self) -> str:
        """Its GPUs as a person reads them: `0-7`, or `3` for one."""
        return f"{self.gpus[0]}-{self.gpus[-1]}" if len(self.gpus) > 1 else str(self.gpus[0])

    @property
    def address(self) -> str:
        """host:port, as TensorRT-LLM's disaggregated config lists its servers."""
        return f"{HOST}:{self.port}"

    @property
    def url(self) -> str:
        """The worker's base URL, as SGLang's router takes it."""
        return f"http://{self.address}"

    def env(self, **more: int) -> list[str]:
        """Environment assignments of its launch line: its GPUs, then `more` (name=value)."""
        pairs = {"CUDA_VISIBLE_DEVICES": ",".join(str(g) for g in self.gpus), **more}
        return [f"{name}={shlex.quote(str(value))}" for name, value in pairs.items()]


def place(
    deployment: Deployment, footprint: Callable[[Pool], Sequence[int]] | None = None
) -> tuple[PortPlan, int, list[Worker]]:
    """The host's port plan, the front door's port and every worker, prefill pool first, on
    consecutive GPUs of one host; `footprint(pool)` is the port offsets one of the pool's
    servers binds next to its HTTP port (offset 0; None: that port only)."""
    plan = PortPlan()
    front = plan.take(FRONT_PORT)
    out: list[Worker] = []
    gpu = 0
    for phase, pool in (("prefill", deployment.prefill), ("decode", deployment.decode)):
        for index in range(pool.workers):
            gpus = tuple(range(gpu, gpu + pool.gpus_per_worker))
            gpu += pool.gpus_per_worker
            port = plan.take(WORKER_PORT_START, footprint(pool) if footprint else (0,))
            out.append(Worker(phase, index, pool.config, gpus, port))
    return plan, front, out


def pool_export(phase: str, config: EngineConfig, target: ExportTarget) -> EngineExport:
    """The aggregated export of one pool's config: its checks, refusals and notes (an
    InputError names the pool)."""
    engine = config.engine.value
    try:
        if reason := unspelled_reason(engine, config):
            raise InputError(reason)
        return get_exporter(engine).export(config, target)
    except InputError as exc:
        raise InputError(f"{phase} pool: {exc}") from None


def pooled_notes(prefill: Sequence[str], decode: Sequence[str]) -> list[str]:
    """The two pools' caveats: those both share once, the others named by their pool."""
    both = [n for n in prefill if n in decode]
    return [
        *both,
        *(f"prefill pool: {n}" for n in prefill if n not in both),
        *(f"decode pool: {n}" for n in decode if n not in both),
    ]


def placement_note(deployment: Deployment, front: str) -> str:
    """Where the script puts every process, and what to change for more than one node."""
    return (
        f"the script starts all {deployment.prefill.workers + deployment.decode.workers} "
        f"workers ({deployment.shape()}) and the {front} on this host, on GPUs 0-"
        f"{deployment.gpus - 1} in order (CUDA_VISIBLE_DEVICES per worker), every port on "
        f"{HOST}; across nodes, run each worker's line on its own node (GPUs from 0 there, "
        f"--host its address) and put those addresses in place of {HOST} in the {front}'s "
        "worker list."
    )


def background(env: Sequence[str], argv: Sequence[str], log: str) -> str:
    """One worker's launch: `env argv > log 2>&1 &`, its pid kept for the exit trap."""
    line = shell_join(list(argv))
    prefix = " ".join(env)
    return f'{prefix} {line} > {shlex.quote(log)} 2>&1 &\npids="$pids $!"\n'


# The script's frame: run where its files are (the configs it names, the logs it writes);
# workers run in the background and the front door in the foreground, so stopping the front
# door (Ctrl-C, or its exit) stops every worker. Background jobs of a non-interactive shell
# ignore SIGINT, hence the trap; INT/TERM become exits so the EXIT trap runs in every shell.
_PREAMBLE = (
    'cd "$(dirname "$0")"\n'
    "set -eu\n"
    'pids=""\n'
    "trap 'kill $pids 2>/dev/null || true' EXIT\n"
    "trap 'exit 130' INT\n"
    "trap 'exit 143' TERM\n"
)


def script(header: Sequence[str], blocks: Sequence[tuple[str, str]], front: str) -> str:
    """A launch script: `header` comment lines, each (comment, launch) block in the background,
    then the front door's command line in the foreground."""
    text = "#!/bin/sh\n" + "".join(comment(h) for h in header) + _PREAMBLE
    for why, launch in blocks:
        text += "\n" + comment(why) + launch
    return text + "\n" + comment("the front door: clients send every request here") + front + "\n"


def disagg_export(deployment: Deployment, target: ExportTarget | str) -> EngineExport:
    """The deployment's engine's disaggregated launch files, front-door command and caveats."""
    engine = deployment.prefill.config.engine.value
    if engine not in DISAGG_ENGINES:
        raise InputError(f"no disaggregated export for engine {engine!r}")
    module = importlib.import_module(DISAGG_ENGINES[engine])
    result: EngineExport = module.export(deployment, ExportTarget.of(target))
    return result


def export_disagg(deployment: Deployment, target: ExportTarget | str) -> dict[str, str]:
    """File name -> text of the deployment's disaggregated launch, with its README."""
    exp = disagg_export(deployment, target)
    return {**exp.files, f"{exp.engine}-disagg-README.txt": exp.readme()}
