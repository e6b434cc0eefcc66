"""Model fixtures shared by the run-level tests (pipeline and experiments)."""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path

import pytest
import torch

SMALL_TASK = {"min_digits": 1, "max_digits": 2}
"""Addition small enough for SFT to reach a useful band in about a minute on one core, yet
with validation problems whose column facts also occur in training problems (with one-digit
operands only, every validation fact would be unseen in training and RL could not help)."""


def _warm_model_key() -> str:
    """What the warm model is a function of: the package's source, this file, torch's and
    transformers' versions (it is deterministic given these: same bytes on every build)."""
    import transformers

    import scalerl

    digest = hashlib.sha256(f"{torch.__version__} {transformers.__version__}".encode())
    src = Path(scalerl.__file__).parent
    for path in sorted(src.rglob("*.py")) + [Path(__file__)]:
        digest.update(path.name.encode() + path.read_bytes())
    return digest.hexdigest()[:16]


def _build_warm_model(out: Path) -> None:
    from scalerl.data.tasks import get_task
    from scalerl.models import build_model, build_task_tokenizer
    from scalerl.pipeline.sft import SFTSpec, sft_warmup

    torch.set_num_threads(1)
    tokenizer = build_task_tokenizer()
    model = build_model("nano", len(tokenizer), seed=0, tokenizer=tokenizer)
    # stopped by steps, never by the clock: a busy machine gets the same warm model (the band
    # is reached at step ~175 here)
    sft_warmup(get_task("addition", **SMALL_TASK), model, tokenizer, SFTSpec((0.15, 0.4), max_steps=1000, seed=0),
               output_dir=out)


@pytest.fixture(scope="session")
def warm_model_dir(tmp_path_factory):
    """A nano model SFT-warmed on small additions (shared by the run-level tests).

    Built once per source tree and machine, not once per test process: ``make test``'s
    xdist workers and its serial part would each spend a minute or two on the same bytes.
    The build sits in the temp folder under a key of everything it depends on
    (:func:`_warm_model_key`), made by one process under a file lock and renamed into place
    whole; each session works on its own copy, so no test can change another's."""
    from filelock import FileLock

    cache = Path(tempfile.gettempdir()) / "scalerl-test-warm" / _warm_model_key()
    cache.parent.mkdir(exist_ok=True)
    with FileLock(f"{cache}.lock"):
        if not (cache / "model" / "config.json").is_file():
            building = cache.with_name(f"{cache.name}.tmp-{os.getpid()}")
            shutil.rmtree(building, ignore_errors=True)
            _build_warm_model(building / "model")
            shutil.rmtree(cache, ignore_errors=True)
            os.rename(building, cache)
    out = tmp_path_factory.mktemp("warm") / "model"
    shutil.copytree(cache / "model", out)
    return out


@pytest.fixture(scope="session")
def nano_dir(tmp_path_factory):
    """An untrained nano model with the task tokenizer: a real run, seconds long."""
    import torch

    from scalerl.models import build_model, build_task_tokenizer
    from scalerl.models.load import save_pretrained

    torch.set_num_threads(1)
    tokenizer = build_task_tokenizer()
    model = build_model("nano", len(tokenizer), seed=0, tokenizer=tokenizer)
    return save_pretrained(model, tokenizer, tmp_path_factory.mktemp("nano") / "model")


@pytest.fixture(scope="session")
def decoder_dirs(tmp_path_factory):
    """Tiny random decoders of three families with the task tokenizer, two blocks of width 32:
    ``{arch: model dir}``. GPT-2 (transformers ``Conv1D`` projections, weights stored
    ``(in, out)``; head tied to the embedding), Llama (head tied) and Qwen2 (head untied).
    GPT-2 keeps GPT2Config's default dropout of 0.1: the learner turns it off
    (``models.load.without_dropout``), or its train-mode log-probs would differ from the
    generators'."""
    from transformers import (
        GPT2Config,
        GPT2LMHeadModel,
        LlamaConfig,
        LlamaForCausalLM,
        Qwen2Config,
        Qwen2ForCausalLM,
    )

    from scalerl.models import build_task_tokenizer
    from scalerl.models.load import save_pretrained

    tokenizer = build_task_tokenizer()
    ids = dict(vocab_size=len(tokenizer), bos_token_id=tokenizer.bos_token_id,
               eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    llama = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, max_position_embeddings=256, **ids)
    configs = {"gpt2": (GPT2LMHeadModel, GPT2Config(n_embd=32, n_layer=2, n_head=2, n_positions=256, **ids)),
               "llama": (LlamaForCausalLM, LlamaConfig(tie_word_embeddings=True, **llama)),
               "qwen2": (Qwen2ForCausalLM, Qwen2Config(tie_word_embeddings=False, **llama))}
    root = tmp_path_factory.mktemp("decoders")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return {arch: save_pretrained(cls(config).eval(), tokenizer, root / arch)
                for arch, (cls, config) in configs.items()}


@pytest.fixture
def cli_here(capfd, monkeypatch):
    """``scalerl ARGS`` through ``main`` in this process (from ``cwd`` when given): its exit code
    and what it wrote to file descriptors 1 and 2, as a fresh process's would be. An exception
    that escapes ``main`` fails the test as a traceback would; a fresh interpreter per call would
    spend seconds importing before the work. ``HF_HUB_DISABLE_PROGRESS_BARS``, which ``train``
    sets, is restored after."""
    import subprocess

    from scalerl.cli import main

    monkeypatch.delenv("HF_HUB_DISABLE_PROGRESS_BARS", raising=False)

    def run(*args: str, cwd=None) -> subprocess.CompletedProcess:
        if cwd is not None:
            monkeypatch.chdir(cwd)
        capfd.readouterr()
        try:
            code = main(list(args))
        except SystemExit as stop:  # argparse's refusals
            code = stop.code
        out, err = capfd.readouterr()
        return subprocess.CompletedProcess(args, code, out, err)

    return run
