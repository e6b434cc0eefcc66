#!/usr/bin/env bash
# The GPU check (bench/gpu_check.py): CUDA tests, engine and learner throughput, 20 pipeline-rl
# steps, figures in one JSON file. Bounded at 8 minutes. `--dry-run` works on any machine.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-.venv/bin/python}"
[ -x "$PY" ] || PY=python3
exec timeout 480 "$PY" bench/gpu_check.py "$@"
