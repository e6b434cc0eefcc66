"""bench/multi_turn.py runs both arms on the same generated length; nothing is timed against a bound."""

from __future__ import annotations

import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "bench"


def test_both_arms_generate_the_same_tokens_and_only_multi_turn_prefills_observations(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))
    import multi_turn

    result = multi_turn.run(episodes=2, new_tokens=6, repeats=1, preset="nano", threads=1)
    sys.modules.pop("multi_turn", None)
    assert result["single"]["gen_tokens"] == result["multi"]["gen_tokens"] == 2 * 6
    assert result["single"]["env_tokens"] == 0 and result["multi"]["env_tokens"] > 0
    assert result["ratio"] > 0 and result["multi"]["completions_per_s"] > 0
