"""Tiny Llama models and a word-level tokenizer, small enough for CPU tests in milliseconds."""

from __future__ import annotations

import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import (
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen2ForCausalLM,
)

from scalerl.types import INTERRUPTION_PHRASE

SPECIALS = ["<pad>", "<eos>", "<think>", "</think>"]
PHRASE_WORDS = INTERRUPTION_PHRASE.split()


def make_tokenizer(vocab_size: int = 64) -> PreTrainedTokenizerFast:
    """Whitespace-split word-level tokenizer: specials, the interruption phrase's words, then
    filler words ``w0, w1, ...`` up to ``vocab_size``."""
    words = list(SPECIALS) + [w for w in dict.fromkeys(PHRASE_WORDS) if w not in SPECIALS]
    words += [f"w{i}" for i in range(vocab_size - len(words))]
    core = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<pad>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", eos_token="<eos>")


def make_model(
    vocab_size: int = 64, *, tied: bool = True, seed: int = 0, dtype=torch.float32, arch: str = "llama"
):
    """A 2-layer, hidden-32 causal LM with grouped-query attention (4 heads, 2 kv heads)."""
    torch.manual_seed(seed)
    config_cls, model_cls = (LlamaConfig, LlamaForCausalLM) if arch == "llama" else (Qwen2Config, Qwen2ForCausalLM)
    config = config_cls(
        vocab_size=vocab_size,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        tie_word_embeddings=tied,
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=None,
    )
    model = model_cls(config).to(dtype).eval()
    # The default init (std 0.02) gives near-uniform next-token distributions; widen it so
    # sampled sequences actually depend on the weights.
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0.0, 0.3)
    return model




def recompute_logprobs(model, completion, *, temperature: float = 1.0, fp32_head: bool = True):
    """The trainer's view: one forward over prompt + completion, no cache -> (T,) log-probs."""
    from scalerl.algo.logprobs import token_logprobs
    from scalerl.models.forward import forward_logits

    prompt = torch.as_tensor(completion.prompt_tokens)
    tokens = torch.as_tensor(completion.tokens)
    ids = torch.cat([prompt, tokens]).unsqueeze(0)
    with torch.no_grad():
        logits, _ = forward_logits(model, ids, fp32_head=fp32_head)
    scored = logits[:, len(prompt) - 1 : -1]  # position i predicts token i + 1
    return token_logprobs(scored, tokens.unsqueeze(0), temperature=temperature)[0]


def with_head_bias(model, bias: dict[int, float]):
    """Give the (untied) LM head a bias vector, e.g. to forbid or force a token."""
    head = model.get_output_embeddings()
    vector = torch.zeros(head.weight.shape[0])
    for token, value in bias.items():
        vector[token] = value
    head.bias = torch.nn.Parameter(vector.to(head.weight.dtype))
    return model
