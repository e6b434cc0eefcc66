"""TRL's ``GRPOConfig`` names and what each one is here: one table for two readers.

A user coming from TRL writes ``num_generations: 8`` or ``learning_rate: 1e-6`` in a recipe,
at the top level as in ``GRPOConfig`` or under a section. Both are unknown keys here, and the
closest-name guess of ``scalerl.config.errors.did_you_mean`` answers them wrongly
(``num_generations`` is closest to ``pipeline.num_generators``, the number of generator
processes, not G). So an unknown key that is a TRL name is answered from this table instead
(:func:`trl_hint`), and the "Coming from TRL" page's table (``docs/coming-from-trl.md``) is this table rendered
(:func:`markdown_rows`; ``tests/test_trl_names.py`` checks that the two are equal), so the
sentence a user gets and the page they read cannot drift apart.

``per_device_train_batch_size`` (N) counts completions, where ``pipeline.prompts_per_step``
(P) counts prompts, so its sentence does the arithmetic P = N × accumulation / G with the G of
the same config (``pipeline.generations``, or TRL's ``num_generations`` beside it), or the
default G when no layer sets one, and names where G came from.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from scalerl.config.pipeline import PipelineConfig

Layers = list[tuple[str, dict[str, Any]]]


@dataclass(frozen=True)
class TrlRow:
    """One row of the table: TRL's name(s), a note on them, and what they are here (Markdown)."""

    names: tuple[str, ...]
    here: str
    note: str = ""


BATCH = "per_device_train_batch_size"

TRL_ROWS: tuple[TrlRow, ...] = (
    TrlRow(("learning_rate",), "`optim.lr` (warm-up `optim.warmup_steps`)"),
    TrlRow(("num_generations",), "`pipeline.generations` (G, the completions per prompt; `pipeline.num_generators` "
                                 "is the number of generator processes)"),
    TrlRow(("max_completion_length",), "`sampling.max_new_tokens`"),
    TrlRow((BATCH,), "`pipeline.prompts_per_step` (P) = N × devices × `gradient_accumulation_steps` / G: one "
                     "optimiser step trains P prompts × G completions", note=" (N completions)"),
    TrlRow(("generation_batch_size", "gradient_accumulation_steps"),
           "one optimiser step trains `pipeline.prompts_per_step` (P) prompts × G completions, whatever the devices; "
           "`optim.micro_batch` / `micro_batch_tokens` only split it for memory"),
    TrlRow(("steps_per_generation",), "`pipeline.mode: ppo-off-policy` with `pipeline.k` updates per generation round; "
                                      "the default `pipeline-rl` streams instead, at most `pipeline.k` versions stale"),
    TrlRow(("num_iterations",), "no equivalent: every group is trained on once", note=" (μ)"),
    TrlRow(("temperature", "top_p"), "`sampling.temperature`, `sampling.top_p` (no `top_k`, `min_p`, "
                                     "`repetition_penalty`)"),
    TrlRow(("beta",), "no equivalent: there is no reference model or KL term (TRL's default `beta` is 0 too)",
           note=" (KL to a reference model)"),
    TrlRow(("epsilon", "epsilon_high"), "`loss.name: grpo` with `loss.grpo.eps_clip` (symmetric), or `loss.name: dapo` "
                                        "with `loss.dapo.eps_low` / `eps_high`; the recipe's `cispo` clips the IS "
                                        "weight instead (`loss.cispo.eps_max`)"),
    TrlRow(("loss_type",), "`loss.aggregation`: `grpo` ≈ `sample`, `bnpo` / `dapo` ≈ `token`, the recipe's `prompt` "
                           "averages per prompt; `dr_grpo`'s constant divisor has no equivalent"),
    TrlRow(("scale_rewards",), "`advantages.norm`: `group` / `True` = `prompt`, `batch` = `batch` (the recipe), "
                               "`none` / `False` = `none`"),
    TrlRow(("mask_truncated_completions",), "`length.truncation`: `False` = `keep`, `True` = `mask` (in group "
                                            "statistics, out of the loss); `drop` removes them from both"),
    TrlRow(("reward_funcs", "reward_weights"), "`task.reward_fns` (or one `task.reward_fn`), `task.reward_weights`; "
                                               "functions (`async def` too) only: no reward models by Hub ID or "
                                               "`PreTrainedModel`"),
    TrlRow(("use_vllm",), "`rollout.engine: vllm` (each generator owns its engine; no server mode)"),
    TrlRow(("vllm_importance_sampling_correction",), "`loss.is_correction.mode: tis` (`loss.is_correction.tis.cap`)"),
    TrlRow(("max_prompt_length",), "no length of its own: a prompt that with `max_new_tokens` exceeds the model's "
                                   "context is refused, or cut to its last tokens with `task.long_prompts: cut`"),
    TrlRow(("max_steps", "save_steps", "seed"), "`train.steps`, `train.checkpoint_every`, `train.seed`"),
)

BY_NAME: dict[str, TrlRow] = {name: row for row in TRL_ROWS for name in row.names}
"""Each TRL name -> its row."""

README_HEADER = ("| `GRPOConfig` | scalerl |", "|---|---|")


def markdown_rows() -> list[str]:
    """The README table's rows, one line each, in table order (its two header lines apart)."""
    return [f"| {', '.join(f'`{n}`' for n in row.names)}{row.note} | {row.here} |" for row in TRL_ROWS]


def _plain(markdown: str) -> str:
    return markdown.replace("`", "")


def trl_hint(loc: tuple[str, ...], layers: Layers) -> str | None:
    """What the unknown key ``loc`` is here, if its last part is a TRL name (else None): the
    tail of the one sentence ``scalerl.config.errors.explain`` gives."""
    row = BY_NAME.get(loc[-1]) if loc else None
    if row is None:
        return None
    said = f"that is TRL's GRPOConfig {loc[-1]}{row.note}; in scalerl: {_plain(row.here)}"
    if loc[-1] == BATCH:
        said += _prompts_per_step(loc, layers)
    return said


def _prompts_per_step(loc: tuple[str, ...], layers: Layers) -> str:
    """The arithmetic P = N × accumulation / G with the values this config gives, in words."""
    n, _ = _last(layers, [loc])
    if not _count(n):
        return ""
    accum, accum_from = _last(layers, _anywhere(layers, "gradient_accumulation_steps"))
    accum = accum if _count(accum) else 1
    g, g_from = _last(layers, [("pipeline", "generations"), *_anywhere(layers, "num_generations")])
    if not _count(g):  # no layer sets G: the run would take the default
        g, g_from = PipelineConfig.model_fields["generations"].default, None
    top = f"{n} × {accum}" if accum != 1 else f"{n}"
    where = (f"G = {g} from {g_from}" if g_from else f"G = {g}, pipeline.generations' default") + (f", gradient_accumulation_steps = {accum} from {accum_from}"
                                         if accum != 1 else "")
    if (n * accum) % g:
        return (f"; on one device, {top} / {g} = {n * accum / g:.2f} ({where}) is not a whole number of prompts: "
                f"make N{' × gradient_accumulation_steps' if accum != 1 else ''} a multiple of G")
    return f"; on one device, {top} / {g} = {n * accum // g} ({where}): set pipeline.prompts_per_step: {n * accum // g}"


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _anywhere(layers: Layers, name: str) -> list[tuple[str, ...]]:
    """Where ``name`` may stand in a layer: at the top, or directly under any section."""
    sections = {key for _, data in layers for key, value in data.items() if isinstance(value, dict)}
    return [(name,), *((section, name) for section in sorted(sections))]


def _last(layers: Layers, locs: list[tuple[str, ...]]) -> tuple[Any, str | None]:
    """The value the last layer that sets any of ``locs`` gives it, and that layer's source."""
    for source, data in reversed(layers):
        for loc in locs:
            value: Any = data
            for part in loc:
                value = value.get(part, _MISSING) if isinstance(value, dict) else _MISSING
            if value is not _MISSING:
                return value, source
    return None, None


_MISSING = object()
