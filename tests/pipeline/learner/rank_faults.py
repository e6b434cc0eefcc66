"""Test-only: ``scalerl train`` with a fault injected into every learner rank.

    python rank_faults.py stall:RANK:BUCKET@VERSION -- train ARGS...
    python rank_faults.py kill:RANK:PHASE@VERSION -- train ARGS...

The fault reaches the ranks the way production code offers it, through
``RankSpec.faults`` (a picklable callable each rank calls at a step and at every bucket of a
sync); this driver only puts it into the spec the run builds, then runs the real CLI. The
ranks are spawned processes (or Ray actors) that unpickle the fault from this module, which
they import by name (this folder is on their ``sys.path``).
"""

from __future__ import annotations

import dataclasses
import os
import signal
import sys
import time


@dataclasses.dataclass(frozen=True)
class Stall:
    """Rank ``rank`` hangs before gathering bucket ``bucket`` (1-based) of ``version``'s sync."""

    rank: int
    bucket: int
    version: int

    def __call__(self, rank: int, phase: str, version: int, bucket: int) -> None:
        if (rank, phase, version, bucket) == (self.rank, "publish", self.version, self.bucket):
            time.sleep(86400)


@dataclasses.dataclass(frozen=True)
class Kill:
    """Rank ``rank`` SIGKILLs itself as it starts ``version``'s step, or its sync before the
    second bucket."""

    rank: int
    phase: str
    version: int

    def __call__(self, rank: int, phase: str, version: int, bucket: int) -> None:
        at = 0 if self.phase == "step" else 2
        if (rank, phase, version, bucket) == (self.rank, self.phase, self.version, at):
            os.kill(os.getpid(), signal.SIGKILL)


def parse(text: str):
    """``stall:1:2@3`` -> ``Stall(1, 2, 3)``; ``kill:1:publish@2`` -> ``Kill(1, "publish", 2)``."""
    kind, rank, rest = text.split(":", 2)
    what, version = rest.split("@")
    return Stall(int(rank), int(what), int(version)) if kind == "stall" else Kill(int(rank), what, int(version))


def main() -> int:
    from rank_faults import parse as parse_here  # the ranks unpickle rank_faults.*, not __main__.*

    from scalerl.cli import main as cli
    from scalerl.pipeline.learner import group as learner_group

    fault = parse_here(sys.argv[1])
    built = learner_group.ShardedLearner.__init__

    def with_fault(self, spec, *args, **kwargs):
        built(self, dataclasses.replace(spec, faults=fault), *args, **kwargs)

    learner_group.ShardedLearner.__init__ = with_fault
    return cli(sys.argv[sys.argv.index("--") + 1:])


if __name__ == "__main__":
    sys.exit(main())
