"""``scalerl export``: a Hugging Face model directory from any run's checkpoint.

    scalerl export RUN_DIR [--out DIR] [--merge] [--dtype bfloat16]

A run writes ``RUN_DIR/model`` at every checkpoint already; this writes one again from the
newest checkpoint that loads (the run directory is only read), in another dtype, somewhere
else, or merged: with LoRA the default is the adapter plus ``merged/``, and ``--merge``
writes the merged weights alone as a complete model directory. Torch is imported inside the
handler only; every bad input is one sentence and exit code 2.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from scalerl.cli import EXIT_BAD_INPUT, one_line_errors


def register(subparsers) -> None:
    p = subparsers.add_parser("export", help="write a Hugging Face model directory from a run's checkpoint",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run", type=Path, metavar="RUN_DIR", help="a run directory (scalerl train --out)")
    p.add_argument("--out", type=Path, help="where to write it (default: RUN_DIR/model)")
    p.add_argument("--merge", action="store_true", help="LoRA runs: the merged weights alone, not the adapter")
    p.add_argument("--dtype", choices=("float32", "bfloat16", "float16"),
                   help="dtype of the weights (default: the run's export.dtype)")
    p.set_defaults(func=handle)
    one_line_errors(p)


def handle(args: argparse.Namespace) -> int:
    from scalerl.checkpoint import CheckpointError
    from scalerl.config import ConfigError

    try:
        out = export_run(args.run, args.out, merge=args.merge, dtype=args.dtype)
    except (ConfigError, CheckpointError) as err:
        print(f"scalerl export: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(f"model directory: {out}")
    return 0


def export_run(run_dir: Path, out: Path | None = None, *, merge: bool = False, dtype: str | None = None) -> Path:
    """Write the policy of ``run_dir``'s newest checkpoint to ``out``; returns ``out``."""
    from scalerl.checkpoint import read_checkpoint
    from scalerl.config import ConfigError, load_config
    from scalerl.models.export import write_model_dir
    from scalerl.pipeline.build import load_model, saved_template

    if not (run_dir / "config.yaml").is_file():
        raise ConfigError(f"{run_dir} is not a run directory (no config.yaml in it).")
    cfg = load_config(run_dir / "config.yaml")
    base = Path(cfg.model.base) if cfg.model.base is not None else run_dir / "base_model"
    if not (base / "config.json").is_file():
        raise ConfigError(f"the starting model of {run_dir} is gone ({base} holds no config.json), "
                          "and the checkpoint holds only what the run trained.")
    state, meta = read_checkpoint(run_dir)
    model, tokenizer = load_model(cfg, base, "cpu")
    model.load_state_dict(state["learner"]["model"], strict=cfg.model.lora is None)
    if merge and cfg.model.lora is not None:
        model = model.merge_and_unload()
    template = saved_template(cfg, tokenizer)
    out = out or run_dir / "model"
    write_model_dir(out, model, tokenizer, dtype=dtype or cfg.export.dtype, chat_template=template)
    print(f"exported step {meta['step']} of {run_dir}", file=sys.stderr)
    return out
