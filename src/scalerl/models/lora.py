"""LoRA through ``peft``: the learner trains adapters only; generators sample with them.

``W' = W0 + (alpha / rank) · B A`` on each targeted projection (Hu et al., 2021), with
``A (rank, in)`` and ``B (out, rank)`` trained and ``W0`` frozen. ``W0`` is stored
``(out, in)`` by ``nn.Linear`` and ``(in, out)`` by transformers' ``Conv1D`` (GPT-2 and its
kin), where the update is ``(B A)ᵀ``: peft's ``fan_in_fan_out``.

- **Targets.** ``model.lora.targets`` names layers by their last name part (``q_proj``,
  ``c_attn``), as peft's ``target_modules`` takes them; ``auto`` (None here) is every linear or
  ``Conv1D`` projection inside the decoder blocks (:func:`linear_layers`), so any decoder
  works without knowing its naming. :func:`resolve_targets` turns a spec into the explicit
  one every role uses: its targets and which of them are ``fan_in_fan_out``.
- **Learner.** :func:`apply_lora` wraps the model with ``peft.get_peft_model``; only the
  adapter parameters require grad, so only they reach AdamW and the checkpoint's optimiser
  state. The LM head is never a target: the FP32 head (digest §2.4) reads the frozen head
  weight as before.
- **Publishing.** Only the adapters travel (:func:`published_parameters`): rank r on a
  d×d layer is 2·r·d numbers instead of d², so a version costs a small fraction of the
  full weights' bytes.
- **Generators** hold the plain base model and :class:`AdapterMerger` turns each published
  adapter into the merged weights of the targeted layers, in the checkpoint's own layout
  (``Conv1D``'s ``(in, out)`` too, which vLLM's loaders expect as well), loaded in place as a
  partial update: the engine's fast decode path, KV cache and in-flight swap stay exactly as
  they are, and a generator can never sample with the base model by mistake (a trap of
  peers' LoRA paths: verl#7495, ms-swift#9856), since the merge is the only way weights arrive.
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

import torch

_A, _B = ".lora_A.default.weight", ".lora_B.default.weight"
PEFT_PREFIX = "base_model.model."


@dataclass(frozen=True)
class LoraSpec:
    """``model.lora`` as plain data (picklable into generator processes)."""

    rank: int
    alpha: float
    dropout: float
    targets: tuple[str, ...] | None = None
    """Last name parts of the layers that get adapters; None: every projection inside the
    decoder blocks (``config_model.LoraConfig`` holds the default)."""
    fan_in_fan_out: tuple[str, ...] = ()
    """The targets whose weights are stored ``(in, out)`` (transformers' ``Conv1D``): peft's
    ``fan_in_fan_out``. Filled in by :func:`resolve_targets`."""

    @property
    def scale(self) -> float:
        return self.alpha / self.rank


@dataclass(frozen=True)
class Projection:
    """One name of :func:`linear_layers`: the smallest sizes among the layers of that name,
    and whether their weights are stored ``(in, out)``."""

    fan_in: int
    fan_out: int
    transposed: bool


def _decoder_blocks(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The decoder blocks: the modules of the classes transformers keeps whole when it splits
    a model across devices (``_no_split_modules``: ``GPT2Block``, ``LlamaDecoderLayer``...);
    the whole model when it names none."""
    names = set(getattr(model, "_no_split_modules", None) or ())
    blocks = [m for m in model.modules() if type(m).__name__ in names]
    return blocks or [model]


def linear_layers(model: torch.nn.Module) -> dict[str, Projection]:
    """``{name: Projection}`` of the layers LoRA may target, in the model's order: every
    ``nn.Linear`` or transformers ``Conv1D`` inside its decoder blocks, by the last part of its
    module name (``q_proj``, ``c_attn``). The LM head and the embeddings are never among them
    (the head stays frozen: the FP32 head reads it)."""
    from transformers.pytorch_utils import Conv1D

    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    out: dict[str, Projection] = {}
    for block in _decoder_blocks(model):
        for name, module in block.named_modules():
            if not isinstance(module, torch.nn.Linear | Conv1D) or module is head or not name:
                continue
            conv = isinstance(module, Conv1D)
            i, o = module.weight.shape if conv else module.weight.shape[::-1]
            leaf = name.rsplit(".", 1)[-1]
            seen = out.get(leaf, Projection(i, o, conv))
            out[leaf] = Projection(min(i, seen.fan_in), min(o, seen.fan_out), seen.transposed)
    return out


def resolve_targets(model: torch.nn.Module, spec: LoraSpec, where: str) -> LoraSpec:
    """``spec`` with its targets found (None: every name of :func:`linear_layers`) and its
    ``fan_in_fan_out`` ones marked; ``ValueError`` (one sentence naming ``where``, the model)
    unless every target is such a layer, there is at least one, and ``spec.rank`` is at most
    the smallest size of a targeted layer."""
    layers = linear_layers(model)
    known = f"its linear layers are {', '.join(layers) or 'none'}"
    targets = tuple(layers) if spec.targets is None else spec.targets
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    head_name = next((n.rsplit(".", 1)[-1] for n, m in model.named_modules() if head is not None and m is head), None)
    if not targets:
        found = " (auto found none inside its decoder blocks)" if spec.targets is None else ""
        raise ValueError(f"model.lora.targets is empty{found}: name the linear layers of {where} to adapt ({known})")
    if head_name in targets:
        raise ValueError(f"model.lora.targets names {head_name}, the LM head of {where}, which stays frozen "
                         f"(the FP32 head reads it); {known}")
    unknown = [t for t in targets if t not in layers]
    if unknown:
        names = ", ".join(repr(t) for t in unknown)
        what = "which is no linear layer" if len(unknown) == 1 else "which are no linear layers"
        raise ValueError(f"model.lora.targets names {names}, {what} of {where}; {known} "
                         "(or leave model.lora.targets out: auto adapts them all)")
    smallest, layer = min((min(layers[t].fan_in, layers[t].fan_out), t) for t in targets)
    if spec.rank > smallest:
        raise ValueError(f"model.lora.rank {spec.rank} is more than {smallest}, the smaller size of the targeted "
                         f"layer {layer} ({layers[layer].fan_in} in, {layers[layer].fan_out} out) of {where}, so its "
                         f"adapter would hold more numbers than the layer; use a rank of at most {smallest}")
    return replace(spec, targets=targets, fan_in_fan_out=tuple(t for t in targets if layers[t].transposed))


def resolve_targets_of(model_dir: str | Path, spec: LoraSpec) -> LoraSpec:
    """:func:`resolve_targets` on a copy of ``model_dir``'s model without weights (the meta
    device): what the learner resolves on the real one, for the roles that never build it."""
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(model_dir, local_files_only=True)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    return resolve_targets(model, spec, f"the model in {model_dir}")


def apply_lora(model: torch.nn.Module, spec: LoraSpec) -> torch.nn.Module:
    """``model`` wrapped by peft with fresh adapters (``B = 0``, so it starts as the base) on
    the targets :func:`resolve_targets` finds; its ``nn.Linear`` layers are
    :func:`fused_lora_linear`'s (peft's own, with a fused forward), its ``Conv1D`` ones peft's
    ``fan_in_fan_out`` layers. Targets or a rank the model cannot take are ``ValueError``."""
    from peft import LoraConfig, get_peft_model

    spec = resolve_targets(model, spec, "the model")
    config = LoraConfig(r=spec.rank, lora_alpha=spec.alpha, lora_dropout=spec.dropout,
                        target_modules=list(spec.targets), bias="none", task_type="CAUSAL_LM",
                        fan_in_fan_out=bool(spec.fan_in_fan_out))  # peft would warn and set it itself
    config._register_custom_module({torch.nn.Linear: fused_lora_linear()})
    return get_peft_model(model, config)


@functools.cache
def fused_lora_linear() -> type:
    """peft's LoRA ``Linear`` whose plain case runs ``y = W0 x + s·B (A x)`` as one ``addmm``.

    peft computes ``result + lora_B(lora_A(x)) * scaling``: a product, a scaled copy and a sum,
    each a full pass over the (tokens, out) output, forward and backward. On a CPU those
    memory-bound passes cost more than the weight gradients LoRA saves (measured on the
    ``base`` preset: peft's layer made a LoRA step slower than full fine-tuning). ``addmm``
    writes ``result + s·h Bᵀ`` in one pass. Dropout, several adapters, merged weights or any
    LoRA variant take peft's own path; tests check both agree, outputs and gradients."""
    from peft.tuners.lora.layer import Linear

    class FusedLoraLinear(Linear):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            # it wraps nn.Linear only, stored (out, in): a Conv1D target elsewhere in the model
            # turns the shared config's fan_in_fan_out on, which peft's own dispatch undoes
            self.fan_in_fan_out = False

        def forward(self, x: torch.Tensor, *args, **kwargs) -> torch.Tensor:
            names = self.active_adapters
            if (self.disable_adapters or self.merged or args or kwargs or len(names) != 1
                    or names[0] not in self.lora_A or names[0] in self.lora_variant
                    or not isinstance(self.lora_dropout[names[0]], torch.nn.Identity)):
                return super().forward(x, *args, **kwargs)
            name = names[0]
            result = self.base_layer(x)  # (..., out)
            a, b = self.lora_A[name].weight, self.lora_B[name].weight  # (r, in), (out, r)
            h = torch.nn.functional.linear(x.to(a.dtype), a)  # (..., r)
            out = torch.addmm(result.reshape(-1, result.shape[-1]).to(b.dtype), h.reshape(-1, h.shape[-1]), b.t(),
                              alpha=self.scaling[name])
            return out.view(result.shape).to(result.dtype)

    return FusedLoraLinear


def is_lora(model: torch.nn.Module) -> bool:
    return hasattr(model, "peft_config")


def published_parameters(model: torch.nn.Module) -> list[tuple[str, torch.nn.Parameter]]:
    """What a weight sync sends: every parameter, or with LoRA the adapters alone."""
    params = list(model.named_parameters())
    return [(n, p) for n, p in params if p.requires_grad] if is_lora(model) else params


def _layer(name: str) -> str | None:
    """``base_model.model.X.lora_A.default.weight`` -> ``X`` (the adapted linear layer)."""
    for suffix in (_A, _B):
        if name.endswith(suffix):
            return name[: -len(suffix)].removeprefix(PEFT_PREFIX)
    return None


def merged_weights(adapters: Mapping[str, torch.Tensor], base: Mapping[str, torch.Tensor], scale: float,
                   dtype: torch.dtype | None = None, fan_in_fan_out: Collection[str] = ()) -> dict[str, torch.Tensor]:
    """``{X.weight: W0 + scale · B A}`` for every layer ``X`` the adapters name, and
    ``W0 + scale · (B A)ᵀ`` where ``X``'s last name part is in ``fan_in_fan_out`` (peft's
    ``get_delta_weight``).

    ``A (rank, in)``, ``B (out, rank)``; ``base[X.weight]`` is ``W0``: ``(out, in)``, or
    ``(in, out)`` for a ``fan_in_fan_out`` layer (transformers' ``Conv1D``), and may be named
    without the model's leading prefix (:func:`_base_weight`). The sum is computed in float32
    and cast to ``dtype`` (default ``W0``'s)."""
    out = {}
    for name, a in adapters.items():
        if not name.endswith(_A):
            continue
        layer = _layer(name)
        delta = adapters[name[: -len(_A)] + _B].float() @ a.float()  # (out, in)
        if layer.rsplit(".", 1)[-1] in fan_in_fan_out:
            delta = delta.T  # (in, out), as the layer stores W0
        w0 = _base_weight(base, layer)
        out[f"{layer}.weight"] = (w0.float() + scale * delta).to(dtype or w0.dtype)
    return out


def _base_weight(base: Mapping[str, torch.Tensor], layer: str) -> torch.Tensor:
    """``W0`` of the model's ``layer``: ``base[layer.weight]``, or the name a checkpoint saved
    without the model's leading prefix gives it (GPT-2's own files store ``h.0.attn.c_attn``
    for ``transformer.h.0.attn.c_attn``, which transformers adds back when it loads them)."""
    parts = f"{layer}.weight".split(".")
    for i in range(len(parts) - 1):
        if (key := ".".join(parts[i:])) in base:
            return base[key]
    raise KeyError(f"{layer}.weight is not among the base weights of the targeted layers")


def _targeted(name: str, targets: set[str]) -> bool:
    return name.endswith(".weight") and name[: -len(".weight")].rsplit(".", 1)[-1] in targets


def base_weights(model_dir: str | Path, targets: tuple[str, ...],
                 dtype: torch.dtype = torch.float32) -> dict[str, torch.Tensor]:
    """The starting weights of the targeted layers, read from ``model_dir``'s safetensors
    (whatever engine the generator runs: the torch engine's module or vLLM's fused one), in
    the engine's ``dtype``: a checkpoint stored in bf16 must not round every merge to bf16
    when the engine runs float32 (an update of 1e-5 on a weight of 0.02 would mostly vanish),
    and a bf16 engine keeps its copy of them at half the memory."""
    from safetensors import safe_open

    wanted, out = set(targets), {}
    for file in sorted(Path(model_dir).glob("*.safetensors")):
        with safe_open(str(file), framework="pt") as f:
            out |= {k: f.get_tensor(k).to(dtype) for k in f.keys() if _targeted(k, wanted)}
    if not out:
        raise ValueError(f"model.lora.targets {sorted(wanted)} name no linear layer of {model_dir}")
    return out


class AdapterMerger:
    """A generator's view of published adapters: merged weights for its plain base model.

    ``base`` holds ``W0`` of every targeted layer, kept aside: every version merges from
    ``W0``, never on top of the previous merge, and is cast to the engine's ``dtype``.
    ``spec`` is resolved (:func:`resolve_targets`): its ``fan_in_fan_out`` layers are merged
    transposed, in the layout the checkpoint stores them."""

    def __init__(self, base: Mapping[str, torch.Tensor], spec: LoraSpec, dtype: torch.dtype = torch.float32) -> None:
        self.base, self.scale, self.dtype = dict(base), spec.scale, dtype
        self.fan_in_fan_out = frozenset(spec.fan_in_fan_out)

    def __call__(self, adapters: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return merged_weights(adapters, self.base, self.scale, self.dtype, self.fan_in_fan_out)
