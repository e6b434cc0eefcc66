"""A bf16 learner keeps float32 masters: its exported weights move as an fp32 run's do.

Before (``gpu-review.md`` #7) the learner trained bf16 parameters directly: at lr 5e-5 every
AdamW update below half a bf16 spacing rounded away, and 3 sync steps changed 7.8 % of the
weights where fp32 changed 99.98 %."""

from __future__ import annotations

import pytest
import torch
from pipeline_helpers import run_overrides

from scalerl.config import load_config
from scalerl.pipeline.run import train
from scalerl.runfolder import read_records


def _exported_change(model_dir, run_dir, dtype: str) -> tuple[float, list[dict]]:
    from safetensors.torch import load_file

    cfg = load_config("scalerl", run_overrides(model_dir, **{
        "model.dtype": dtype, "pipeline.mode": "sync", "pipeline.backend": "inprocess",  # 8 groups: some train
        "pipeline.prompts_per_step": 8, "pipeline.generations": 4, "pipeline.prompts_per_chunk": 8,
        "optim.warmup_steps": 0, "train.steps": 3, "eval.every": 100, "eval.schedule": "every", "eval.num_prompts": 4, "eval.k": 1,
        "filters.zero_variance": "false"}))  # every group trains, at the default lr 5e-5
    train(cfg, run_dir, log=lambda *_: None)
    start, end = load_file(model_dir / "model.safetensors"), load_file(run_dir / "model" / "model.safetensors")
    changed = sum(int((start[k].float() != end[k].float()).sum()) for k in start)
    return changed / sum(t.numel() for t in start.values()), read_records(run_dir / "metrics.jsonl")


def _bf16_exact_copy(model_dir, out):
    """``model_dir`` with every weight rounded to a bf16 value (still stored as float32), so a
    bf16 model loads it without rounding and any exported change is a trained one."""
    import shutil

    from safetensors.torch import load_file, save_file

    shutil.copytree(model_dir, out)
    weights = load_file(out / "model.safetensors")
    save_file({k: v.to(torch.bfloat16).float() for k, v in weights.items()}, out / "model.safetensors",
              metadata={"format": "pt"})
    return out


@pytest.mark.parametrize("dtype", ["bfloat16"])
def test_a_bf16_run_moves_its_weights_as_an_fp32_run_does(warm_model_dir, tmp_path, dtype):
    start = _bf16_exact_copy(warm_model_dir, tmp_path / "start")
    fp32, _ = _exported_change(start, tmp_path / "fp32", "float32")
    bf16, records = _exported_change(start, tmp_path / dtype, dtype)
    assert fp32 > 0.9  # what 3 AdamW steps do to float32 weights
    assert bf16 > 0.9 * fp32  # bf16 parameters had moved 7.8 %
    assert all(r["grad_norm"] > 0 for r in records[1:])
