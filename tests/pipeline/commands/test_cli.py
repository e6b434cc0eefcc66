"""``scalerl train`` argument handling: bad config is one sentence and exit code 2."""

from __future__ import annotations

import pytest

from scalerl.cli import main


@pytest.mark.parametrize(
    "argv, message",
    [
        (["train", "--recipe", "nope"], "unknown recipe 'nope'"),
        (["train", "--set", "optim.lrr=1"], "unknown config key 'optim.lrr' in --set optim.lrr"),
        (["train", "--set", "pipeline.k=zero"], "bad value 'zero' for 'pipeline.k'"),
        (["train", "--set", "nokey"], "must look like key.sub=value"),
    ],
)
def test_bad_config_is_one_sentence_and_exit_2(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and err.count("\n") == 0


def test_resume_needs_a_run_directory(tmp_path, capsys):
    assert main(["train", "--resume", str(tmp_path)]) == 2
    assert "is not a run directory" in capsys.readouterr().err


def test_an_existing_run_is_not_overwritten(tmp_path, capsys):
    (tmp_path / "metrics.jsonl").write_text('{"step": 0}\n')
    assert main(["train", "--out", str(tmp_path)]) == 2
    assert f"--resume {tmp_path}" in capsys.readouterr().err
    assert (tmp_path / "metrics.jsonl").read_text() == '{"step": 0}\n'
