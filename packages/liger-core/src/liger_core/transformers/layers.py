"""Liger versions of the Hugging Face layers: subclasses of each stock class with a Liger ``forward``.

A Liger layer subclasses the stock one instead of replacing it, so everything else stays the
stock model's: constructor signature, parameter names (checkpoints load unchanged), weight
initialisation, ``isinstance`` checks inside transformers, ``extra_repr``. A live module is
patched by setting its ``__class__`` to the same subclass, so a model built before the patch
and one built after it end up identical.

Every op goes through `liger_core.functional`, so the backend serving the tensors' device runs it.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from liger_core import functional as F

# (stock class, variant key) -> Liger subclass; one subclass per stock class and settings, so
# repeated patches give the same class.
_CLASSES: dict[tuple[type, tuple], type] = {}

_SILU = ("SiLU", "SiLUActivation")
# Every tanh-approximated GELU transformers names; the geglu op computes exactly that formula.
_GELU_TANH = ("GELUTanh", "PytorchGELUTanh", "NewGELUActivation", "GELUPytorchTanh", "FastGELUActivation")


def is_liger_class(cls: type) -> bool:
    return "_liger_base" in cls.__dict__


def stock_class(cls: type) -> type:
    """The stock class behind a Liger subclass (itself for a stock class)."""
    return cls.__dict__["_liger_base"] if is_liger_class(cls) else cls


def _subclass(base: type, key: tuple, kind: str, namespace: dict) -> type:
    base = stock_class(base)
    cls = _CLASSES.get((base, key))
    if cls is None:
        namespace = {**namespace, "_liger_base": base, "_liger_kind": kind, "__module__": __name__}
        cls = type(f"Liger{base.__name__}", (base,), namespace)
        cls.__qualname__ = cls.__name__
        _CLASSES[(base, key)] = cls
        # Reachable by module and name, so a patched model pickles (torch.save(model)).
        globals().setdefault(cls.__name__, cls)
    return cls


def _check_activation(act: nn.Module, kind: str, where: str) -> None:
    """The fused MLP computes silu (swiglu) or tanh-GELU (geglu): refuse a model using anything else."""
    name = type(act).__name__
    ok = (
        name in _SILU
        if kind == "swiglu"
        else (name in _GELU_TANH or (isinstance(act, nn.GELU) and act.approximate == "tanh"))
    )
    if not ok:
        wanted = "silu/swish" if kind == "swiglu" else "a tanh-approximated GELU (gelu_pytorch_tanh)"
        raise ValueError(
            f"{where}: Liger's {kind} MLP needs the activation {wanted}; this model's is {name}. "
            f"Apply the patch with {kind}=False for this model."
        )


def require_op(name: str) -> Callable:
    """``liger_core.functional.<name>``, or an error saying this liger-core predates it."""
    fn = getattr(F, name, None)
    if fn is None:
        from liger_core.__about__ import __version__

        raise ImportError(
            f"liger-core {__version__} has no {name}; the transformers integration needs a liger-core "
            f"whose interface includes it (pip install -U liger-core)"
        )
    return fn


# -- RMSNorm ---------------------------------------------------------------------------------


def rms_norm_class(base: type, offset: float, casting_mode: str, in_place: bool) -> type:
    """The Liger subclass of the RMSNorm class ``base``.

    ``offset``/``casting_mode`` reproduce the stock arithmetic (LLaMA: normalise in float32,
    cast, scale; Gemma and OLMo2: scale in float32, cast last; Gemma stores ``weight - 1``).
    ``in_place`` only for classes used solely as pre-norms: a post-norm's output gradient is the
    very tensor the residual branch also receives, so it must not be overwritten.
    """

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        eps = getattr(self, "variance_epsilon", None)
        if eps is None:
            eps = self.eps
        return F.liger_rms_norm(hidden_states, self.weight, eps, offset, casting_mode, in_place)

    return _subclass(base, ("rms_norm", offset, casting_mode, in_place), "rms_norm", {"forward": forward})


# -- MLPs ------------------------------------------------------------------------------------


def gated_mlp_class(base: type, kind: str) -> type:
    """Liger subclass of a gate/up/down MLP (LLaMA, Mistral, Qwen, Gemma, Granite, OLMo2).

    ``in_place=True``: the two projections' outputs belong to this forward alone, so the op may
    reuse their memory for its gradients.
    """
    op = require_op(f"liger_{kind}")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(op(self.gate_proj(x), self.up_proj(x), in_place=True))

    def __init__(self, *args, **kwargs) -> None:
        base.__init__(self, *args, **kwargs)
        _check_activation(self.act_fn, kind, type(self).__name__)

    return _subclass(base, ("mlp", kind), kind, {"forward": forward, "__init__": __init__})


def phi3_mlp_class(base: type) -> type:
    """Liger subclass of Phi-3's MLP, whose gate and up projections are one ``gate_up_proj``."""

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up_proj(hidden_states).chunk(2, dim=-1)
        # gate and up are views of one buffer: no in-place gradient trick.
        return self.down_proj(F.liger_swiglu(gate, up))

    def __init__(self, *args, **kwargs) -> None:
        base.__init__(self, *args, **kwargs)
        _check_activation(self.activation_fn, "swiglu", type(self).__name__)

    return _subclass(base, ("phi3_mlp",), "swiglu", {"forward": forward, "__init__": __init__})


def experts_class(base: type) -> type:
    """Liger subclass of the fused-weight MoE experts (Mixtral, Qwen3-MoE, transformers 5.x).

    The experts hold ``gate_up_proj`` (experts, 2 * intermediate, hidden) and ``down_proj``
    (experts, hidden, intermediate); each expert's tokens run through swiglu.
    """

    def forward(
        self, hidden_states: torch.Tensor, top_k_index: torch.Tensor, top_k_weights: torch.Tensor
    ) -> torch.Tensor:
        out = torch.zeros_like(hidden_states)
        with torch.no_grad():
            # num_experts + 1 classes: expert parallelism marks tokens of other ranks' experts
            # with index num_experts (newer transformers); those are skipped.
            mask = nn.functional.one_hot(top_k_index, num_classes=self.num_experts + 1).permute(2, 1, 0)
            hit = (mask.sum(dim=(-1, -2)) > 0).nonzero().flatten().tolist()
        for e in hit:
            if e == self.num_experts:
                continue
            pos, tokens = torch.where(mask[e])
            gate, up = nn.functional.linear(hidden_states[tokens], self.gate_up_proj[e]).chunk(2, dim=-1)
            y = nn.functional.linear(F.liger_swiglu(gate, up), self.down_proj[e])
            y = y * top_k_weights[tokens, pos, None]
            out.index_add_(0, tokens, y.to(out.dtype))
        return out

    def __init__(self, *args, **kwargs) -> None:
        base.__init__(self, *args, **kwargs)
        _check_activation(self.act_fn, "swiglu", type(self).__name__)

    return _subclass(base, ("experts",), "swiglu", {"forward": forward, "__init__": __init__})


def check_live_activation(module: nn.Module, liger_cls: type) -> None:
    """The activation check a live module skips (its ``__init__`` ran before the patch)."""
    kind = liger_cls.__dict__["_liger_kind"]
    if kind in ("swiglu", "geglu"):
        act = getattr(module, "act_fn", None) or module.activation_fn
        _check_activation(act, kind, type(module).__name__)


# -- RoPE --------------------------------------------------------------------------------------


def liger_rope(
    q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, unsqueeze_dim: int = 1
) -> tuple[torch.Tensor, torch.Tensor]:
    """Drop-in for transformers' ``apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1)``."""
    return F.liger_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=unsqueeze_dim)


def liger_partial_rope(
    q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, unsqueeze_dim: int = 1
) -> tuple[torch.Tensor, torch.Tensor]:
    """Drop-in for Phi-3's ``apply_rotary_pos_emb``, which rotates only the first ``cos.shape[-1]`` dims."""
    rot = cos.shape[-1]
    if rot == q.shape[-1]:
        return F.liger_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=unsqueeze_dim)
    q_rot, k_rot = F.liger_rotary_pos_emb(
        q[..., :rot].contiguous(), k[..., :rot].contiguous(), cos, sin, unsqueeze_dim=unsqueeze_dim
    )
    return torch.cat([q_rot, q[..., rot:]], dim=-1), torch.cat([k_rot, k[..., rot:]], dim=-1)
