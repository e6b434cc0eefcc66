#!/usr/bin/env bash
# The GPU check (bench/gpu_check.py): CUDA tests, engine and learner throughput (0.5B and large),
# the weight sync per transport, 200 pipeline-rl steps that must rise, figures in one JSON file.
# Bounded at 8 minutes (the real-vLLM tests last). `--dry-run` works on any machine.
# Runs without the project's venv (a bare GPU machine): src/ goes on the path, and
# bench/gpu_preflight.py names, in one sentence with exit 2, any wheel this Python lacks.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
PY="${PYTHON:-.venv/bin/python}"
[ -x "$PY" ] || PY=python3
"$PY" bench/gpu_preflight.py
exec timeout 480 "$PY" bench/gpu_check.py "$@"
