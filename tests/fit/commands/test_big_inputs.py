"""Big or endless inputs are read in bounded memory or refused in one sentence (reliability
probe RD-*-sparse_tail and RD-speeds-*): records followed by a multi-gigabyte sparse hole, a
speeds file that is ``/dev/zero`` or a named pipe, and ``"devices": true``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

from .._files import synthetic_curve, write_csv

CAP = 1 << 30  # the address space the command may use (a fit peaks near 0.45 GB): below the log's size


def _capped(*argv: str, cwd) -> subprocess.CompletedProcess:
    """``scalerl ARGV`` under an address-space cap of ``CAP`` bytes."""
    code = textwrap.dedent(f"""
        import resource, sys
        resource.setrlimit(resource.RLIMIT_AS, ({CAP}, {CAP}))
        from scalerl.cli import main
        sys.exit(main({list(argv)!r}))
    """)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=cwd, timeout=600)


def test_a_log_with_a_hole_larger_than_the_memory_cap_after_its_records_is_read_in_bounded_memory(tmp_path):
    c, r = synthetic_curve(n=21)
    path = tmp_path / "metrics.jsonl"
    train = "".join(json.dumps({"step": i, "compute_gpu_hours": float(i), "reward_mean": 0.3, "loss": 0.1, "pad": "x" * 60})
                    + "\n" for i in range(200))  # fmt: skip  (training records: past the first 8 KiB)
    path.write_text(train + "".join(json.dumps({"step": 200 + i, "compute_gpu_hours": 200.0 + float(ci),
                                                "val_pass_rate": float(ri)}) + "\n" for i, (ci, ri) in enumerate(zip(c, r))))
    with path.open("r+b") as f:
        f.truncate(path.stat().st_size + (3 << 29))  # a sparse hole of NULs: the torn last line of a killed writer
    for argv in (["fit", str(path), "--no-budget"],):  # plan and sweep --replay read through the same reader
        done = _capped(*argv, cwd=tmp_path)
        assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-2000:]
        assert "21 points" in " ".join(done.stdout.split()), done.stdout[-2000:]
    small = tmp_path / "small.jsonl"  # a hole within the first 8 KiB: binary data, one sentence
    small.write_text(json.dumps({"step": 0, "compute_gpu_hours": 0.0, "val_pass_rate": 0.2}) + "\n")
    with small.open("r+b") as f:
        f.truncate(3 << 29)
    done = _capped("fit", str(small), cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.strip().endswith("is not a JSONL log: it holds binary data.")


def test_a_speeds_file_that_is_endless_blocks_or_says_true_is_one_sentence(tmp_path, capsys):
    from scalerl.cli import main

    run = write_csv(tmp_path / "run.csv", *synthetic_curve(n=21))
    os.mkfifo(tmp_path / "pipe")
    (tmp_path / "bool.json").write_text('{"seconds_per_compute": 36, "devices": true}')
    for speeds, says in (("/dev/zero", "is not a regular file"), (str(tmp_path / "pipe"), "is not a regular file"),
                         (str(tmp_path / "bool.json"), "devices must be a number, not true")):
        assert main(["plan", str(run), "--target", "0.5", "--speeds", speeds]) == 2
        err = capsys.readouterr().err.strip()
        assert says in err and err.count("\n") == 0 and "Traceback" not in err, err
