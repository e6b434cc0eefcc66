"""SFT warm-up: teach a fresh model the task format until its pass rate enters a band.

The paper starts RL from an SFT'd 8B model (digest §2.1, "SFT stage"), so RL begins at a
modest but non-zero pass rate R0. Here we do the same for a tiny model: teacher-forced
cross-entropy on ``task.demonstration`` (loss on completion tokens only,
``L = -Σ_t m_t log π(y_t | x, y_<t) / Σ_t m_t``) and, every few steps, the validation pass
rate sampled at temperature 1; training stops as soon as that rate lies in
``target_band = (lo, hi)``. RL then starts from R0 ∈ [lo, hi].

The pass-rate probe is swappable (``pass_rate_fn``); the default samples through the rollout
engine, as RL's generators will (``generate_pass_rate`` samples with ``model.generate``). It
lives in ``pipeline/`` because it drives ``rollout/``, which ``models/`` never imports.
"""

from __future__ import annotations

import copy
import functools
import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from scalerl.algo.logprobs import FP32_HEAD
from scalerl.data.tasks.base import Example, Task
from scalerl.rollout.rollout import build_rollout
from scalerl.rollout.torch_engine import engine_for
from scalerl.rollout.validate import validate
from scalerl.runfolder import SFT_RESULT
from scalerl.types import SamplingParams

PassRateFn = Callable[[torch.nn.Module, object, Task, int], float]
"""``(model, tokenizer, task, num_prompts) -> pass rate`` on ``task.validation()[:num_prompts]``."""


@dataclass
class SFTResult:
    """Outcome of ``sft_warmup``: the measured starting pass rate R0 and how it got there."""

    pass_rate: float
    """R0: pass rate on the final held-out measurement (``final_eval_size`` problems)."""
    reached_band: bool
    steps: int
    seconds: float
    history: list[dict] = field(default_factory=list)
    """One row per probe: step, seconds, loss, pass_rate."""
    output_dir: str | None = None
    timed_out: bool = False
    """Ended by ``SFTSpec.max_seconds``, the safety net: the weights then depend on the machine's speed."""

    def to_dict(self) -> dict:
        return asdict(self)


def encode_demonstrations(
    tokenizer, prompts: Sequence[str], completions: Sequence[str | list[tuple[str, bool]]]
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded ``(input_ids, attention_mask, labels)``, each ``(B, T)``.

    ``labels`` is -100 on prompt and padding tokens, so the loss covers completion + EOS only.
    A completion given as ``(text, trained)`` pieces (a multi-turn episode) is encoded piece
    by piece, as a rollout appends them, and its untrained pieces (an environment's
    observations) get -100 too.
    """
    rows, masks = [], []
    for p, c in zip(prompts, completions):
        prompt_ids = tokenizer(p).input_ids
        pieces = [(c, True)] if isinstance(c, str) else list(c)
        ids, mask = list(prompt_ids), [False] * len(prompt_ids)
        for text, trained in pieces:
            piece = tokenizer(text, add_special_tokens=False).input_ids
            ids += piece
            mask += [trained] * len(piece)
        rows.append(ids + [tokenizer.eos_token_id])
        masks.append(mask + [True])
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), tokenizer.pad_token_id, dtype=torch.long)
    attn = torch.zeros((len(rows), width), dtype=torch.long)
    loss_mask = torch.zeros((len(rows), width), dtype=torch.bool)
    for i, (r, m) in enumerate(zip(rows, masks)):
        ids[i, : len(r)] = torch.tensor(r)
        attn[i, : len(r)] = 1
        loss_mask[i, : len(m)] = torch.tensor(m)
    labels = ids.masked_fill(~loss_mask, -100)
    return ids, attn, labels


def _answer_budget(tokenizer, task: Task, examples: Sequence[Example]) -> int:
    """Room for the longest demonstration plus 50%: enough to finish, short enough to be cheap."""
    longest = max(len(tokenizer(task.demonstration(e), add_special_tokens=False).input_ids)
                  for e in examples)
    return int(longest * 1.5) + 8


@torch.no_grad()
def generate_pass_rate(model, tokenizer, task: Task, num_prompts: int, *, seed: int = 0) -> float:
    """Pass rate of one completion per prompt, sampled at temperature 1 with ``model.generate``."""
    examples = task.validation()[:num_prompts]
    enc = tokenizer([task.prompt(e) for e in examples], return_tensors="pt", padding=True,
                    padding_side="left").to(next(model.parameters()).device)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        out = model.generate(**enc, do_sample=True, temperature=1.0, top_p=1.0, top_k=0,
                             max_new_tokens=_answer_budget(tokenizer, task, examples),
                             pad_token_id=tokenizer.pad_token_id,
                             eos_token_id=tokenizer.eos_token_id)
    texts = tokenizer.batch_decode(out[:, enc.input_ids.shape[1]:], skip_special_tokens=True)
    return float(sum(task.reward(t, e) > 0 for t, e in zip(texts, examples)) / len(examples))


def engine_pass_rate(model, tokenizer, task: Task, num_prompts: int, *, seed: int = 0,
                     params=None, env=None, fp32_head: bool = FP32_HEAD) -> float:
    """Pass rate of one completion per prompt via ``scalerl.rollout`` (the RL generator's path).

    ``params`` (``SamplingParams``) lets the caller measure under its RL length control
    (interruptions, ``max_new_tokens``); the default samples at temperature 1 with room for
    the longest demonstration and no interruption. With ``env`` (an ``EnvSpec``) each
    trajectory runs in the environment, as RL's will.
    """
    import dataclasses

    examples = task.validation()[:num_prompts]
    if params is None:
        params = SamplingParams(max_new_tokens=_answer_budget(tokenizer, task, examples),
                                temperature=1.0)
    params = dataclasses.replace(params, seed=seed)
    engine = engine_for(model, tokenizer, fp32_head=fp32_head, seed=seed)  # fresh: weights changed
    rollout = None if env is None else build_rollout(task, tokenizer, None, env)
    return validate(engine, task, params=params, k=1, num_prompts=num_prompts, rollout=rollout).mean_at_k


def _train_batch(task: Task, tokenizer, step: int, batch_size: int, device):
    start = step * batch_size
    exs = [task.train_example((start + j) % task.num_train) for j in range(batch_size)]
    # a multi-turn task's episode comes in pieces, its observations not trained on
    demonstrate = getattr(task, "demonstration_turns", task.demonstration)
    batch = encode_demonstrations(tokenizer, [task.prompt(e) for e in exs], [demonstrate(e) for e in exs])
    return tuple(t.to(device) for t in batch)


def _train_step(model, opt, batch, lr: float) -> float:
    """One AdamW step on teacher-forced cross-entropy over completion tokens; returns the loss."""
    ids, attn, labels = batch
    for group in opt.param_groups:
        group["lr"] = lr
    loss = model(input_ids=ids, attention_mask=attn, labels=labels).loss
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    return float(loss.detach())


def _probe(measure, model, tokenizer, task, probe_size: int, confirm_size: int,
           band: tuple[float, float]) -> tuple[float, float | None]:
    """(probe pass rate, confirmation on ``confirm_size`` prompts if the probe is in ``band``)."""
    model.eval()
    rate = measure(model, tokenizer, task, probe_size)
    confirmed = measure(model, tokenizer, task, confirm_size) if band[0] <= rate <= band[1] else None
    model.train()
    return rate, confirmed


def _band_distance(rate: float, lo: float, hi: float) -> float:
    return max(lo - rate, rate - hi, 0.0)


@dataclass(frozen=True)
class SFTSpec:
    """How a warm-up trains and when it stops (``sft_warmup``): the band, the step budget that
    bounds it, and the wall-clock safety net (None: none; hit, the model depends on the machine's
    speed, and the result says so)."""

    target_band: tuple[float, float]
    max_steps: int
    max_seconds: float | None = None
    seed: int = 0
    lr: float = 3e-3
    warmup_steps: int = 20
    weight_decay: float = 0.0
    batch_size: int = 32
    probe_every: int = 25
    probe_size: int = 64
    final_eval_size: int = 200


def sft_warmup(task: Task, model: torch.nn.Module, tokenizer, spec: SFTSpec, *, output_dir: str | Path | None = None,
               pass_rate_fn: PassRateFn | None = None, sampling_params=None, env=None,
               log: Callable[[dict], None] | None = None) -> SFTResult:
    """Train on demonstrations until the sampled validation pass rate enters ``spec.target_band``.

    Every ``probe_every`` steps (every ``probe_every // 4`` once the rate passes ``lo / 2``)
    the pass rate is probed on ``probe_size`` validation problems; a probe inside the band is
    confirmed on ``final_eval_size`` problems, and a confirmed rate in the band stops training.
    An overshoot past ``hi`` rolls back to the probed weights closest to the band and goes on
    at half the learning rate. At ``max_steps`` the closest weights are kept: the warm-up is a
    function of the step count, so a busy machine makes it slower, never different;
    ``max_seconds`` is only a safety net, and a warm-up it ends says so (``SFTResult.timed_out``).
    R0 (``SFTResult.pass_rate``) is the ``final_eval_size`` measurement of the returned
    weights. With ``output_dir``, the model, tokenizer and ``sft_result.json`` are saved there
    as a Hugging Face model directory.

    ``sampling_params`` (a ``SamplingParams``) makes the default probe sample as RL will (its
    interruptions and ``max_new_tokens``), so R0 is the pass rate RL actually starts from;
    ``env`` (an ``EnvSpec``) makes it run the episodes in RL's environment. A task with
    ``demonstration_turns(example) -> [(text, trained)]`` is imitated piece by piece, its
    observations masked. The model trains on whatever device it is on.
    """
    target_band, lr, probe_every = spec.target_band, spec.lr, spec.probe_every
    max_seconds = math.inf if spec.max_seconds is None else spec.max_seconds
    lo, hi = target_band
    if not 0.0 <= lo < hi <= 1.0:
        raise ValueError(f"target_band must satisfy 0 <= lo < hi <= 1, got {target_band}")
    measure = _measure(pass_rate_fn, sampling_params, env)
    device = next(model.parameters()).device
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=spec.weight_decay)
    t0, history, step, rate = time.monotonic(), [], 0, 0.0
    best = (math.inf, None, None)  # (distance to band, state_dict, rate on final_eval_size)
    torch.manual_seed(spec.seed)
    model.train()
    timed_out = False
    while step < spec.max_steps:
        if time.monotonic() - t0 >= max_seconds:  # the safety net, said in the result
            timed_out = True
            break
        batch = _train_batch(task, tokenizer, step, spec.batch_size, device)
        loss = _train_step(model, opt, batch, lr * min(1.0, (step + 1) / spec.warmup_steps))
        step += 1
        every = probe_every if rate < lo / 2 else max(1, probe_every // 4)
        if step % every:
            continue
        rate, confirmed = _probe(measure, model, tokenizer, task, spec.probe_size, spec.final_eval_size,
                                 target_band)
        row = {"step": step, "seconds": time.monotonic() - t0, "loss": loss, "pass_rate": rate,
               "confirmed_pass_rate": confirmed}
        history.append(row)
        if log is not None:
            log(row)
        measured = rate if confirmed is None else confirmed
        dist = _band_distance(measured, lo, hi)
        if dist < best[0]:
            best = (dist, copy.deepcopy(model.state_dict()), confirmed)
        if dist == 0.0:
            break
        if measured > hi and best[1] is not None:
            model.load_state_dict(best[1])  # overshoot: step back and go more gently
            lr, probe_every = lr / 2, max(1, probe_every // 2)
    if best[1] is not None:
        model.load_state_dict(best[1])
    model.eval()
    final = best[2] if best[2] is not None else measure(model, tokenizer, task, spec.final_eval_size)
    result = SFTResult(pass_rate=final, reached_band=lo <= final <= hi, steps=step,
                       seconds=time.monotonic() - t0, history=history, timed_out=timed_out)
    if output_dir is not None:
        _save(result, model, tokenizer, output_dir)
    return result


def _measure(pass_rate_fn: PassRateFn | None, sampling_params, env=None) -> PassRateFn:
    """The probe: the caller's, else the engine under ``sampling_params`` (in ``env``), else the default."""
    if pass_rate_fn is not None:
        return pass_rate_fn
    return functools.partial(engine_pass_rate, params=sampling_params, env=env)


def _save(result: SFTResult, model, tokenizer, output_dir: str | Path) -> None:
    """The model and tokenizer as a Hugging Face directory, with ``sft_result.json`` beside."""
    from scalerl.models.load import save_pretrained

    out = save_pretrained(model, tokenizer, output_dir)
    result.output_dir = str(out)
    (out / SFT_RESULT).write_text(json.dumps(result.to_dict(), indent=2))
