"""Token-id suffix matching: stop strings and ``</think>`` detected without decoding.

Decoding every row's tail at every step costs Python work per row per step. Instead each
watched string is tokenized once, and every step compares the last ``m`` generated token ids
of all rows against each ``m``-token pattern in one tensor op. A string the model spells
with a *different* tokenization than ``tokenizer.encode`` gives is not detected; for the
word/char tokenizers of the built-in tasks the encoding is unique.
"""

from __future__ import annotations

import torch


def encode_strings(tokenizer, strings) -> list[list[int]]:
    """Token ids of each string (no special tokens added); empty strings are dropped."""
    out = []
    for text in strings:
        ids = tokenizer.encode(text, add_special_tokens=False)
        if ids:
            out.append(list(ids))
    return out


class SuffixMatcher:
    """Flags rows whose generated tokens end with any of the given token-id sequences."""

    def __init__(self, sequences: list[list[int]], num_rows: int, device: torch.device | str):
        self.patterns = [torch.tensor(s, dtype=torch.long, device=device) for s in sequences]
        self.width = max((len(s) for s in sequences), default=0)
        # -1 never equals a token id, so patterns cannot match into the prompt.
        self.tail = torch.full((num_rows, max(self.width, 1)), -1, dtype=torch.long, device=device)

    def push(self, tokens: torch.Tensor) -> torch.Tensor:  # (B,) int64 -> (B,) bool
        """Append one token per row; return which rows now end with a pattern."""
        if not self.patterns:
            return torch.zeros_like(tokens, dtype=torch.bool)
        if self.width > 1:
            self.tail = torch.cat([self.tail[:, 1:], tokens.unsqueeze(1)], dim=1)
        else:
            self.tail = tokens.unsqueeze(1)
        hit = torch.zeros_like(tokens, dtype=torch.bool)
        for pattern in self.patterns:
            hit |= (self.tail[:, self.width - len(pattern) :] == pattern).all(-1)
        return hit

    def select(self, rows: torch.Tensor) -> None:  # (B',) int64 indices of the rows kept
        self.tail = self.tail[rows]
