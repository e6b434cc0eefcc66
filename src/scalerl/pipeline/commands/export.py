"""``scalerl export``: a Hugging Face model directory from any run's checkpoint.

    scalerl export RUN_DIR [--out DIR] [--merge] [--dtype bfloat16]

A run writes ``RUN_DIR/model`` at every checkpoint already; this writes one again from the
newest checkpoint that loads (the run directory is only read), in another dtype, somewhere
else, or merged: with LoRA the default is the adapter plus ``merged/``, and ``--merge``
writes the merged weights alone as a complete model directory. Torch is imported inside the
handler only; every bad input is one sentence and exit code 2.

``--out`` is never destroyed: it must be a new path or an earlier export of this run, and
anything else (the run, its inputs, a user's folder or file) is refused before anything is
read (``scalerl.pipeline.commands.export_target``). The export is written beside it and renamed into
place, so a full disk or an unwritable path is one sentence and leaves nothing behind.
"""

from __future__ import annotations

import argparse
import errno
import os
import re
import sys
from pathlib import Path

from scalerl.fit.errors import EXIT_BAD_INPUT
from scalerl.runfolder import BASE_MODEL, CONFIG

# what ``scalerl export --help`` says; the module docstring above is for whoever reads the code
HELP = """Write a Hugging Face model directory from a run's newest checkpoint.

  scalerl export RUN_DIR [--out DIR] [--merge] [--dtype bfloat16]

A run writes RUN_DIR/model at every checkpoint already; this writes one again, in another
dtype, somewhere else, or merged. With LoRA the default is the adapter plus merged/, and
--merge writes the merged weights alone: a complete model that needs no base. The run
directory is only read. --out must be a new path or an earlier export of this run (which is
replaced); anything else is refused, and a failed write (a full disk) leaves nothing behind.
Bad input prints one sentence and exits with code 2.
"""


def register(subparsers) -> None:
    p = subparsers.add_parser("export", help="write a Hugging Face model directory from a run's checkpoint",
                              description=HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run", type=Path, metavar="RUN_DIR", help="a run directory (scalerl train --out)")
    p.add_argument("--out", type=_folder, help="where to write it: a new path, or an earlier export of this "
                   "run, which is replaced (default: RUN_DIR/model)")
    p.add_argument("--merge", action="store_true", help="LoRA runs: the merged weights alone, not the adapter")
    p.add_argument("--dtype", choices=("float32", "bfloat16", "float16"),
                   help="dtype of the weights (default: the run's export.dtype)")
    p.set_defaults(func=handle)


def _folder(text: str) -> Path:
    """``--out``'s value; an empty one is refused, not read as the working directory."""
    if not text.strip():
        raise argparse.ArgumentTypeError("the folder is empty (it would export onto the working directory); "
                                         "name a new folder")
    return Path(text)


def handle(args: argparse.Namespace) -> int:
    # a refusal or a failed write is one sentence on stderr: no per-load progress bar above it
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    from transformers.utils import logging as hf_logging

    from scalerl.checkpoint import CheckpointError
    from scalerl.config import ConfigError

    hf_logging.disable_progress_bar()  # read at import: already imported when called in-process
    try:
        out = export_run(args.run, args.out, merge=args.merge, dtype=args.dtype)
    except (ConfigError, CheckpointError) as err:
        print(f"scalerl export: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(f"model directory: {out}")
    return 0


def export_run(run_dir: Path, out: Path | None = None, *, merge: bool = False, dtype: str | None = None) -> Path:
    """Write the policy of ``run_dir``'s newest checkpoint to ``out``; returns ``out``.

    ``out`` is checked before the checkpoint is read (``export_target.check_target``), so a
    refused one costs nothing and nothing is touched; a failed write is a ``ConfigError``."""
    from scalerl.checkpoint import read_checkpoint
    from scalerl.config import ConfigError, load_config
    from scalerl.models.export import write_model_dir
    from scalerl.pipeline.build import load_model, saved_template
    from scalerl.pipeline.commands.export_target import OWN_MODEL, check_target, marker

    if not (run_dir / CONFIG).is_file():
        raise ConfigError(f"{run_dir} is not a run directory (no config.yaml in it).")
    cfg = load_config(run_dir / CONFIG)
    out = out or run_dir / OWN_MODEL
    check_target(out, run_dir, cfg)
    base = Path(cfg.model.base) if cfg.model.base is not None else run_dir / BASE_MODEL
    if not (base / "config.json").is_file():
        raise ConfigError(f"the starting model of {run_dir} is gone ({base} holds no config.json), "
                          "and the checkpoint holds only what the run trained.")
    state, meta = read_checkpoint(run_dir, log=lambda text: print(text, file=sys.stderr))
    model, tokenizer = load_model(cfg, base, "cpu")
    model.load_state_dict(state["learner"]["model"], strict=cfg.model.lora is None)
    if merge and cfg.model.lora is not None:
        model = model.merge_and_unload()
    template = saved_template(cfg, tokenizer)
    try:
        write_model_dir(out, model, tokenizer, dtype=dtype or cfg.export.dtype, chat_template=template,
                        provenance=marker(run_dir, meta["step"]))
    except Exception as err:
        sentence = write_failure(out, err)
        if sentence is None:  # not a write failure: a bug, shown as one
            raise
        raise ConfigError(sentence) from None
    print(f"exported step {meta['step']} of {run_dir}", file=sys.stderr)
    return out


def write_failure(out: Path, err: Exception) -> str | None:
    """The sentence for a failed write (a full disk, a path we may not write), None for any
    other error. safetensors reports I/O errors as its own exception, with the OS error
    number only in its text."""
    if isinstance(err, OSError):
        code = err.errno
    elif type(err).__name__ == "SafetensorError" and (found := re.search(r"os error (\d+)", str(err))):
        code = int(found.group(1))
    else:
        return None
    if code in (errno.ENOSPC, errno.EDQUOT):
        why = "no space is left on its device"
    else:
        why = (os.strerror(code) if code else str(err)).lower()
    return f"cannot write the export to {out}: {why}; nothing was written, and what was there before is as it was."
