"""The unbiased pass@k estimator against brute-force enumeration of every k-subset."""

from __future__ import annotations

from itertools import combinations

import pytest

from scalerl.rollout.validate import pass_at_k


def brute_force(n: int, c: int, k: int) -> float:
    """Share of the k-subsets of n samples (the first c correct) that hold a correct one."""
    subsets = list(combinations(range(n), k))
    return sum(any(i < c for i in s) for s in subsets) / len(subsets)


@pytest.mark.parametrize("n", range(1, 8))
def test_pass_at_k_matches_enumeration(n):
    for c in range(n + 1):
        for k in range(1, n + 1):
            assert pass_at_k([n], [c], k)[0] == pytest.approx(brute_force(n, c, k), abs=1e-12), (n, c, k)


def test_pass_at_k_needs_k_samples():
    with pytest.raises(ValueError, match="pass@4 needs at least 4 samples per prompt, got 3"):
        pass_at_k([3], [1], 4)
