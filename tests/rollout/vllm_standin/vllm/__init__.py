"""A stand-in for vLLM's offline API, backed by a real torch model (tests only).

``VLLMEngine`` drives ``LLM.llm_engine.add_request / step / has_unfinished_requests``,
``LLM.collective_rpc`` (weight loading), ``reset_prefix_cache`` and ``get_tokenizer``. This
module implements exactly those on a Hugging Face model loaded from ``model``: every step runs
one full forward per live request (no KV cache) and samples one token from
``softmax(logits / temperature)``, returning vLLM-shaped outputs with processed log-probs.
It lets the real pipeline (spawned generators, in-flight weight loads, per-token versions) run
``rollout.engine=vllm`` on a CPU; it says nothing about real vLLM's numerics or speed.

Where it matters it behaves as vLLM 0.32 does (``gpu-review.md`` #22):

- ``VLLM_ENABLE_V1_MULTIPROCESSING`` unset or ``1`` (vLLM's default): the engine core runs
  in a thread of its own that keeps decoding ahead (``step()`` only dequeues what it already
  produced), there is no ``llm_engine.model_executor``, and ``collective_rpc`` arguments are
  round-tripped as vLLM's msgpack encoder sends them: a tensor arrives as a
  ``[dtype, shape, bytes]`` list. ``0``: the in-process engine, one step per ``step()``,
  arguments passed as live objects.
- ``reset_prefix_cache()`` returns False while any request holds blocks.
- ``prompt_logprobs`` are computed from the raw logits, without temperature.
"""

from __future__ import annotations

import os
import queue
import threading
import types
from dataclasses import dataclass

import torch

__version__ = "0.32.0"


@dataclass
class Logprob:
    logprob: float


@dataclass
class CompletionOutput:
    token_ids: list
    logprobs: list
    finish_reason: str | None


@dataclass
class RequestOutput:
    request_id: str
    outputs: list
    finished: bool
    prompt_logprobs: list | None


def SamplingParams(**kwargs):  # noqa: N802 - vLLM's name
    return types.SimpleNamespace(**kwargs)


class Engine:
    def __init__(self, llm: LLM) -> None:
        self.llm, self.requests = llm, {}

    def add_request(self, rid: str, prompt: dict, sp) -> None:
        gen = torch.Generator().manual_seed(int(sp.seed) % (1 << 62))
        self.requests[rid] = {"prompt": list(prompt["prompt_token_ids"]), "sp": sp, "out": [], "lps": [],
                              "first": True, "gen": gen}

    def has_unfinished_requests(self) -> bool:
        return bool(self.requests)

    @torch.no_grad()
    def _sample(self, r: dict) -> tuple[int, float, list | None]:
        """The next token of request ``r``, its processed log-prob, and the prompt's
        log-probs (``[None, {token: Logprob}, ...]``, as vLLM's ``prompt_logprobs``)."""
        context = r["prompt"] + r["out"]
        logits = self.llm.model(torch.tensor([context])).logits[0].float()
        logp = torch.log_softmax(logits / r["sp"].temperature, dim=-1)  # (len(context), V)
        token = int(torch.multinomial(logp[-1].exp(), 1, generator=r["gen"]))
        raw = torch.log_softmax(logits, dim=-1)  # vLLM's prompt log-probs skip the temperature
        prompt = [None] + [{t: Logprob(float(raw[j, t]))} for j, t in enumerate(r["prompt"][1:])]
        return token, float(logp[-1, token]), prompt

    def _stopped(self, r: dict, token: int) -> bool:
        tok = self.llm.tokenizer
        text = tok.decode(r["out"])
        return token == tok.eos_token_id or any(s and text.endswith(s) for s in r["sp"].stop)

    def step(self) -> list[RequestOutput]:
        """One token for every live request."""
        outputs = []
        for rid, r in list(self.requests.items()):
            token, logprob, prompt = self._sample(r)
            r["out"].append(token)
            r["lps"].append({token: Logprob(logprob)})
            reason = "stop" if self._stopped(r, token) else ("length" if len(r["out"]) >= r["sp"].max_tokens else None)
            prompt_lps = prompt if r["first"] and r["sp"].prompt_logprobs is not None else None
            r["first"] = False
            outputs.append(RequestOutput(rid, [CompletionOutput(list(r["out"]), list(r["lps"]), reason)],
                                         reason is not None, prompt_lps))
            if reason is not None:
                del self.requests[rid]
        return outputs


class CoreThreadEngine(Engine):
    """vLLM's default: the engine core decodes on its own, ahead of the client; ``step()``
    returns the next batch it already produced (``SyncMPClient.get_output``)."""

    def __init__(self, llm: LLM) -> None:
        super().__init__(llm)
        self.lock, self.outputs = threading.Lock(), queue.Queue()
        threading.Thread(target=self._busy_loop, daemon=True).start()

    def add_request(self, rid: str, prompt: dict, sp) -> None:
        with self.lock:
            super().add_request(rid, prompt, sp)

    def has_unfinished_requests(self) -> bool:
        with self.lock:
            return bool(self.requests) or not self.outputs.empty()

    def _busy_loop(self) -> None:
        while True:
            with self.lock:
                batch = Engine.step(self) if self.requests else None
            if batch:
                self.outputs.put(batch)
            else:
                threading.Event().wait(0.001)

    def step(self) -> list[RequestOutput]:
        return self.outputs.get()


def _msgpack_round_trip(value):
    """What vLLM's untyped msgpack decoder hands the engine core: tensors as lists."""
    if torch.is_tensor(value):
        return [str(value.dtype).removeprefix("torch."), list(value.shape), value.numpy().tobytes()]
    if isinstance(value, (list, tuple)):
        return [_msgpack_round_trip(v) for v in value]
    if isinstance(value, dict):
        return {k: _msgpack_round_trip(v) for k, v in value.items()}
    return value


class LLM:
    def __init__(self, model: str, dtype: str = "float32", seed: int = 0, **kwargs) -> None:
        from scalerl.models import load_pretrained

        self.kwargs = kwargs
        self.model, self.tokenizer = load_pretrained(model, dtype)
        self.model.eval()
        self.multiprocessing = os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING", "1") != "0"
        runner = types.SimpleNamespace(model=types.SimpleNamespace(load_weights=self._load_weights))
        self.worker = types.SimpleNamespace(model_runner=runner)
        if self.multiprocessing:
            self.llm_engine = CoreThreadEngine(self)
        else:
            self.llm_engine = Engine(self)
            self.llm_engine.model_executor = types.SimpleNamespace(driver_worker=self.worker)
        self.loads = 0

    def _load_weights(self, weights) -> None:
        params = dict(self.model.named_parameters())
        with torch.no_grad():
            for name, tensor in weights:
                params[name].copy_(tensor)
        self.loads += 1

    def get_tokenizer(self):
        return self.tokenizer

    def collective_rpc(self, fn, args=()):
        if self.multiprocessing:
            args = tuple(_msgpack_round_trip(a) for a in args)
        return [fn(self.worker, *args)]

    def reset_prefix_cache(self) -> bool:
        """vLLM resets only while no request holds KV blocks."""
        return not self.llm_engine.requests
