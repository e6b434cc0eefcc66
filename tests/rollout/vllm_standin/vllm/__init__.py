"""A stand-in for vLLM's offline API, backed by a real torch model (tests only).

``VLLMEngine`` drives ``LLM.llm_engine.add_request / step / has_unfinished_requests``,
``LLM.collective_rpc`` (weight loading), ``reset_prefix_cache`` and ``get_tokenizer``. This
module implements exactly those on a Hugging Face model loaded from ``model``: every step runs
one full forward per live request (no KV cache) and samples one token from
``softmax(logits / temperature)``, returning vLLM-shaped outputs with processed log-probs.
It lets the real pipeline (spawned generators, in-flight weight loads, per-token versions) run
``rollout.engine=vllm`` on a CPU; it says nothing about real vLLM's numerics or speed.
"""

from __future__ import annotations

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
        prompt = [None] + [{t: Logprob(float(logp[j, t]))} for j, t in enumerate(r["prompt"][1:])]
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


class LLM:
    def __init__(self, model: str, dtype: str = "float32", seed: int = 0, **kwargs) -> None:
        from scalerl.models import load_pretrained

        self.kwargs = kwargs
        self.model, self.tokenizer = load_pretrained(model, dtype)
        self.model.eval()
        self.llm_engine = Engine(self)
        runner = types.SimpleNamespace(model=types.SimpleNamespace(load_weights=self._load_weights))
        self.worker = types.SimpleNamespace(model_runner=runner)
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
        return [fn(self.worker, *args)]

    def reset_prefix_cache(self) -> bool:
        return True
