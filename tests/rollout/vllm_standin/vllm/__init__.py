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

__version__ = "0.11.0"


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


class _Engine:
    def __init__(self, llm: LLM) -> None:
        self.llm, self.requests = llm, {}

    def add_request(self, rid: str, prompt: dict, sp) -> None:
        gen = torch.Generator().manual_seed(int(sp.seed) % (1 << 62))
        self.requests[rid] = {"prompt": list(prompt["prompt_token_ids"]), "sp": sp, "out": [], "lps": [],
                              "first": True, "gen": gen}

    def has_unfinished_requests(self) -> bool:
        return bool(self.requests)

    @torch.no_grad()
    def _log_probs(self, ids: list[int], temperature: float) -> torch.Tensor:  # (len(ids), V)
        logits = self.llm.model(torch.tensor([ids])).logits[0].float()
        return torch.log_softmax(logits / temperature, dim=-1)

    def step(self) -> list[RequestOutput]:
        outputs = []
        tok = self.llm.tokenizer
        for rid, r in list(self.requests.items()):
            sp, context = r["sp"], r["prompt"] + r["out"]
            logp = self._log_probs(context, sp.temperature)
            token = int(torch.multinomial(logp[-1].exp(), 1, generator=r["gen"]))
            r["out"].append(token)
            r["lps"].append({token: Logprob(float(logp[-1, token]))})
            text = tok.decode(r["out"])
            stopped = token == tok.eos_token_id or any(s and text.endswith(s) for s in sp.stop)
            reason = "stop" if stopped else ("length" if len(r["out"]) >= sp.max_tokens else None)
            prompt_lps = None
            if r["first"] and sp.prompt_logprobs is not None:
                prompt_lps = [None] + [{t: Logprob(float(logp[j, t]))} for j, t in enumerate(r["prompt"][1:])]
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
        self.llm_engine = _Engine(self)
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
