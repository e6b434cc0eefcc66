"""``bench/mismatch.py`` runs and prints a row per precision this device has."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_mismatch_bench_prints_every_cpu_precision():
    run = subprocess.run([sys.executable, "bench/mismatch.py", "--preset", "nano", "--prompts", "2", "--new-tokens",
                          "4", "--no-scaling"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    rows = {line.split()[0]: line.split()[1:] for line in run.stdout.splitlines() if line and line[0] != "#"}
    assert {"fp32", "bf16", "bf16+fp32head"} <= set(rows)
    assert float(rows["bf16"][-1]) == 1.0  # the kl / bf16 column is relative to bf16 itself
    assert float(rows["fp32"][0]) < float(rows["bf16"][0])  # fp32 on both sides agrees more
