"""``liger_kernel.transformers``: liger-kernel's names for liger-core's modules, patches and Auto class.

The patch functions (every ``apply_liger_kernel_to_<model_type>`` of liger-kernel 0.8.5, the
``qwen3_5*_text`` pair, ``_apply_liger_kernel_to_instance``) are `liger_kernel.transformers.monkey_patch`'s;
the module classes are liger-core's ``nn`` modules, under the same names. ``LigerRMSNorm``,
``LigerLayerNorm``, ``LigerSwiGLUMLP`` and ``LigerGEGLUMLP`` also answer ``isinstance`` for the layers
liger-core's patches swap into a model (``LigerLlamaRMSNorm`` is a ``LigerRMSNorm`` here), as code
written for liger-kernel checks. A name liger-kernel has and this package lacks raises an
AttributeError naming it and what to use instead.
"""

from __future__ import annotations

import liger_core.nn as _nn
from liger_kernel.transformers import functional as _functional
from liger_kernel.transformers import monkey_patch as _mp
from liger_kernel.transformers import rope as _rope
from liger_kernel.transformers.monkey_patch import (
    MODEL_TYPE_TO_APPLY_LIGER_FN,
    _apply_liger_kernel_to_instance,
    apply_liger_kernel_to_instance,
)


class _LigerKindMeta(type):
    """``isinstance(m, LigerRMSNorm)`` also holds for liger-core's patched layers of that kind."""

    _liger_kinds: tuple[str, ...] = ()

    def __instancecheck__(cls, obj) -> bool:
        if type.__instancecheck__(cls, obj):
            return True
        core = cls.__mro__[1]  # the liger-core module this class stands for
        return isinstance(obj, core) or getattr(type(obj), "_liger_kind", None) in cls._liger_kinds


def _kind_class(core: type, kinds: tuple[str, ...]) -> type:
    cls = _LigerKindMeta(core.__name__, (core,), {"__module__": __name__, "__qualname__": core.__name__})
    cls._liger_kinds = kinds
    cls.__doc__ = core.__doc__
    return cls


LigerRMSNorm = _kind_class(_nn.LigerRMSNorm, ("rms_norm",))
LigerLayerNorm = _kind_class(_nn.LigerLayerNorm, ("layer_norm",))
LigerSwiGLUMLP = _kind_class(_nn.LigerSwiGLUMLP, ("swiglu",))
LigerGEGLUMLP = _kind_class(_nn.LigerGEGLUMLP, ("geglu",))
_KIND_CLASSES = ("LigerRMSNorm", "LigerLayerNorm", "LigerSwiGLUMLP", "LigerGEGLUMLP")

# Every other liger-core nn module under its own (liger-kernel's) name.
globals().update({name: getattr(_nn, name) for name in _nn.__all__ if name not in _KIND_CLASSES})

_APPLY = tuple(
    name for name in dir(_mp) if name.startswith("apply_liger_kernel_to_") and name != "apply_liger_kernel_to_instance"
)
globals().update({name: getattr(_mp, name) for name in _APPLY})
liger_llama4_text_rotary_pos_emb = _functional.liger_llama4_text_rotary_pos_emb

_AUTO = ("AutoLigerKernelForCausalLM", "AutoLigerKernelForImageTextToText")


def __getattr__(name: str):
    if name in _AUTO:
        # transformers' Auto classes are slow to import: on first use, as liger-kernel does.
        from liger_core.transformers import auto_model

        return getattr(auto_model, name)
    if name == "liger_rotary_pos_emb":
        # Resolved on each access: the function liger-core's LLaMA patch swaps in (see rope).
        return _rope.liger_rotary_pos_emb_for_llama()
    from liger_kernel._surface import missing

    raise missing(__name__, name)


__all__ = [
    "MODEL_TYPE_TO_APPLY_LIGER_FN",
    "_apply_liger_kernel_to_instance",
    "apply_liger_kernel_to_instance",
    "liger_llama4_text_rotary_pos_emb",
    "liger_rotary_pos_emb",
    *_KIND_CLASSES,
    *(name for name in _nn.__all__ if name not in _KIND_CLASSES),
    *_APPLY,
    *_AUTO,
]
