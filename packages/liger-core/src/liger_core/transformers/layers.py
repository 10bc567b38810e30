"""Liger versions of the Hugging Face layers: subclasses of each stock class with a Liger ``forward``.

A Liger layer subclasses the stock one instead of replacing it, so everything else stays the
stock model's: constructor signature, parameter names (checkpoints load unchanged), weight
initialisation, ``isinstance`` checks inside transformers, ``extra_repr``. A live module is
patched by setting its ``__class__`` to the same subclass, so a model built before the patch
and one built after it end up identical.

A patched class must serve every config the stock class serves (a class-level patch holds for
the whole process, which builds reward, reference and classification models too). Where
Liger's kernel does not fit, the module runs the stock class's own forward and warns once per
reason (`LigerStockFallbackWarning`): decided per instance at construction for what the config
fixes (another activation), per call for what the tensors bring (a dtype the kernels do not
take, the meta device, a non-strided layout).

Every op goes through `liger_core.functional`, so the backend serving the tensors' device runs it.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable

import torch
from torch import nn

from liger_core import functional as F
from liger_core.registry import LigerFallbackWarning

# (stock class, variant key) -> Liger subclass; one subclass per stock class and settings, so
# repeated patches give the same class.
_CLASSES: dict[tuple[type, tuple], type] = {}

_SILU = ("SiLU", "SiLUActivation")
# Every tanh-approximated GELU transformers names; the geglu op computes exactly that formula.
_GELU_TANH = ("GELUTanh", "PytorchGELUTanh", "NewGELUActivation", "GELUPytorchTanh", "FastGELUActivation")
# What every op of the interface takes.
_KERNEL_DTYPES = frozenset((torch.float32, torch.bfloat16, torch.float16))


class LigerStockFallbackWarning(LigerFallbackWarning):
    """A patched transformers module runs the stock computation: Liger's kernel does not fit its config or inputs."""


# Messages already given: one warning per distinct reason per process, however many modules
# and calls share it.
_WARNED: set[str] = set()


def warn_fallback(where: str, reason: str) -> None:
    """Warn once per process that ``where`` runs the stock computation, and why."""
    message = f"{where}: {reason}; running the stock transformers computation there instead of Liger's kernel"
    if message not in _WARNED:
        _WARNED.add(message)
        warnings.warn(message, LigerStockFallbackWarning, stacklevel=3)


def tensor_reason(*tensors: torch.Tensor) -> str | None:
    """Why the kernels cannot take these tensors, or None. Cheap: it runs on every call."""
    for t in tensors:
        if t.dtype not in _KERNEL_DTYPES:
            return f"{str(t.dtype).removeprefix('torch.')} tensors (Liger's kernels take float32, bfloat16, float16)"
        if t.layout is not torch.strided:
            return f"{t.layout} tensors (Liger's kernels take strided ones)"
        if t.is_meta:
            return "meta tensors"
    return None


def is_liger_class(cls: type) -> bool:
    return "_liger_base" in cls.__dict__


def stock_class(cls: type) -> type:
    """The stock class behind a Liger subclass (itself for a stock class)."""
    return cls.__dict__["_liger_base"] if is_liger_class(cls) else cls


def _subclass(base: type, key: tuple, kind: str, namespace: dict) -> type:
    """The Liger subclass of ``base``; ``namespace`` holds its ``forward`` and ``_liger_structural``.

    ``_liger_structural(module) -> str | None``: why this instance's config does not fit the
    kernel (None: it fits). Computed once at construction (and by `prepare_live` for a module
    built before the patch) into ``module._liger_fallback``; ``forward`` then runs the stock one.
    """
    base = stock_class(base)
    cls = _CLASSES.get((base, key))
    if cls is None:

        @functools.wraps(base.__init__)  # the stock signature, for anything that inspects it
        def __init__(self, *args, **kwargs) -> None:
            base.__init__(self, *args, **kwargs)
            prepare_live(self)

        namespace = {
            "_liger_structural": lambda module: None,
            **namespace,
            "__init__": __init__,
            # Class-level default, so an instance that skipped __init__ (unpickled, copied) still reads it.
            "_liger_fallback": None,
            "_liger_base": base,
            "_liger_kind": kind,
            "__module__": __name__,
        }
        cls = type(f"Liger{base.__name__}", (base,), namespace)
        cls.__qualname__ = cls.__name__
        _CLASSES[(base, key)] = cls
        # Reachable by module and name, so a patched model pickles (torch.save(model)).
        globals().setdefault(cls.__name__, cls)
    return cls


def prepare_live(module: nn.Module) -> None:
    """Decide, for one module of a Liger class, whether its config fits the kernel (warns if not).

    Run by the Liger ``__init__``; the patch runs it on a live module converted by ``__class__``.
    """
    reason = type(module)._liger_structural(module)
    module._liger_fallback = reason
    if reason is not None:
        warn_fallback(type(module).__name__, reason)


def _activation_reason(act: object, kind: str) -> str | None:
    """Why Liger's ``kind`` op does not compute ``act(gate) * up``, or None when it does."""
    name = type(act).__name__
    if kind == "swiglu":
        if name in _SILU:
            return None
        wanted = "silu/swish"
    else:
        if name in _GELU_TANH or (isinstance(act, nn.GELU) and act.approximate == "tanh"):
            return None
        wanted = "a tanh-approximated GELU (gelu_pytorch_tanh)"
    return f"activation {name}, while Liger's {kind} computes {wanted}"


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


def _eps(norm: nn.Module) -> float | None:
    eps = getattr(norm, "variance_epsilon", None)
    return getattr(norm, "eps", None) if eps is None else eps


def _norm_structural(norm: nn.Module) -> str | None:
    weight = getattr(norm, "weight", None)
    if not isinstance(weight, torch.Tensor) or weight.ndim != 1:
        return "no 1-D weight (Liger's rms_norm scales by a (hidden,) weight)"
    if not isinstance(_eps(norm), (int, float)):
        return "no numeric eps / variance_epsilon"
    return None


def rms_norm_class(base: type, offset: float, casting_mode: str, in_place: bool) -> type:
    """The Liger subclass of the RMSNorm class ``base``.

    ``offset``/``casting_mode`` reproduce the stock arithmetic (LLaMA: normalise in float32,
    cast, scale; Gemma and OLMo2: scale in float32, cast last; Gemma stores ``weight - 1``).
    ``in_place`` only for classes used solely as pre-norms: a post-norm's output gradient is the
    very tensor the residual branch also receives, so it must not be overwritten.
    """

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        weight = self.weight
        reason = self._liger_fallback or tensor_reason(hidden_states, weight)
        if reason is None and weight.shape[0] != hidden_states.shape[-1]:
            reason = "a weight that does not match the input's last dimension"
        if reason is not None:
            warn_fallback(type(self).__name__, reason)
            return base.forward(self, hidden_states)
        return F.liger_rms_norm(hidden_states, weight, _eps(self), offset, casting_mode, in_place)

    return _subclass(
        base,
        ("rms_norm", offset, casting_mode, in_place),
        "rms_norm",
        {"forward": forward, "_liger_structural": _norm_structural},
    )


# -- MLPs ------------------------------------------------------------------------------------


def gated_mlp_class(base: type, kind: str) -> type:
    """Liger subclass of a gate/up/down MLP (LLaMA, Mistral, Qwen, Gemma, Granite, OLMo2).

    ``in_place=True``: the two projections' outputs belong to this forward alone, so the op may
    reuse their memory for its gradients.
    """
    op = require_op(f"liger_{kind}")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        reason = self._liger_fallback or tensor_reason(x)
        if reason is not None:
            warn_fallback(type(self).__name__, reason)
            return base.forward(self, x)
        return self.down_proj(op(self.gate_proj(x), self.up_proj(x), in_place=True))

    def structural(module: nn.Module) -> str | None:
        return _activation_reason(module.act_fn, kind)

    return _subclass(base, ("mlp", kind), kind, {"forward": forward, "_liger_structural": structural})


def phi3_mlp_class(base: type) -> type:
    """Liger subclass of Phi-3's MLP, whose gate and up projections are one ``gate_up_proj``."""

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        reason = self._liger_fallback or tensor_reason(hidden_states)
        if reason is not None:
            warn_fallback(type(self).__name__, reason)
            return base.forward(self, hidden_states)
        gate, up = self.gate_up_proj(hidden_states).chunk(2, dim=-1)
        # gate and up are views of one buffer: no in-place gradient trick.
        return self.down_proj(F.liger_swiglu(gate, up))

    def structural(module: nn.Module) -> str | None:
        return _activation_reason(module.activation_fn, "swiglu")

    return _subclass(base, ("phi3_mlp",), "swiglu", {"forward": forward, "_liger_structural": structural})


def experts_class(base: type) -> type:
    """Liger subclass of the fused-weight MoE experts (Mixtral, Qwen3-MoE, transformers 5.x).

    The experts hold ``gate_up_proj`` (experts, 2 * intermediate, hidden) and ``down_proj``
    (experts, hidden, intermediate); each expert's tokens run through swiglu.
    """

    def forward(
        self, hidden_states: torch.Tensor, top_k_index: torch.Tensor, top_k_weights: torch.Tensor
    ) -> torch.Tensor:
        reason = self._liger_fallback or tensor_reason(hidden_states)
        if reason is not None:
            warn_fallback(type(self).__name__, reason)
            return base.forward(self, hidden_states, top_k_index, top_k_weights)
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

    def structural(module: nn.Module) -> str | None:
        return _activation_reason(module.act_fn, "swiglu")

    return _subclass(base, ("experts",), "swiglu", {"forward": forward, "_liger_structural": structural})


# -- RoPE --------------------------------------------------------------------------------------


def liger_rope(
    q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, unsqueeze_dim: int = 1
) -> tuple[torch.Tensor, torch.Tensor]:
    """Liger's RoPE with the signature of transformers' ``apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1)``."""
    return F.liger_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=unsqueeze_dim)


def liger_partial_rope(
    q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, unsqueeze_dim: int = 1
) -> tuple[torch.Tensor, torch.Tensor]:
    """Liger's RoPE as Phi-3's ``apply_rotary_pos_emb``, which rotates only the first ``cos.shape[-1]`` dims."""
    rot = cos.shape[-1]
    if rot == q.shape[-1]:
        return F.liger_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=unsqueeze_dim)
    q_rot, k_rot = F.liger_rotary_pos_emb(
        q[..., :rot].contiguous(), k[..., :rot].contiguous(), cos, sin, unsqueeze_dim=unsqueeze_dim
    )
    return torch.cat([q_rot, q[..., rot:]], dim=-1), torch.cat([k_rot, k[..., rot:]], dim=-1)


def _rope_reason(q, k, cos, sin, unsqueeze_dim, partial: bool) -> str | None:
    """Why Liger's RoPE does not fit these arguments (the stock function then runs), or None."""
    reason = tensor_reason(q, k, cos, sin)
    if reason is not None:
        return reason
    if unsqueeze_dim not in (1, 2) or q.ndim != 4 or k.ndim != 4 or cos.ndim != 3 or sin.shape != cos.shape:
        return "q/k/cos/sin laid out other than (batch, heads, seq, head_dim) and (batch, seq, rotary_dim)"
    seq = 3 - unsqueeze_dim
    head_dim, rot = q.shape[-1], cos.shape[-1]
    if (
        k.shape[-1] != head_dim
        or rot % 2
        or (rot > head_dim if partial else rot != head_dim)
        or k.shape[0] != q.shape[0]
        or not (q.shape[seq] == k.shape[seq] == cos.shape[1])
        or cos.shape[0] not in (1, q.shape[0])
    ):
        return "a rotary dimension or shape Liger's RoPE does not take"
    return None


# (stock apply_rotary_pos_emb, partial) -> its Liger replacement, so repeated patches give the same function.
_ROPES: dict[tuple[Callable, bool], Callable] = {}


def rope_function(stock: Callable, partial: bool) -> Callable:
    """The Liger replacement for one family's ``apply_rotary_pos_emb``: Liger's RoPE where it fits, else ``stock``.

    ``partial``: the family rotates only the first ``cos.shape[-1]`` dims of each head (Phi-3).
    """
    stock = getattr(stock, "_liger_stock", stock)
    fn = _ROPES.get((stock, partial))
    if fn is not None:
        return fn
    kernel = liger_partial_rope if partial else liger_rope
    where = f"{stock.__module__}.{stock.__qualname__}"

    def apply_rotary_pos_emb(
        q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, unsqueeze_dim: int = 1
    ) -> tuple[torch.Tensor, torch.Tensor]:
        reason = _rope_reason(q, k, cos, sin, unsqueeze_dim, partial)
        if reason is not None:
            warn_fallback(where, reason)
            return stock(q, k, cos, sin, unsqueeze_dim=unsqueeze_dim)
        return kernel(q, k, cos, sin, unsqueeze_dim)

    # A module-level name derived from the stock function's, so attention modules holding it
    # (rotary_fn) pickle, and a patched process finds it under the same name when unpickling.
    name = "liger_rope__" + where.replace(".", "_") + ("__partial" if partial else "")
    apply_rotary_pos_emb.__name__ = apply_rotary_pos_emb.__qualname__ = name
    apply_rotary_pos_emb.__doc__ = f"Liger's RoPE in place of {where}, which runs wherever Liger's does not fit."
    apply_rotary_pos_emb._liger_stock = stock
    globals()[name] = apply_rotary_pos_emb
    _ROPES[(stock, partial)] = apply_rotary_pos_emb
    return apply_rotary_pos_emb
