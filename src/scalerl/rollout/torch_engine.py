"""Batched KV-cache sampler in plain torch: the reference generator of the PipelineRL loop.

One ``generate`` call decodes all prompts in lock-step:
- prefill: prompts left-padded, with an attention mask and position ids ``cumsum(mask) - 1``
  so a row's positions are exactly those of its unpadded sequence; it runs through
  ``models.forward.forward_logits``, the body + FP32 head shared with the trainer (§2.4),
  once per *distinct* prompt (the G samples of a group share it; the cache is expanded);
- with ``keep_prefixes`` (multi-turn), prompts that extend a row of the last call prefill
  only their rest, through ``fast_decode.LeanDecoder.extend`` over the kept KV (``prefix_kv``);
- decode: every live row feeds one token per step, through the lean Llama-family step of
  ``fast_decode.py`` (same arithmetic, static KV buffers) or, with ``fast=False`` or an
  unsupported architecture, through ``forward_logits`` with a ``DynamicCache``;
- rows that finish (EOS, stop string, budget) are compacted out of the batch and cache.

Per-step bookkeeping is vectorised over rows: at most one host sync per step (``done.any()``,
skipped when no row can end), stop strings and ``</think>`` matched on token ids
(``stopping.py``), interruptions as per-row tensors (``interrupt.py``: thinking tokens are
counted from the start of the completion; ``"interrupted"`` = the answer after the phrase
ended with EOS/stop, ``"length"`` = its budget ran out), sampling by per-row random streams
(``sampling.py``: the recorded behaviour log-prob is ``log softmax(logits / τ)[y]`` of the
full distribution, before top-p, exactly what the trainer recomputes).

In-flight weight updates (digest §2.2): ``on_step(engine, step)`` runs before the forward
that produces completion token ``step``; if it calls ``update_weights``, that forward and
all later ones use the new weights with the existing KV cache (stale, as in PipelineRL),
and tokens ``step, step+1, ...`` carry the new version.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch

from scalerl.algo.logprobs import FP32_HEAD, lm_head_logits
from scalerl.models.forward import forward_logits
from scalerl.rollout import fast_decode
from scalerl.rollout.engine import OnStep
from scalerl.rollout.interrupt import Interrupter, interruption_points
from scalerl.rollout.prefix_kv import PrefixKV, RowKV, kept_kv
from scalerl.rollout.sampling import row_uniforms, sample_tokens
from scalerl.rollout.stopping import SuffixMatcher, encode_strings
from scalerl.types import Completion, SamplingParams

_RUNNING, _STOP, _LENGTH, _INTERRUPTED = 0, 1, 2, 3
_REASONS = {_STOP: "stop", _LENGTH: "length", _INTERRUPTED: "interrupted"}
THINK_CLOSE = "</think>"


def check_params(params: SamplingParams) -> None:
    """Reject sampling settings the engine cannot honour, naming the field."""
    if params.max_new_tokens < 1:
        raise ValueError(f"SamplingParams.max_new_tokens must be >= 1, got {params.max_new_tokens}")
    if params.temperature < 0:
        raise ValueError(f"SamplingParams.temperature must be >= 0, got {params.temperature}")
    if not 0 < params.top_p <= 1:
        raise ValueError(f"SamplingParams.top_p must be in (0, 1], got {params.top_p}")
    if params.answer_budget < 0:
        raise ValueError(f"SamplingParams.answer_budget must be >= 0, got {params.answer_budget}")
    if params.interrupt_range is not None:
        lo, hi = params.interrupt_range
        if not 0 <= lo <= hi:
            raise ValueError(
                f"SamplingParams.interrupt_range must be (lo, hi) with 0 <= lo <= hi, got {params.interrupt_range}"
            )


def left_pad(
    prompts: Sequence[Sequence[int]], pad_id: int, device
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
    """``(input_ids (N, L), attention_mask (N, L) | None, position_ids (N, L))``.

    The mask is None when all prompts have the same length (no padding to hide).
    """
    lengths = [len(p) for p in prompts]
    width = max(lengths)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, prompt in enumerate(prompts):
        ids[row, width - len(prompt) :] = torch.as_tensor(prompt, dtype=torch.long)
        mask[row, width - len(prompt) :] = 1
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    padded = min(lengths) != width
    return ids.to(device), (mask.to(device) if padded else None), positions.to(device)


class TorchEngine:
    """:class:`~scalerl.rollout.engine.GenerationEngine` over a transformers causal LM."""

    def __init__(
        self,
        model: torch.nn.Module,
        tokenizer,
        *,
        fp32_head: bool = FP32_HEAD,
        device: str | torch.device = "cpu",
        seed: int = 0,
        version: int = 0,
        fast: bool = True,
        eos_token_ids: Sequence[int] | None = None,
    ):
        """``fast`` decodes with ``fast_decode.LeanDecoder`` when the architecture supports it
        (same arithmetic, less Python per step); else every step runs ``forward_logits``.
        ``eos_token_ids`` overrides the end-of-sequence ids (default: the tokenizer's and the
        model's generation config's; ``()`` never stops on EOS, e.g. for benchmarks)."""
        self.device = torch.device(device)
        # The model may be the learner's own (in-process validation): no mode change here,
        # generate() switches to eval mode and back.
        self.model = model.to(self.device)
        self.tokenizer = tokenizer
        self.fp32_head = fp32_head
        self._rng = torch.Generator().manual_seed(seed)
        self._version = int(version)
        if eos_token_ids is None:
            eos = {tokenizer.eos_token_id} | _as_set(getattr(model.generation_config, "eos_token_id", None))
            eos.discard(None)
        else:
            eos = set(eos_token_ids)
        self.eos_ids = torch.tensor(sorted(eos), dtype=torch.long, device=self.device)
        pad = tokenizer.pad_token_id
        self.pad_id = int(pad if pad is not None else (min(eos) if eos else 0))
        self._close = encode_strings(tokenizer, [THINK_CLOSE])
        self.lean = fast_decode.LeanDecoder(self.model) if fast and fast_decode.supports(self.model) else None
        self.prefixes: PrefixKV | None = None  # keep_prefixes(): multi-turn histories reuse their KV

    def keep_prefixes(self) -> None:
        """From now on, each call keeps its rows' KV for the next call's prompts that extend
        them (``rollout.prefix_kv``; the lean decode path only)."""
        if self.lean is not None and self.prefixes is None:
            self.prefixes = PrefixKV()

    @property
    def version(self) -> int:
        return self._version

    def update_weights(self, state_dict: Mapping[str, torch.Tensor], version: int) -> None:
        """Copy ``state_dict`` into the model in place (dtype/device converted); a subset of
        keys is a partial update. In-flight KV caches are kept (PipelineRL)."""
        result = self.model.load_state_dict(dict(state_dict), strict=False)
        if result.unexpected_keys:
            raise KeyError(f"update_weights: keys not in the model: {result.unexpected_keys[:5]}")
        self._version = int(version)

    @torch.inference_mode()
    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        params: SamplingParams,
        *,
        on_step: OnStep | None = None,
    ) -> list[Completion]:
        """Sample one completion per prompt (see the module docstring for the mechanics)."""
        check_params(params)
        if not prompts or any(len(p) == 0 for p in prompts):
            raise ValueError("generate: every prompt must have at least one token")
        seed = params.seed
        if seed is None:
            seed = int(torch.randint(1 << 62, (1,), generator=self._rng))
        if self.lean is not None:
            self.lean.refresh()  # parameters may have been replaced or written since last call
        was_training = self.model.training
        self.model.eval()
        try:
            run = _Decode(self, prompts, params, seed)
            for step in range(params.max_new_tokens):
                if on_step is not None:
                    on_step(self, step)
                run.versions.append(self._version)
                if not run.step(step):
                    break
            if self.prefixes is not None:
                self.prefixes.commit()
            return run.completions(prompts)
        finally:
            self.model.train(was_training)


class _Decode:
    """State of one ``generate`` call: live rows, their cache, and the output buffers."""

    def __init__(self, engine: TorchEngine, prompts, params: SamplingParams, seed: int):
        self.engine, self.params = engine, params
        n, budget, device = len(prompts), params.max_new_tokens, engine.device
        self.uniforms = row_uniforms(seed, n, budget).to(device)  # (n, budget)
        points = None
        if params.interrupt_range is not None:
            points = interruption_points(seed, n, *params.interrupt_range)
        phrase = engine.tokenizer.encode(params.interruption_phrase, add_special_tokens=False)
        self.interrupter = Interrupter(phrase, points, params.answer_budget, n, device)
        self.stops = SuffixMatcher(encode_strings(engine.tokenizer, params.stop_strings), n, device)
        self.closer = SuffixMatcher(engine._close, n, device)
        self.tokens = torch.zeros((n, budget), dtype=torch.long, device=device)
        self.logprobs = torch.zeros((n, budget), dtype=torch.float32, device=device)
        self.forced = torch.zeros((n, budget), dtype=torch.bool, device=device)
        self.reason = torch.zeros(n, dtype=torch.long, device=device)
        self.length = torch.zeros(n, dtype=torch.long, device=device)
        self.rows = torch.arange(n, device=device)  # original index of each live batch row
        self.versions: list[int] = []
        # G samples of one prompt share their prefill: run it once per distinct prompt and
        # expand the cache to the rows afterwards (``expand[row]`` = its distinct prompt).
        distinct: dict[tuple, int] = {}
        expand = [distinct.setdefault(tuple(int(t) for t in p), len(distinct)) for p in prompts]
        self.expand = torch.tensor(expand, device=device) if len(distinct) < n else None
        self.prompts = prompts
        self.cache = None  # transformers DynamicCache (plain path, and the prefill)
        self.kv: fast_decode.StaticKV | None = None  # lean path after the prefill
        self.extending = False  # the lean path prefills each prompt's rest after its kept KV
        hits = [engine.prefixes.lookup(p) for p in distinct] if engine.prefixes is not None else []
        # per row: the oldest version of the KV it reuses from an earlier call (None: none)
        self.kv_floor = [hits[d][1].oldest if hits and hits[d][1] is not None else None for d in expand]
        if any(kv is not None for _, kv in hits):  # keep_prefixes implies the lean path
            self._extend_kept(distinct, hits, budget)
        else:
            self.input_ids, self.mask, self.positions = left_pad([list(p) for p in distinct], engine.pad_id, device)

    def _extend_kept(self, distinct, hits, budget: int) -> None:
        """Set up the prefill of only what follows each prompt's kept KV (``prefix_kv``)."""
        engine, device = self.engine, self.engine.device
        rest = [list(p)[k:] for p, (k, _) in zip(distinct, hits)]
        self.input_ids, mask, positions = left_pad(rest, engine.pad_id, device)
        self.kv, kept = kept_kv(hits, self.input_ids.shape[1] + budget, device)
        mask = mask.bool() if mask is not None else torch.ones_like(self.input_ids, dtype=torch.bool)
        self.mask = torch.cat([kept, mask, mask.new_ones((mask.shape[0], budget))], dim=1)
        self.positions = positions + torch.tensor([k for k, _ in hits], device=device)[:, None]
        self.rope = engine.lean.rope_tables(self.mask.shape[1], self.kv.keys[0].dtype)
        self.extending = True

    def _logits(self) -> torch.Tensor:  # (B, V) next-token logits of the live rows
        engine = self.engine
        if self.extending:
            return self._extended_logits()
        if self.kv is not None:
            hidden = engine.lean.step(self.input_ids[:, 0], self.positions, self.kv, self.mask, self.rope)
            return self._lean_head(hidden[:, -1])
        logits, self.cache = forward_logits(
            engine.model,
            self.input_ids,
            attention_mask=self.mask,
            position_ids=self.positions,
            past_key_values=self.cache,
            fp32_head=engine.fp32_head,
            use_cache=True,
            last_only=True,
        )
        logits = logits[:, -1].float()
        if self.expand is not None:  # from one row per distinct prompt to one per sample
            logits = logits[self.expand]
            self.mask = self.mask[self.expand] if self.mask is not None else None
            self.positions = self.positions[self.expand]
            if engine.lean is None:
                self.cache.batch_select_indices(self.expand)
        if engine.lean is not None:
            self._to_static(self.expand)
        self.expand = None
        return logits

    def _lean_head(self, hidden: torch.Tensor) -> torch.Tensor:  # (B, H) -> (B, V) float32 logits
        lean, fp32 = self.engine.lean, self.engine.fp32_head
        weight, bias = lean.head_fp32 if fp32 else lean.head
        return lm_head_logits(hidden, weight, bias, fp32=fp32).float()

    def _extended_logits(self) -> torch.Tensor:  # (B, V): after each prompt's rest, once per call
        hidden = self.engine.lean.extend(self.input_ids, self.positions, self.kv, self.mask, self.rope)
        logits = self._lean_head(hidden[:, -1])
        if self.expand is not None:  # one row per distinct prompt -> one per sample
            logits, self.mask, self.positions = logits[self.expand], self.mask[self.expand], self.positions[self.expand]
            self.kv.select(self.expand)
        self.extending, self.expand = False, None
        return logits

    def _to_static(self, rows: torch.Tensor | None) -> None:
        """Move the prefilled cache (its ``rows``, if given) to lean-path buffers; the mask
        becomes a bool row of full capacity (prompt padding False, generated True)."""
        budget = self.params.max_new_tokens
        self.kv = fast_decode.StaticKV(self.cache, extra=budget, rows=rows)
        self.cache = None
        dtype = self.kv.keys[0].dtype
        self.rope = self.engine.lean.rope_tables(self.kv.length + budget, dtype)
        if self.mask is not None:
            tail = self.mask.new_ones((self.mask.shape[0], budget))
            self.mask = torch.cat([self.mask, tail], dim=1).bool()

    def step(self, step: int) -> bool:
        """Produce completion token ``step`` for every live row; False when none is left."""
        params, inter = self.params, self.interrupter
        tokens, logp_all = sample_tokens(
            self._logits(), self.uniforms[self.rows, step], temperature=params.temperature, top_p=params.top_p
        )
        forced = None
        if inter.enabled:
            tokens, forced = inter.force(step, tokens)
            self.forced[self.rows, step] = forced
            inter.observe_close(self.closer.push(tokens))
        self.tokens[self.rows, step] = tokens
        self.logprobs[self.rows, step] = logp_all.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
        reason = self._reasons(step, tokens, forced)
        if reason is not None:  # some row may have ended: one host sync
            done = reason != _RUNNING
            if bool(done.any()):
                self._keep_prefixes(done, step)
                finished = self.rows[done]
                self.reason[finished] = reason[done]
                self.length[finished] = step + 1
                keep = (~done).nonzero().squeeze(1)
                if keep.numel() == 0:
                    return False
                self._select(keep)
                tokens = tokens[keep]
        self._advance(tokens)
        return True

    def _reasons(self, step: int, tokens: torch.Tensor, forced: torch.Tensor | None) -> torch.Tensor | None:
        """(B,) finish reason of each live row after ``step`` (``_RUNNING``: continues).

        EOS or a stop string -> stop ("interrupted" once the phrase was injected; forced
        tokens never stop a row); else the answer budget or ``max_new_tokens`` -> length.
        None when no row can end at this step (skips the host sync).
        """
        inter = self.interrupter
        natural = None
        if self.engine.eos_ids.numel():
            natural = torch.isin(tokens, self.engine.eos_ids)
        if self.stops.patterns:
            hit = self.stops.push(tokens)
            natural = hit if natural is None else natural | hit
        last = step + 1 >= self.params.max_new_tokens
        if natural is None and not inter.enabled and not last:
            return None
        reason = torch.full_like(tokens, _LENGTH if last else _RUNNING)
        if natural is not None and forced is not None:
            natural = natural & ~forced
            ended = torch.where(inter.interrupted, _INTERRUPTED, _STOP)
            reason = torch.where(natural, ended, reason)
        elif natural is not None:
            reason = torch.where(natural, _STOP, reason)
        if inter.enabled:
            reason = torch.where((reason == _RUNNING) & inter.over_budget(step), _LENGTH, reason)
        return reason

    def _keep_prefixes(self, done: torch.Tensor, step: int) -> None:  # (B,) bool: rows ending now
        """Save each ending row's KV — its prompt and its first ``step`` tokens, those fed so
        far — for the next call (``engine.keep_prefixes``)."""
        store = self.engine.prefixes
        if store is None or self.kv is None:
            return
        width, keys, values = self.kv.length, self.kv.keys, self.kv.values
        every = torch.ones(width, dtype=torch.bool, device=self.engine.device)
        for j in done.nonzero().squeeze(1).tolist():
            row = int(self.rows[j])
            real = self.mask[j, :width].clone() if self.mask is not None else every
            kept = RowKV(keys, values, j, real, self.oldest_kv(row))
            store.save([*self.prompts[row], *self.tokens[row, :step].tolist()], kept)

    def oldest_kv(self, row: int) -> int:
        """The oldest version among the KV row ``row``'s tokens attended to: this call's
        prefill (versions only grow within a call) or the KV it reused."""
        floor = self.kv_floor[row]
        return self.versions[0] if floor is None else min(floor, self.versions[0])

    def _select(self, keep: torch.Tensor) -> None:  # (B',) indices of the live rows kept
        self.rows = self.rows[keep]
        if self.kv is not None:
            self.kv.select(keep)
        else:
            self.cache.batch_select_indices(keep)
        self.mask = self.mask[keep] if self.mask is not None else None
        self.positions = self.positions[keep]
        self.interrupter.select(keep)
        self.stops.select(keep)
        self.closer.select(keep)

    def _advance(self, tokens: torch.Tensor) -> None:  # (B,) the tokens just produced
        self.input_ids = tokens.unsqueeze(1)
        self.positions = self.positions[:, -1:] + 1
        if self.mask is not None and self.kv is None:
            self.mask = torch.cat([self.mask, self.mask.new_ones(self.mask.shape[0], 1)], dim=1)

    def completions(self, prompts) -> list[Completion]:
        tokens, logprobs = self.tokens.cpu().numpy(), self.logprobs.cpu().numpy()
        forced, lengths = self.forced.cpu().numpy(), self.length.cpu().tolist()
        reasons = self.reason.cpu().tolist()
        versions = np.asarray(self.versions, dtype=np.int64)
        eos = set(self.engine.eos_ids.tolist())
        out = []
        for row, prompt in enumerate(prompts):
            t = lengths[row]
            ids = tokens[row, :t].copy()
            text_ids = ids[:-1] if t and int(ids[-1]) in eos else ids
            out.append(
                Completion(
                    prompt_tokens=np.asarray(prompt, dtype=np.int64),
                    tokens=ids,
                    logprobs=logprobs[row, :t].copy(),
                    versions=versions[:t].copy(),
                    kv_versions=np.full(t, self.oldest_kv(row) if t else 0, dtype=np.int64),
                    loss_mask=~forced[row, :t],
                    finish_reason=_REASONS[reasons[row]],
                    text=self.engine.tokenizer.decode(text_ids.tolist(), skip_special_tokens=False),
                )
            )
        return out


def engine_for(model: torch.nn.Module, tokenizer, *, fp32_head: bool, device=None, seed: int = 0,
               version: int = 0) -> TorchEngine:
    """The one way a role builds a :class:`TorchEngine` over a model it holds: a generator
    (``pipeline.generators.actor``), the learner's evaluators and the SFT warm-up's probe.
    ``fp32_head`` has no default here: each passes its config's (``model.fp32_head_generator``).
    On ``device``, else where the model already is."""
    where = next(model.parameters()).device if device is None else device
    return TorchEngine(model, tokenizer, fp32_head=fp32_head, device=where, seed=seed, version=version)


def _as_set(value) -> set:
    if value is None:
        return set()
    return set(value) if isinstance(value, list | tuple) else {value}
