"""``GenerationEngine`` over vLLM's offline engine (the optional ``vllm`` extra on GPUs; its
CPU build of the same release runs in ``make test``, so every path here is tested on the real
engine).

Written against vLLM's offline API (``vllm.LLM``, ``LLM.llm_engine.add_request / step``,
``SamplingParams(logprobs=0)``, ``LLM.collective_rpc``). vLLM is imported lazily; without it
``VLLMEngine(...)`` raises one ``ImportError`` sentence.

How the protocol maps onto vLLM:
- **Behaviour log-probs**: ``logprobs=0`` returns the sampled token's log-prob. The engine is
  built with ``logprobs_mode="processed_logprobs"`` so it is taken after temperature scaling;
  with ``top_p = 1`` that is the full temperature-scaled softmax the trainer recomputes (with
  ``top_p < 1`` vLLM renormalises over the nucleus, unlike ``TorchEngine``).
- **FP32 LM head**: through vLLM's own ``hf_overrides={"head_dtype": "float32"}`` where the
  installed version honours it for generation models (``vllm_support.fp32_head_supported``,
  a feature probe); elsewhere ``fp32_head=True`` needs ``dtype="float32"``. Never a patch.
- **The engine runs in this process** (``VLLM_ENABLE_V1_MULTIPROCESSING=0``, set before
  ``vllm.LLM``; ``async_scheduling=False``): ``llm_engine.step()`` then runs exactly one
  engine step, and ``collective_rpc`` hands the worker live Python objects. By default vLLM
  runs its engine core in a child process that keeps decoding on its own (a weight load would
  land at some later core step, tokens sampled by old weights would be stamped with the new
  version) and msgpack-encodes ``collective_rpc`` arguments (tensors arrive as lists); an
  engine that came up that way anyway (no ``llm_engine.model_executor``) is refused in one
  sentence (``gpu-review.md`` #1–#3).
- **In-flight updates**: decoding runs as a loop over ``llm_engine.step()``; ``on_step(engine,
  step)`` is called before each engine step (``step`` counts engine steps of the current
  phase, not token indices: vLLM schedules requests independently). ``update_weights`` loads
  the tensors in place through ``collective_rpc`` and vLLM's ``reload_weights`` (a partial
  update completed to whole layers); running requests keep their KV blocks (stale cache, as
  in PipelineRL), and tokens returned by later steps are stamped with the new version — the
  version that sampled them, since nothing decodes between two ``step()`` calls — and with
  ``kv_versions``, the oldest version of the KV they read (the phase's first step). vLLM resets the prefix
  cache only while no request holds blocks (``reset_prefix_cache`` returns False otherwise),
  so a swap while requests run does not ask (vLLM would refuse and log "Failed to reset prefix
  cache" at every in-flight swap): the reset is made before the next batch of requests is added
  (when none runs), and one that fails there raises: new requests never reuse KV computed
  under old weights. vLLM's "RotaryEmbedding: Failed to load weights" at every swap is a
  false alarm (a layer of derived buffers only; :class:`_DerivedBufferFilter`), silenced for
  such layers alone.
- **Forced interruptions**: vLLM cannot inject tokens into a running request, so a row with
  thinking budget ``L_int`` runs in two phases: up to ``L_int`` tokens; then, if it did not
  write ``</think>``, a second request on ``prompt + generated + phrase`` with
  ``max_tokens = answer_budget`` whose ``prompt_logprobs`` give the phrase tokens' log-probs
  (``loss_mask = False``); a row that did close thinking simply continues. Finish reasons as
  in ``interrupt.py``. vLLM computes prompt log-probs from the raw logits (no temperature):
  the phrase tokens' log-probs are raw, which no loss or mismatch statistic reads (they are
  masked). A second phase after a swap recomputes its prefix under the newest weights.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from scalerl.algo.logprobs import FP32_HEAD
from scalerl.rollout.engine import OnStep
from scalerl.rollout.interrupt import interruption_points
from scalerl.rollout.sampling import _SEED_MIX
from scalerl.rollout.torch_engine import THINK_CLOSE, check_params
from scalerl.rollout.vllm_support import check_vllm, fp32_head_supported
from scalerl.types import Completion, SamplingParams

IN_PROCESS_ENV = "VLLM_ENABLE_V1_MULTIPROCESSING"
"""vLLM's switch for its engine-core process; ``"0"`` keeps the engine in the caller's process."""


def _reload_weights(worker, items):
    """Runs in the vLLM worker (via ``collective_rpc``, in this process): vLLM's own in-place
    reload (``model_runner.reload_weights``), which restores each layer to checkpoint format,
    loads it and re-runs its post-load processing (the CPU backend's GEMM packing, a quantized
    layer's repacking; a no-op for unquantized CUDA layers). ``model.load_weights`` alone
    fails on the CPU build and on packed layers (``gpu-review-2.md`` N11)."""
    _quiet_derived_buffers(worker.model_runner.get_model())
    worker.model_runner.reload_weights(weights_iterator=iter(items))
    return len(items)


LAYERWISE_LOGGER = "vllm.model_executor.model_loader.reload.layerwise"
"""The vLLM logger that says "<layer>: Failed to load weights" during a reload."""


class _DerivedBufferFilter(logging.Filter):
    """Drops vLLM's "<layer>: Failed to load weights" for the layer classes in ``names``.

    Those layers own buffers and no parameters: a rotary embedding's ``cos_sin_cache``, computed
    from the config, in no checkpoint. vLLM's reload counts buffers among the tensors a layer
    should receive, finds none arrived for it, warns, and puts the layer's own tensors back:
    exactly right, and said at every weight swap (issue 37). A layer with a parameter keeps the
    warning, which then means a real weight was not updated."""

    def __init__(self, names: set[str]) -> None:
        super().__init__()
        self.names = names

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args if isinstance(record.args, tuple) else ()
        return not (record.msg == "%s: Failed to load weights" and args and args[0] in self.names)


def _quiet_derived_buffers(model) -> None:
    """Install :class:`_DerivedBufferFilter` once for ``model``'s parameterless layer classes."""
    logger = logging.getLogger(LAYERWISE_LOGGER)
    if any(isinstance(f, _DerivedBufferFilter) for f in logger.filters):
        return
    with_params = {type(m).__name__ for m in model.modules() if any(True for _ in m.parameters(recurse=False))}
    buffers_only = {type(m).__name__ for m in model.modules() if any(True for _ in m.buffers(recurse=False))}
    logger.addFilter(_DerivedBufferFilter(buffers_only - with_params))


@dataclass
class _Row:
    """One completion being assembled across the (up to) two phases."""

    prompt: list[int]
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)
    kv_versions: list[int] = field(default_factory=list)
    mask: list[bool] = field(default_factory=list)
    reason: str = "length"
    interrupted: bool = False
    kv_floor: int = 0
    """The version at the first engine step of this row's current request: the oldest its KV
    (the prefill's, prefix-cache hits included) can be, as versions only grow."""


class VLLMEngine:
    """vLLM-backed :class:`~scalerl.rollout.engine.GenerationEngine` (see module docstring)."""

    def __init__(
        self,
        model: str,
        *,
        fp32_head: bool = FP32_HEAD,
        dtype: str = "bfloat16",
        seed: int = 0,
        version: int = 0,
        **llm_kwargs,
    ):
        try:
            vllm_version = check_vllm()
        except ValueError as err:
            raise ImportError(str(err)) from None
        import vllm

        if fp32_head and dtype != "float32":
            if not fp32_head_supported():
                raise ValueError(
                    f"VLLMEngine: vLLM {vllm_version} has no float32 head for generation models "
                    "(hf_overrides head_dtype, vllm-project/vllm#48390); use model.dtype=float32 "
                    "or model.fp32_head_generator=false"
                )
            overrides = dict(llm_kwargs.pop("hf_overrides", None) or {})
            llm_kwargs["hf_overrides"] = {**overrides, "head_dtype": "float32"}
        self._vllm = vllm
        # behaviour log-probs after temperature, as the trainer recomputes them; one engine
        # step per step() call, in this process (module doc)
        llm_kwargs.update(logprobs_mode="processed_logprobs", async_scheduling=False)
        os.environ[IN_PROCESS_ENV] = "0"
        # vLLM's CPU worker replaces torch.set_num_threads with a no-op for the whole process
        # (it binds threads in its own worker processes); this process keeps the real one
        set_threads = torch.set_num_threads
        try:
            self.llm = vllm.LLM(model=model, dtype=dtype, seed=seed, **llm_kwargs)
        finally:
            torch.set_num_threads = set_threads
        if not hasattr(self.llm.llm_engine, "model_executor"):
            raise ValueError(
                f"VLLMEngine: vLLM {vllm_version} started its engine core in another process despite "
                f"{IN_PROCESS_ENV}=0, where weight loads cannot land between engine steps and tokens would be "
                "stamped with versions that did not sample them; unset anything that forces multiprocessing "
                "(e.g. tensor_parallel_size > 1 in rollout.vllm.extra)")
        self._prefix_stale, self._phases = False, 0
        from vllm.sampling_params import RequestOutputKind

        self._delta = RequestOutputKind.DELTA
        self.tokenizer = _same_tokenizer(model, self.llm.get_tokenizer())
        self.fp32_head = fp32_head
        self._version = int(version)
        self._seed = seed
        self._calls = 0
        self._close = self.tokenizer.encode(THINK_CLOSE, add_special_tokens=False)
        self._eos = _end_ids(model, self.tokenizer)
        self._model, self._names, self._frozen = model, _weight_names(model), {}

    @property
    def version(self) -> int:
        return self._version

    def update_weights(self, state_dict: Mapping, version: int) -> None:
        """Load ``state_dict`` (checkpoint names) in place, between two engine steps.

        vLLM reloads layer by layer and processes a layer once all of its weights arrived, so a
        partial update (LoRA's merged targets: ``q_proj`` without ``k_proj`` of a fused
        ``qkv_proj``) leaves a layer half-loaded (NaN logits, measured). A partial update is
        therefore completed with the weights it leaves out, which never change (a publisher
        sends every trainable weight): read from the model directory once, only when an
        update leaves some out, so a full update costs no host copy."""
        items = {name: tensor.detach() for name, tensor in state_dict.items()}
        known = self._names or set(items)  # a directory without safetensors: taken as sent
        unknown = sorted(set(items) - known)
        if unknown:
            raise KeyError(f"update_weights: keys not in the model: {unknown[:5]}")
        if len(items) < len(known):
            items = {**self._left_out(known - set(items)), **items}
        self.llm.collective_rpc(_reload_weights, args=(list(items.items()),))
        self._version = int(version)
        # vLLM resets the prefix cache only when no request holds blocks, and says "Failed to
        # reset prefix cache" each time it cannot: an in-flight swap (requests running) leaves it
        # stale for the next phase to reset, when none runs (module doc), and never asks in vain
        running = self.llm.llm_engine.has_unfinished_requests()
        self._prefix_stale = running or not self.llm.reset_prefix_cache()

    def _left_out(self, names: set[str]) -> dict:
        """The model directory's tensors of ``names``, kept after the first read."""
        from safetensors import safe_open

        if not names <= set(self._frozen):
            for f in sorted(Path(self._model).glob("*.safetensors")):
                with safe_open(str(f), framework="pt") as handle:
                    self._frozen.update({n: handle.get_tensor(n) for n in handle.keys() if n in names})
        return {n: self._frozen[n] for n in names}

    def _fresh_prefix_cache(self) -> None:
        """Reset the prefix cache a swap could not reset, now that no request runs."""
        if self._prefix_stale and not self.llm.reset_prefix_cache():
            raise RuntimeError("VLLMEngine: vLLM refused to reset its prefix cache with no request running, so new "
                               "requests would reuse KV computed under old weights")
        self._prefix_stale = False

    def generate(
        self, prompts: Sequence[Sequence[int]], params: SamplingParams, *, on_step: OnStep | None = None
    ) -> list[Completion]:
        check_params(params)
        seed = params.seed if params.seed is not None else self._seed * _SEED_MIX + self._calls
        seed %= 1 << 62  # a generator's seed times the mix overflows torch's int64 seeds
        self._calls += 1
        rows = [_Row(prompt=list(p)) for p in prompts]
        budgets = [params.max_new_tokens] * len(rows)
        if params.interrupt_range is not None:
            points = interruption_points(seed, len(rows), *params.interrupt_range).tolist()
            budgets = [min(p, params.max_new_tokens) for p in points]
        self._run(rows, range(len(rows)), budgets, params, seed, on_step, phrase=None)
        if params.interrupt_range is not None:
            self._second_phase(rows, budgets, params, seed, on_step)
        return [self._completion(r) for r in rows]

    def _second_phase(self, rows, budgets, params, seed, on_step) -> None:
        """Rows cut at their interruption point: inject the phrase, or just continue."""
        phrase = self.tokenizer.encode(params.interruption_phrase, add_special_tokens=False)
        forced, resumed = [], []
        for i, row in enumerate(rows):
            if row.reason != "length" or len(row.tokens) >= params.max_new_tokens or len(row.tokens) < budgets[i]:
                continue
            (resumed if _contains(row.tokens, self._close) else forced).append(i)
        room = {i: params.max_new_tokens - len(rows[i].tokens) for i in resumed + forced}
        self._run(rows, resumed, [room[i] for i in resumed], params, seed + 1, on_step, phrase=None)
        budgets = [min(params.answer_budget, room[i] - len(phrase)) for i in forced]
        self._run(rows, forced, budgets, params, seed + 2, on_step, phrase=phrase)

    def _run(self, rows, indices, budgets, params, seed, on_step, phrase) -> None:
        """Decode ``rows[indices]`` (continuing their tokens), stepping the engine by hand.

        With ``phrase``, each row first gets the phrase appended as forced tokens, scored by
        the request's ``prompt_logprobs`` when its first output arrives.
        """
        engine = self.llm.llm_engine
        self._fresh_prefix_cache()
        self._phases += 1  # ids unique across phases and calls: a late output is never another's
        ids = {i: f"{self._phases}.{i}" for i in indices}
        rows_of = {rid: int(i) for i, rid in ids.items()}
        started, awaiting_phrase = set(), set()
        for i, budget in zip(indices, budgets):
            row = rows[i]
            if phrase is not None:
                row.interrupted = True
                if budget <= 0:  # the phrase itself does not fit in max_new_tokens
                    self._append_forced(row, phrase[: len(phrase) + budget], None)
                    continue
                awaiting_phrase.add(ids[i])
            request = self._vllm.SamplingParams(
                n=1,
                max_tokens=budget,
                temperature=params.temperature,
                top_p=params.top_p,
                stop=list(params.stop_strings),
                include_stop_str_in_output=True,
                logprobs=0,
                prompt_logprobs=0 if phrase is not None else None,
                seed=(seed * _SEED_MIX + i) % (1 << 63),
                # each output carries only its new tokens: O(L) client work per request, not O(L²)
                output_kind=self._delta,
            )
            engine.add_request(ids[i], {"prompt_token_ids": row.prompt + row.tokens + (phrase or [])}, request)
            started.add(ids[i])
        live, step = len(started), 0
        while live and engine.has_unfinished_requests():
            if on_step is not None:
                on_step(self, step)
            if step == 0:  # a swap in on_step(0) lands before any prefill of this phase
                for i in indices:
                    rows[i].kv_floor = self._version
            for out in engine.step():
                row = rows[rows_of[out.request_id]]
                if out.request_id in awaiting_phrase:
                    awaiting_phrase.discard(out.request_id)
                    self._append_forced(row, phrase, out.prompt_logprobs)
                live -= self._absorb(row, out)
            step += 1

    def _append_forced(self, row: _Row, phrase: list[int], prompt_logprobs) -> None:
        scored = prompt_logprobs[-len(phrase) :] if prompt_logprobs else [None] * len(phrase)
        for token, entry in zip(phrase, scored):
            row.tokens.append(token)
            row.logprobs.append(float(entry[token].logprob) if entry and token in entry else 0.0)
            row.versions.append(self._version)
            row.kv_versions.append(min(row.kv_floor, self._version))
            row.mask.append(False)

    def _absorb(self, row: _Row, out) -> int:
        """Append the tokens this step added (a DELTA output holds only those); 1 when the
        request finished."""
        sample = out.outputs[0]
        for token, entry in zip(sample.token_ids, sample.logprobs or []):
            row.tokens.append(int(token))
            row.logprobs.append(float(entry[token].logprob))
            row.versions.append(self._version)
            row.kv_versions.append(row.kv_floor)
            row.mask.append(True)
        if not out.finished:
            return 0
        ended = sample.finish_reason == "stop"
        row.reason = ("interrupted" if row.interrupted else "stop") if ended else "length"
        return 1

    def _completion(self, row: _Row) -> Completion:
        tokens = np.asarray(row.tokens, dtype=np.int64)
        text_ids = row.tokens[:-1] if row.tokens and row.tokens[-1] in self._eos else row.tokens
        return Completion(
            prompt_tokens=np.asarray(row.prompt, dtype=np.int64),
            tokens=tokens,
            logprobs=np.asarray(row.logprobs, dtype=np.float32),
            versions=np.asarray(row.versions, dtype=np.int64),
            kv_versions=np.asarray(row.kv_versions, dtype=np.int64),
            loss_mask=np.asarray(row.mask, dtype=bool),
            finish_reason=row.reason,
            text=self.tokenizer.decode(text_ids, skip_special_tokens=False),
        )


TOKENIZER_PROBE = "add 12+7 = <think> 3*4 </think> 19, x-y; ok.\n"
"""Text the learner's and vLLM's tokenizers must encode alike (digits, operators, tags)."""


def _same_tokenizer(model: str, theirs):
    """The learner's tokenizer for a local model directory (``models.load.load_tokenizer``:
    transformers 5 loads a qwen2 directory's scalerl task tokenizer as ``Qwen2Tokenizer``,
    and so does vLLM); vLLM's own where there is no directory. vLLM still decides stop
    strings with its own, so the two must encode a probe alike, or the run stops here."""
    if not (Path(model) / "config.json").is_file():
        return theirs
    from scalerl.models.load import load_tokenizer

    ours = load_tokenizer(Path(model))
    if ours.encode(TOKENIZER_PROBE, add_special_tokens=False) != theirs.encode(TOKENIZER_PROBE, add_special_tokens=False):
        raise ValueError(f"VLLMEngine: vLLM loads a different tokenizer for {model} ({type(theirs).__name__}) than the "
                         f"learner's ({type(ours).__name__}), so prompts and completions would not mean the same ids; "
                         "use rollout.engine=torch for this model (e.g. model.arch=llama for a built one)")
    return ours


def _weight_names(model: str) -> set[str]:
    """The checkpoint names of a model directory's weights (headers only, no tensor read)."""
    from safetensors import safe_open

    names: set[str] = set()
    for f in sorted(Path(model).glob("*.safetensors")):
        with safe_open(str(f), framework="pt") as handle:
            names.update(handle.keys())
    return names


def _contains(tokens: list[int], pattern: list[int]) -> bool:
    m = len(pattern)
    return m > 0 and any(tokens[i : i + m] == pattern for i in range(len(tokens) - m + 1))


def _end_ids(model: str, tokenizer) -> set[int]:
    """Every id that ends a completion: the tokenizer's EOS and all of the model's
    ``generation_config.eos_token_id`` (an instruct model's end of turn), which vLLM stops at
    too; none of them is part of the text a reward reads, as in the torch engine."""
    from transformers import GenerationConfig

    ids, found = {tokenizer.eos_token_id}, None
    if (Path(model) / "generation_config.json").is_file():  # a local directory: never the hub
        try:
            found = GenerationConfig.from_pretrained(model, local_files_only=True).eos_token_id
        except (OSError, ValueError):  # unreadable: the tokenizer's EOS alone
            found = None
    ids |= set(found) if isinstance(found, list | tuple) else {found}
    return {i for i in ids if i is not None}

