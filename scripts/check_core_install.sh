#!/usr/bin/env bash
# `pip install .` with no extras, in a fresh venv: the core commands start and a short tune
# finishes; an optional piece (the torch backend) fails with one line naming its extra.
set -euo pipefail
cd "$(dirname "$0")/.."
core=$(mktemp -d)
trap 'rm -rf "$core"' EXIT
env -u PYTHONPATH python3 -m venv "$core/venv"
env -u PYTHONPATH "$core/venv/bin/pip" install -q . 2>&1 | grep -v "^WARNING: Location" || true
tuner=("env" "-u" "PYTHONPATH" "$core/venv/bin/tuner")
for cmd in --help tune predict plan report bench; do
    if [ "$cmd" = --help ]; then "${tuner[@]}" --help >/dev/null; else "${tuner[@]}" "$cmd" --help >/dev/null; fi
done
(cd "$core" && "${tuner[@]}" tune --model llama-3.1-8b --gpu h200-sxm --sla chat --trials 30 \
    --run-dir "$core/run" >/dev/null)
test -s "$core/run/best.yaml"
if out=$(cd "$core" && "${tuner[@]}" predict --model llama-3.2-1b --gpu h100-sxm --backend torch 2>&1); then
    echo "core install: the torch backend ran without the engine extra" >&2; exit 1
fi
case "$out" in
    *"tuner[engine]"*) ;;
    *) echo "core install: no one-line extra hint for torch, got: $out" >&2; exit 1 ;;
esac
[ "$(printf '%s\n' "$out" | wc -l)" -eq 1 ] || { echo "core install: more than one line: $out" >&2; exit 1; }
echo "core install: tuner --help/tune/predict/plan/report/bench start; a 30-trial tune finished"
