"""Trainer-side cost of reading one completion's results, side by side in one run (issue 18).

The results a sandboxed program sends back are read in the trainer, outside every sandbox
limit, so their cost must be bounded by the reader, not by the program. Probe F20 sent a
1 MB line holding a set of 43,869 integers ``k·(2^61 − 1)`` that all hash to 0: the old
reader (``ast.literal_eval`` of the program's text, building a Python set) spent 13–14 s of
CPU on it. Rows, each read and compared with ``assert uniq([1, 3]) == {1, 3}``:

- ``literal_eval``: the old way, on the same elements written as a Python set literal;
- ``decode_results``: today's tagged-JSON grammar (``scalerl.data.results``), compared
  through sorted canonical keys, never hashed;
- the same two on a benign line of the same size (distinct small integers).

CPU seconds of this process, the median of ``--repeats`` (the old colliding row runs once:
it is the slow one). Usage: python bench/grader.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import ast
import time

from _workload import median_seconds, parallel_scaling  # bench/ is on the path when run as a script

from scalerl.data.asserts import parse_assert
from scalerl.data.results import decode_results

N = 43_869


def cpu(fn, repeats: int) -> float:
    return median_seconds(fn, repeats, clock=time.process_time)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    print(f"machine parallel scaling at the start (2 single-thread processes vs 1): {parallel_scaling():.2f}x")
    check = parse_assert("assert uniq([1, 3]) == {1, 3}")
    rows = {}
    for name, elements in (("colliding", [k * (2**61 - 1) for k in range(1, N + 1)]),
                           ("benign", list(range(10**9, 10**9 + N)))):
        literal = "{" + ",".join(map(str, elements)) + "}"
        wire = ("0\t[\"s\"," + ",".join(map(str, elements)) + "]\n").encode()
        old_repeats = 1 if name == "colliding" else args.repeats
        rows[name] = (len(wire),
                      cpu(lambda lit=literal: check.passes(ast.literal_eval(lit)), old_repeats),
                      cpu(lambda w=wire: check.passes(decode_results(w, 1, max_bytes=2 << 20)[0][0][1]),
                          args.repeats))
    print(f"\nreading one completion's results of {N:,} set elements, CPU seconds:")
    print(f"  {'line':10s} {'bytes':>9s} {'literal_eval (old)':>19s} {'decode_results':>15s} {'old/new':>8s}")
    for name, (size, old, new) in rows.items():
        print(f"  {name:10s} {size:9,d} {old:19.3f} {new:15.3f} {old / new:7.0f}x")
    print(f"machine parallel scaling at the end: {parallel_scaling():.2f}x")


if __name__ == "__main__":
    main()
