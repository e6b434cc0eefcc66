"""`make install-gpu`'s last step: is the .venv's torch a CUDA build?

A CPU build (``torch.version.cuda`` is None) satisfies every ``torch==2.13.0`` pin, the lock's
and vLLM's alike, because PEP 440 ignores the ``+cpu`` label; pip would keep it over an existing
``.venv`` and vLLM would then run beside a torch that cannot reach the GPU. One sentence and
exit 1 if so; a GPU is not needed to tell.
"""

from __future__ import annotations

import sys


def problem() -> str | None:
    """The sentence that fails the install, or None when torch is a CUDA build."""
    try:
        import torch
    except ImportError as error:
        return f"install-gpu: torch does not import ({error}), so the GPU path cannot run; rerun make install-gpu."
    if torch.version.cuda is None:
        return (f"install-gpu: torch {torch.__version__} is a CPU build (torch.version.cuda is None), so vLLM "
                f"and the learner cannot use the GPU; pip kept or picked a CPU wheel (an earlier make install, "
                f"or pip's find-links), so remove .venv and rerun make install-gpu.")
    return None


def main() -> int:
    sentence = problem()
    if sentence:
        print(sentence, file=sys.stderr)
        return 1
    import torch

    print(f"install-gpu: torch {torch.__version__}, CUDA {torch.version.cuda}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
