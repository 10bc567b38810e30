"""This project's layers as a provider for Hugging Face's ``kernels`` library, so transformers'
own switch runs them: ``from_pretrained(..., use_kernels=True)``, ``model.kernelize(...)``,
``kernels.kernelize(model, mode=...)``, and whatever calls those (TRL's
``model_init_kwargs={"use_kernels": True}``).

    from liger_core.transformers import register_kernels_hub
    register_kernels_hub()                      # once, before the model is built or kernelized
    model = AutoModelForCausalLM.from_pretrained(path, use_kernels=True)

How it reaches the layers. ``kernels`` swaps the ``forward`` of every module whose class carries a
layer name (transformers' ``@use_kernel_forward_from_hub("RMSNorm")``, ``"rotary_pos_emb"`` on
``apply_rotary_pos_emb``) for the ``forward`` of the layer class a *repository* object's ``load()``
returns; a repository here is an in-process object (`LigerRepository`), so nothing is downloaded.

- ``RMSNorm``: every decorated norm class; the arithmetic (offset, casting mode, in-place gradient)
  is the one `liger_core.transformers.FAMILIES` records for that class; a class it does not know
  runs its stock forward and warns once (`LigerStockFallbackWarning`).
- ``rotary_pos_emb``: the decorated ``apply_rotary_pos_emb`` functions whose RoPE kind the family
  table records (full, partial, half-table, interleaved, paired tables); others run stock.
- ``SwiGLUMLP`` / ``GeGLUMLP`` (the names transformers' own mapping uses for Liger's MLPs): no
  transformers class carries them, so registering marks each family's gate/up/down MLP class
  (``kernels.replace_kernel_forward_from_hub``, which ``kernels`` documents for third-party layers)
  with a condition: the module's activation is the one the op computes and its device is one
  registered here (so a device this provider does not serve never reaches a hub repository through
  the mark).
- The causal-LM loss: transformers' mapping names ``ForCausalLMLoss``, but nothing in transformers
  5.x carries that name (``kernelize`` never meets it), so no layer is registered for it; use
  `apply_liger_kernel_to_instance` for the fused linear cross-entropy.

Modes: each layer is registered for ``Mode.TRAINING`` and ``Mode.TRAINING | Mode.TORCH_COMPILE``
(every op is a ``torch.library`` custom op under Dynamo, see `liger_core.compile`); ``inference=True``
adds the inference modes (otherwise inference resolves to what else is registered, and to these
layers where nothing is).

transformers re-registers its default mapping on every ``use_kernels=True`` (and on each
``train()``/``eval()`` switch of a kernelized model), which replaces, device by device, what was
registered before; so this also writes the layers into that default mapping
(``transformers.integrations.hub_kernels.get_kernel_mapping_transformers()``), for the device
types and modes registered here only.

One process-wide effect comes from transformers' design, not this module: the decorated
``apply_rotary_pos_emb`` is one module instance shared by every attention layer of every model of
that family, so kernelizing one model swaps the RoPE of all of them (a model built stock afterwards
included).

Device types: by default those the installed vendor backends serve (``liger info``: cuda, npu,
xpu). ``device_types=("cpu",)`` is for running a vendor's kernels on CPU tensors in the Triton
interpreter (``LIGER_BACKEND=<vendor> TRITON_INTERPRET=1``), as CI does: ``kernelize`` picks the
mapping by the model's parameters' device type, which is then ``cpu``.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from dataclasses import dataclass

import torch
from torch import nn

from liger_core import functional as F
from liger_core import registry
from liger_core.transformers import layers
from liger_core.transformers.monkey_patch import FAMILIES, Family, Norm, _canonical

# kernels 0.17's device types (kernels.layer.kernelize._validate_device_type).
KERNELS_DEVICE_TYPES = ("cpu", "cuda", "mps", "neuron", "npu", "rocm", "tpu", "xpu")
# The RoPE kinds whose function has transformers' (q, k, cos, sin, unsqueeze_dim=1) signature.
_ROPE_KINDS = ("full", "partial", "half_table", "interleaved", "paired_tables")
# The op each name runs (the op whose backend decides which devices are served).
LAYER_OPS = {"RMSNorm": "rms_norm", "rotary_pos_emb": "rope", "SwiGLUMLP": "swiglu", "GeGLUMLP": "geglu"}
_MLP_NAMES = {"swiglu": "SwiGLUMLP", "geglu": "GeGLUMLP"}

# Families by modeling module, to find a decorated class's or function's family without importing anything.
_BY_MODULE: dict[str, list[Family]] = {}
for _fam in FAMILIES.values():
    _BY_MODULE.setdefault(_fam.modeling, []).append(_fam)

# Device types registered so far (the MLP marks' condition reads it).
_REGISTERED_DEVICES: set[str] = set()
_NORMS: dict[type, Norm | None] = {}


def _norm_of(cls: type) -> Norm | None:
    """The arithmetic the family table records for the RMSNorm class ``cls`` (None: not known)."""
    try:
        return _NORMS[cls]
    except KeyError:
        pass
    found = None
    for fam in _BY_MODULE.get(cls.__module__, ()):
        if cls.__name__ in fam.norms:
            found = fam.norm
            break
        found = next((norm for name, norm in fam.other_norms if name == cls.__name__), None)
        if found is not None:
            break
    _NORMS[cls] = found
    return found


class LigerRMSNorm(nn.Module):
    """``kernels`` layer for ``"RMSNorm"``: Liger's rms_norm with the decorated class's own arithmetic."""

    can_torch_compile = True

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        stock = type(self)
        norm = _norm_of(stock)
        reason = "a norm class Liger's family table does not know" if norm is None else layers._norm_structural(self)
        weight = getattr(self, "weight", None)
        if reason is None:
            reason = layers.tensor_reason(hidden_states, *(() if weight is None else (weight,)))
        if reason is None and weight is not None and weight.shape[0] != hidden_states.shape[-1]:
            reason = "a weight that does not match the input's last dimension"
        if reason is not None:
            layers.warn_fallback(stock.__name__, reason)
            return stock.forward(self, hidden_states)
        return F.liger_rms_norm(hidden_states, weight, layers._eps(self), norm.offset, norm.casting_mode, norm.in_place)


def _stock_function(func_module: nn.Module):
    """The function a ``kernels`` function layer wraps (its module and name say the family), or None."""
    try:
        return layers.kernels_function(func_module)
    except TypeError:
        return None


_ROPES: dict[type, object] = {}


def _rope_of(func_module: nn.Module):
    """Liger's replacement (`layers.rope_function`) for the decorated function, or None."""
    cls = type(func_module)
    if cls in _ROPES:
        return _ROPES[cls]
    fn = None
    stock = _stock_function(func_module)
    if stock is not None:
        for fam in _BY_MODULE.get(stock.__module__, ()):
            kinds = dict(fam.other_ropes)
            if fam.rope is not None:
                kinds[fam.rope_fn] = fam.rope
            kind = kinds.get(stock.__name__)
            if kind in _ROPE_KINDS:
                fn = layers.rope_function(stock, kind)
                break
    _ROPES[cls] = fn
    return fn


class LigerRotaryPosEmb(nn.Module):
    """``kernels`` layer for ``"rotary_pos_emb"``: Liger's RoPE of the decorated function's family."""

    can_torch_compile = True

    def forward(self, q, k, cos, sin, unsqueeze_dim=1):
        fn = _rope_of(self)
        if fn is None:
            layers.warn_fallback("rotary_pos_emb", "a RoPE function whose kind Liger's family table does not record")
            return type(self).forward(self, q, k, cos, sin, unsqueeze_dim)
        return fn(q, k, cos, sin, unsqueeze_dim)


def _gated_mlp_forward(self: nn.Module, x: torch.Tensor, op) -> torch.Tensor:
    reason = layers.tensor_reason(x)
    if reason is not None:
        layers.warn_fallback(type(self).__name__, reason)
        return type(self).forward(self, x)
    # in_place: the two projections' outputs belong to this forward alone.
    return self.down_proj(op(self.gate_proj(x), self.up_proj(x), in_place=True))


class LigerSwiGLUMLP(nn.Module):
    """``kernels`` layer for ``"SwiGLUMLP"``: ``down_proj(silu(gate_proj(x)) * up_proj(x))`` in Liger's swiglu."""

    can_torch_compile = True

    def forward(self, x):
        return _gated_mlp_forward(self, x, F.liger_swiglu)


class LigerGEGLUMLP(nn.Module):
    """``kernels`` layer for ``"GeGLUMLP"``: ``down_proj(gelu_tanh(gate_proj(x)) * up_proj(x))`` in Liger's geglu."""

    can_torch_compile = True

    def forward(self, x):
        return _gated_mlp_forward(self, x, F.liger_geglu)


LAYERS: dict[str, type[nn.Module]] = {
    "RMSNorm": LigerRMSNorm,
    "rotary_pos_emb": LigerRotaryPosEmb,
    "SwiGLUMLP": LigerSwiGLUMLP,
    "GeGLUMLP": LigerGEGLUMLP,
}


@dataclass(frozen=True)
class LigerRepository:
    """A ``kernels`` repository (its ``RepositoryProtocol``: ``load()`` returns the layer class) that
    holds one of this module's layers: installed with liger-core, nothing to download."""

    layer_name: str

    def load(self) -> type[nn.Module]:
        return LAYERS[self.layer_name]

    def __str__(self) -> str:
        return f"liger-core's {LAYERS[self.layer_name].__name__}"


def served_device_types() -> tuple[str, ...]:
    """The device types the installed vendor backends serve (the reference backend serves none)."""
    found: list[str] = []
    for name, backend in registry.backends().items():
        if name == registry.REFERENCE:
            continue
        found += [d for d in backend.device_types if d not in found]
    return tuple(found)


def _mlp_condition(kind: str):
    def fits(module: nn.Module) -> bool:
        param = next(module.parameters(), None)
        if param is None or param.device.type not in _REGISTERED_DEVICES:
            return False
        reason = layers._activation_reason(layers._act(module), kind)
        if reason is not None:
            layers.warn_fallback(type(module).__name__, reason)
            return False
        return True

    fits.__name__ = f"liger_{kind}_mlp_fits"
    return fits


def mark_mlp_classes(model_types: Iterable[str] | None = None) -> list[type]:
    """Give each family's gate/up/down MLP class the layer name transformers' mapping uses for Liger's
    MLPs (``SwiGLUMLP``/``GeGLUMLP``), so ``kernelize`` swaps it; returns the classes marked.

    ``model_types``: the families (default: every family whose modeling module the installed
    transformers has; importing them all takes a few seconds once).
    """
    from kernels import replace_kernel_forward_from_hub

    from liger_core.transformers import monkey_patch

    if model_types is None:
        names = [t for t in FAMILIES if monkey_patch.family_available(t)]
    else:
        names = []
        for t in model_types:
            if _canonical(t) not in FAMILIES:
                raise monkey_patch.unknown_model_type(t)
            names.append(_canonical(t))
    marked = []
    for model_type in names:
        fam = FAMILIES[model_type]
        kind = fam.mlp_kind
        if kind not in _MLP_NAMES or not fam.mlps or not fam.mlp_flag:
            continue
        mod = importlib.import_module(fam.modeling)
        for name in fam.mlps:
            cls = getattr(mod, name, None)
            if not isinstance(cls, type):
                continue
            cls = layers.stock_class(cls)
            existing = getattr(cls, "kernel_layer_name", None)
            if existing is not None and existing != _MLP_NAMES[kind]:
                continue  # transformers marks it under another name: leave its mapping alone
            replace_kernel_forward_from_hub(cls, _MLP_NAMES[kind], _mlp_condition(kind))
            marked.append(cls)
    return marked


def kernel_mapping(device_types: Iterable[str], inference: bool = False) -> dict:
    """The ``kernels`` mapping of this module's layers for ``device_types``:
    ``{layer name: {device type: {mode: LigerRepository}}}``."""
    from kernels import Mode

    modes = [Mode.TRAINING, Mode.TRAINING | Mode.TORCH_COMPILE]
    if inference:
        modes += [Mode.INFERENCE, Mode.INFERENCE | Mode.TORCH_COMPILE]
    return {
        name: {device: {mode: LigerRepository(name) for mode in modes} for device in device_types} for name in LAYERS
    }


def _merge_into_transformers(mapping: dict) -> bool:
    """Write ``mapping`` into transformers' default kernel mapping (which ``use_kernels=True``
    re-registers), mode by mode; False where this transformers has none."""
    try:
        from transformers.integrations import hub_kernels
    except ImportError:
        return False
    getter = getattr(hub_kernels, "get_kernel_mapping_transformers", None)
    default = getter() if getter is not None else getattr(hub_kernels, "_KERNEL_MAPPING", None)
    if not isinstance(default, dict):
        return False
    from kernels import Mode

    for name, by_device in mapping.items():
        entry = default.setdefault(name, {})
        for device, repos in by_device.items():
            current = entry.get(device)
            if current is None:
                merged = {}
            elif isinstance(current, dict):
                merged = dict(current)
            else:
                merged = {Mode.FALLBACK: current}
            merged.update(repos)
            entry[device] = merged
    return True


def register_kernels_hub(
    device_types: Iterable[str] | None = None,
    *,
    model_types: Iterable[str] | None = None,
    inference: bool = False,
) -> dict:
    """Register this project's layers with the ``kernels`` library (and transformers' default
    mapping), so ``use_kernels=True`` and ``kernelize`` run them; returns the mapping registered.

    ``device_types``: default, those the installed vendor backends serve (`served_device_types`);
    ``("cpu",)`` for a vendor's kernels in the Triton interpreter. ``model_types``: the families
    whose MLP classes are marked (default: all the installed transformers has). ``inference``:
    register the inference modes too. Call it again to add device types; it is idempotent.
    """
    from kernels import register_kernel_mapping

    devices = tuple(served_device_types() if device_types is None else device_types)
    for device in devices:
        if device not in KERNELS_DEVICE_TYPES:
            raise ValueError(
                f"device_types: {device!r} is not a kernels device type; expected one of {KERNELS_DEVICE_TYPES}"
            )
        serving = registry.serving(LAYER_OPS["RMSNorm"], device)
        if serving.backend in (None, registry.REFERENCE):
            why = serving.error or "the PyTorch reference would run there"
            raise ValueError(
                f"device_types: no Liger vendor backend serves {device!r} ({why}); installed vendor backends "
                f"serve {served_device_types() or 'no device'} (pip install liger-ops-<vendor>, or "
                "LIGER_BACKEND=<vendor> with TRITON_INTERPRET=1 for CPU tensors)"
            )
    if not devices:
        raise ValueError(
            "device_types: no installed Liger vendor backend serves any device (pip install liger-ops-cuda, "
            "liger-ops-ascend or liger-ops-xpu), so there is nothing to register"
        )
    mapping = kernel_mapping(devices, inference)
    mark_mlp_classes(model_types)
    _REGISTERED_DEVICES.update(devices)
    _merge_into_transformers(mapping)
    register_kernel_mapping(mapping)
    return mapping
