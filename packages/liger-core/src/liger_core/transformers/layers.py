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

import inspect
import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from liger_core import functional as F
from liger_core import registry
from liger_core.ops.llama4_rope import takes as llama4_rope_takes
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


def carry_stock_metadata(replacement: Callable, stock: Callable, *, keep_name: bool = False) -> Callable:
    """Give ``replacement`` its stock twin's metadata: ``__wrapped__``, ``__doc__``, the annotations
    (a copy, the stock ones winning; transformers' tests read ``forward.__annotations__["return"]``)
    and, unless ``keep_name`` (a replacement that pickles by a name of its own), ``__name__``,
    ``__qualname__`` and ``__module__``. Attributes in ``__dict__`` (``_liger_stock``...) stay."""
    own = dict(getattr(replacement, "__annotations__", {}))
    assigned = ("__doc__",) if keep_name else ("__module__", "__name__", "__qualname__", "__doc__")
    for attr in assigned:
        if hasattr(stock, attr):
            setattr(replacement, attr, getattr(stock, attr))
    replacement.__annotations__ = {**own, **getattr(stock, "__annotations__", {})}
    replacement.__wrapped__ = stock
    return replacement


def _subclass(base: type, key: tuple, kind: str, namespace: dict) -> type:
    """The Liger subclass of ``base``; ``namespace`` holds its ``forward`` and ``_liger_structural``.

    ``_liger_structural(module) -> str | None``: why this instance's config does not fit the
    kernel (None: it fits). Computed once at construction (and by `prepare_live` for a module
    built before the patch) into ``module._liger_fallback``; ``forward`` then runs the stock one.
    """
    base = stock_class(base)
    cls = _CLASSES.get((base, key))
    if cls is None:

        def __init__(self, *args, **kwargs) -> None:
            base.__init__(self, *args, **kwargs)
            prepare_live(self)

        carry_stock_metadata(__init__, base.__init__)  # the stock signature, for anything that inspects it

        for name, fn in namespace.items():  # each method in place of a stock one carries its metadata
            if inspect.isfunction(fn) and inspect.isfunction(getattr(base, name, None)):
                carry_stock_metadata(fn, getattr(base, name))
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


# -- RMSNorm ---------------------------------------------------------------------------------


def _eps(norm: nn.Module) -> float | None:
    eps = getattr(norm, "variance_epsilon", None)
    return getattr(norm, "eps", None) if eps is None else eps


def _weightless(norm: nn.Module) -> bool:
    """A norm built without a scale (Gemma 4's ``with_scale=False``): Liger's rms_norm takes ``weight=None``."""
    return getattr(norm, "weight", None) is None and getattr(norm, "with_scale", True) is False


def _norm_structural(norm: nn.Module) -> str | None:
    weight = getattr(norm, "weight", None)
    if not _weightless(norm) and (not isinstance(weight, torch.Tensor) or weight.ndim != 1):
        return "no 1-D weight (Liger's rms_norm scales by a (hidden,) weight)"
    if not isinstance(_eps(norm), (int, float)):
        return "no numeric eps / variance_epsilon"
    return None


def rms_norm_class(base: type, offset: float, casting_mode: str, in_place: bool) -> type:
    """The Liger subclass of the RMSNorm class ``base``.

    ``offset``/``casting_mode`` reproduce the stock arithmetic (LLaMA: normalise in float32,
    cast, scale; Gemma and OLMo2: scale in float32, cast last; Gemma stores ``weight - 1``).
    A norm built without a scale (Gemma 4's ``with_scale=False``) normalises only.
    ``in_place`` only for classes used solely as pre-norms: a post-norm's output gradient is the
    very tensor the residual branch also receives, so it must not be overwritten.
    """

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        weight = getattr(self, "weight", None)
        reason = self._liger_fallback or tensor_reason(hidden_states, *(() if weight is None else (weight,)))
        if reason is None and weight is not None and weight.shape[0] != hidden_states.shape[-1]:
            reason = "a weight that does not match the input's last dimension"
        if reason is not None:
            warn_fallback(type(self).__name__, reason)
            return base.forward(self, hidden_states)
        return F.liger_rms_norm(hidden_states, weight, _eps(self), offset, casting_mode, in_place)

    return _subclass(
        base,
        ("rms_norm", offset, casting_mode, in_place),
        "rms_norm",
        # The arithmetic, for a patched decoder layer that computes this norm in fused_add_rms_norm.
        {"forward": forward, "_liger_structural": _norm_structural, "_liger_norm_options": (offset, casting_mode)},
    )


# -- MLPs ------------------------------------------------------------------------------------


def _act(module: nn.Module) -> object:
    """The module's activation: ``act_fn`` in most families, ``activation_fn`` in Phi-3, GLM-4 and Llama 4."""
    act = getattr(module, "act_fn", None)
    return getattr(module, "activation_fn", None) if act is None else act


def _activation_reason(act: object, kind: str) -> str | None:
    """Why Liger's ``kind`` op does not compute ``act(gate) * up`` (``act(x)`` for relu_squared), or None."""
    name = type(act).__name__
    if kind == "swiglu":
        if name in _SILU:
            return None
        wanted = "silu/swish"
    elif kind == "relu_squared":
        if name == "ReLUSquaredActivation":
            return None
        wanted = "relu(x)**2 (relu2)"
    else:
        if name in _GELU_TANH or (isinstance(act, nn.GELU) and act.approximate == "tanh"):
            return None
        wanted = "a tanh-approximated GELU (gelu_pytorch_tanh)"
    return f"activation {name}, while Liger's {kind} computes {wanted}"


def gated_mlp_class(base: type, kind: str, multipliers: bool = False) -> type:
    """Liger subclass of a gate/up/down MLP (LLaMA, Mistral, Qwen, Gemma, Granite, OLMo2, ...).

    ``in_place=True``: the two projections' outputs belong to this forward alone, so the op may
    reuse their memory for its gradients. ``multipliers``: Falcon-H1's MLP scales the gate
    projection by ``gate_multiplier`` and the output by ``down_multiplier``.
    """
    op = getattr(F, f"liger_{kind}")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        reason = self._liger_fallback or tensor_reason(x)
        if reason is not None:
            warn_fallback(type(self).__name__, reason)
            return base.forward(self, x)
        if multipliers:
            gated = op(self.gate_proj(x) * self.gate_multiplier, self.up_proj(x), in_place=True)
            return self.down_proj(gated) * self.down_multiplier
        return self.down_proj(op(self.gate_proj(x), self.up_proj(x), in_place=True))

    def structural(module: nn.Module) -> str | None:
        return _activation_reason(_act(module), kind)

    key = ("mlp", kind) + (("multipliers",) if multipliers else ())
    return _subclass(base, key, kind, {"forward": forward, "_liger_structural": structural})


def phi3_mlp_class(base: type) -> type:
    """Liger subclass of an MLP whose gate and up projections are one ``gate_up_proj`` (Phi-3, GLM-4).

    The projection's output goes to `liger_fused_gate_up_swiglu` whole: no copies of its halves,
    and its gradient is written over it (``in_place``: this forward owns that buffer). A
    tensor-parallel DTensor output (the fused op has no sharding) takes the halves to
    `liger_swiglu`, which runs on shards.
    """
    fused = F.liger_fused_gate_up_swiglu

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        reason = self._liger_fallback or tensor_reason(hidden_states)
        if reason is not None:
            warn_fallback(type(self).__name__, reason)
            return base.forward(self, hidden_states)
        gate_up = self.gate_up_proj(hidden_states)
        if type(gate_up) is torch.Tensor:
            return self.down_proj(fused(gate_up, True))
        gate, up = gate_up.chunk(2, dim=-1)
        # gate and up are views of one buffer: no in-place gradient trick.
        return self.down_proj(F.liger_swiglu(gate, up))

    def structural(module: nn.Module) -> str | None:
        return _activation_reason(_act(module), "swiglu")

    return _subclass(base, ("phi3_mlp",), "swiglu", {"forward": forward, "_liger_structural": structural})


def relu_squared_mlp_class(base: type) -> type:
    """Liger subclass of Nemotron's ungated MLP, ``down_proj(relu(up_proj(x)) ** 2)``."""
    op = F.liger_relu_squared

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        reason = self._liger_fallback or tensor_reason(x)
        if reason is not None:
            warn_fallback(type(self).__name__, reason)
            return base.forward(self, x)
        return self.down_proj(op(self.up_proj(x)))

    def structural(module: nn.Module) -> str | None:
        return _activation_reason(_act(module), "relu_squared")

    return _subclass(base, ("relu_squared_mlp",), "relu_squared", {"forward": forward, "_liger_structural": structural})


# The fused MoE ops for the SwiGLU experts (on by default; LIGER_FUSED_MOE=0 turns them off).
FUSED_MOE_ENV = "LIGER_FUSED_MOE"
# transformers' experts implementation (``experts_implementation``) the fused MoE ops stand in for:
# its default, grouped GEMMs over the tokens sorted by expert, the computation the fused ops run.
# An explicit "grouped_mm" takes the fused op too: transformers 5.x keeps no record of who chose it
# (a model's __init__ writes the default into ``config._experts_implementation_internal``, where the
# config, from_pretrained and set_experts_implementation put an explicit choice), so a built model
# given it and one left unset hold the same state (tests/hf/test_moe_experts.py,
# test_explicit_grouped_mm_cannot_be_told_from_the_default). Hence transformers' own
# test_eager_matches_batched_and_grouped_inference_*, which wraps its grouped_mm function in a mock
# and asserts the mock ran, fails patched wherever a vendor backend serves the fused op: it checks
# which internal function ran, not the result (tests/upstream/README.md). Every other choice (eager,
# batched_mm, a hub or user kernel) runs the stock forward, which dispatches on it.
FUSED_STANDS_IN_FOR = "grouped_mm"


def experts_choice_reason(module: nn.Module) -> str | None:
    """Why ``module``'s ``experts_implementation`` keeps it off the fused op (the stock forward
    honours the choice), or None: unset, transformers' default, or an experts class that does not
    dispatch on it (transformers' ``use_experts_implementation`` gives the module its ``config``)."""
    if not getattr(type(module), "_liger_dispatches", False):
        return None
    choice = getattr(getattr(module, "config", None), "_experts_implementation", None)
    if choice is None or choice == FUSED_STANDS_IN_FOR:
        return None
    return f"experts_implementation={choice!r}"


def fused_moe_reason(module: nn.Module, hidden_states: torch.Tensor, op: str = "fused_moe") -> str | None:
    """Why ``module``'s call cannot go to the fused MoE op ``op`` (fused_moe, or
    fused_moe_clamped_swiglu for GPT-OSS's and DeepSeek-V4's experts; then the stock forward runs),
    or None. Read per call: the flag, the experts implementation chosen, and whether a vendor
    backend serves the op on this device (its PyTorch reference runs every expert on every token).
    Traceable by torch.compile without a graph break (`registry.vendor_serves` is a constant there)."""
    if os.environ.get(FUSED_MOE_ENV, "1").strip() == "0":
        return f"{FUSED_MOE_ENV}=0"
    if getattr(module, "_is_expert_parallel", False):
        return "expert parallelism (ids of other ranks' experts)"
    choice = experts_choice_reason(module)
    if choice is not None:
        return choice
    if hidden_states.ndim != 2 or hidden_states.dtype != module.gate_up_proj.dtype:
        return "hidden states other than (tokens, hidden) rows in the experts' dtype"
    if not registry.vendor_serves(op, hidden_states.device.type):
        return f"no vendor backend serves {op} here"
    return None


def _dispatches_on_choice(base: type) -> bool:
    """Whether the stock experts class's forward is transformers' ``use_experts_implementation``
    wrapper (it reads ``config._experts_implementation`` on every call)."""
    code = getattr(stock_class(base).forward, "__code__", None)
    return code is not None and "_experts_implementation" in code.co_names


def _experts_layout_reason(experts: nn.Module | None, transposed: bool = False) -> str | None:
    """Why ``experts`` does not hold bias-free SwiGLU expert weights ``gate_up_proj`` (E, 2I, H) and
    ``down_proj`` (E, H, I), or None; ``transposed``: stored (E, H, 2I) and (E, I, H) (Llama 4)."""
    gate_up, down = getattr(experts, "gate_up_proj", None), getattr(experts, "down_proj", None)
    fits = isinstance(gate_up, torch.Tensor) and isinstance(down, torch.Tensor) and gate_up.ndim == down.ndim == 3
    if fits and transposed:
        gate_up, down = gate_up.transpose(1, 2), down.transpose(1, 2)
    if not (
        fits
        and gate_up.shape[1] == 2 * down.shape[2]
        and gate_up.shape[2] == down.shape[1]
        and getattr(experts, "gate_up_proj_bias", None) is None
    ):
        layout = "(experts, hidden, 2 * intermediate)" if transposed else "(experts, 2 * intermediate, hidden)"
        return f"experts weights laid out other than {layout} without bias"
    return None


def experts_class(base: type) -> type:
    """Liger subclass of the fused-weight SwiGLU MoE experts (Mixtral, Qwen3-MoE, DeepSeek, ...,
    transformers 5.x).

    The experts hold ``gate_up_proj`` (experts, 2 * intermediate, hidden) and ``down_proj``
    (experts, hidden, intermediate). They run the fused_moe op (grouped GEMMs over the tokens
    sorted by expert) where `fused_moe_reason` allows; everywhere else the stock forward, which
    runs the ``experts_implementation`` the model was given (see `FUSED_STANDS_IN_FOR`).
    """
    fused = F.liger_fused_moe

    def forward(
        self, hidden_states: torch.Tensor, top_k_index: torch.Tensor, top_k_weights: torch.Tensor
    ) -> torch.Tensor:
        reason = self._liger_fallback or tensor_reason(hidden_states)
        if reason is None and top_k_weights.shape != top_k_index.shape:
            # transformers 5.0's HunYuan-MoE hands over one weight per expert, which its stock experts
            # implementation reads its own way.
            reason = "routing weights other than one per selected expert"
        if reason is not None:
            warn_fallback(type(self).__name__, reason)
            return base.forward(self, hidden_states, top_k_index, top_k_weights)
        if fused_moe_reason(self, hidden_states) is not None:
            return base.forward(self, hidden_states, top_k_index, top_k_weights)
        return fused(hidden_states, self.gate_up_proj, self.down_proj, top_k_index, top_k_weights)

    def structural(module: nn.Module) -> str | None:
        return _experts_layout_reason(module) or _activation_reason(_act(module), "swiglu")

    namespace = {"forward": forward, "_liger_structural": structural, "_liger_dispatches": _dispatches_on_choice(base)}
    return _subclass(base, ("experts", "swiglu"), "swiglu", namespace)


@dataclass(frozen=True)
class ClampedExperts:
    """How a family's clamped-SwiGLU experts hold their weights and pick their activation
    (fused_moe_clamped_swiglu's arguments). ``transposed``: weights stored ``(E, H, 2I)`` and
    ``(E, I, H)``; ``biased``: ``gate_up_proj_bias`` and ``down_proj_bias``; ``interleaved``: gate
    and up columns alternate (else the two halves, ``chunk(2)``); ``alpha_attr``: the module
    attribute holding the sigmoid's slope (None: the module's ``act_fn`` must be SiLU, slope 1)."""

    transposed: bool
    biased: bool
    interleaved: bool
    up_offset: float
    alpha_attr: str | None

    @property
    def activation_from_act_fn(self) -> bool:
        """The activation follows the config's ``hidden_act`` (only SiLU fits), not fixed by the model."""
        return self.alpha_attr is None


# GPT-OSS: ``min(gate, limit) * sigmoid(alpha * .) * (clamp(up, +-limit) + 1)``, interleaved, biased.
GPT_OSS_EXPERTS = ClampedExperts(transposed=True, biased=True, interleaved=True, up_offset=1.0, alpha_attr="alpha")
# DeepSeek-V4: ``silu(min(gate, limit)) * clamp(up, +-limit)`` on the halves, no biases.
DEEPSEEK_V4_EXPERTS = ClampedExperts(transposed=False, biased=False, interleaved=False, up_offset=0.0, alpha_attr=None)
CLAMPED_EXPERTS = {"gpt_oss": GPT_OSS_EXPERTS, "deepseek_v4": DEEPSEEK_V4_EXPERTS}
_SILU_CLASSES = ("SiLU", "SiLUActivation")


def clamped_experts_class(base: type, layout: str = "gpt_oss") -> type:
    """Liger subclass of experts with a clamped SwiGLU, laid out as `CLAMPED_EXPERTS` [``layout``]
    says: GPT-OSS's ``GptOssExperts`` (``gate_up_proj`` (E, H, 2I) with gate and up columns
    interleaved, ``down_proj`` (E, I, H), a bias on each, ``min(gate, limit) * sigmoid(alpha * .) *
    (clamp(up, +-limit) + 1)``) or DeepSeek-V4's ``DeepseekV4Experts`` (``(E, 2I, H)`` halves, no
    biases, ``silu(min(gate, limit)) * clamp(up, +-limit)``). The routed experts run the
    fused_moe_clamped_swiglu op on the weights in place (transposed views for GPT-OSS) where
    `fused_moe_reason` allows (a vendor backend serves it, LIGER_FUSED_MOE is not 0, the
    experts implementation is transformers' default); otherwise the stock forward, which runs the
    ``experts_implementation`` the model was given."""
    if layout not in CLAMPED_EXPERTS:
        raise ValueError(f"clamped_experts_class: layout must be one of {', '.join(CLAMPED_EXPERTS)}; got {layout!r}")
    spec = CLAMPED_EXPERTS[layout]
    fused = F.liger_fused_moe_clamped_swiglu

    # The stock forward's own parameter names (GPT-OSS: router_indices, routing_weights), so a
    # caller passing them by keyword reaches the same arguments.
    stock_signature = inspect.signature(stock_class(base).forward)

    def forward(self, *args, **kwargs) -> torch.Tensor:
        bound = stock_signature.bind(self, *args, **kwargs)
        bound.apply_defaults()
        hidden_states, top_k_index, top_k_weights = list(bound.arguments.values())[1:4]
        reason = self._liger_fallback or tensor_reason(hidden_states)
        if reason is not None:
            warn_fallback(type(self).__name__, reason)
            return base.forward(self, *args, **kwargs)
        if fused_moe_reason(self, hidden_states, "fused_moe_clamped_swiglu") is not None:
            return base.forward(self, *args, **kwargs)
        gate_up, down = self.gate_up_proj, self.down_proj
        if spec.transposed:
            gate_up, down = gate_up.transpose(1, 2), down.transpose(1, 2)
        gate_up_bias, down_bias = (self.gate_up_proj_bias, self.down_proj_bias) if spec.biased else (None, None)
        alpha = 1.0 if spec.alpha_attr is None else float(getattr(self, spec.alpha_attr))
        return fused(
            hidden_states, gate_up, down, top_k_index, top_k_weights, gate_up_bias, down_bias,
            float(self.limit), alpha, spec.up_offset, spec.interleaved,
        )  # fmt: skip

    def structural(module: nn.Module) -> str | None:
        gate_up, down = getattr(module, "gate_up_proj", None), getattr(module, "down_proj", None)
        biases = (getattr(module, "gate_up_proj_bias", None), getattr(module, "down_proj_bias", None))
        if not (isinstance(gate_up, torch.Tensor) and isinstance(down, torch.Tensor)):
            return "experts without gate_up_proj and down_proj"
        if spec.biased and not all(isinstance(b, torch.Tensor) for b in biases):
            return "experts without gate_up_proj_bias and down_proj_bias"
        if not spec.biased and any(b is not None for b in biases):
            return f"experts with biases, which {layout}'s layout has not"
        if gate_up.ndim == 3 and spec.transposed:
            n_experts, hidden, two_i = gate_up.shape
        elif gate_up.ndim == 3:
            n_experts, two_i, hidden = gate_up.shape
        else:
            n_experts, two_i, hidden = 0, 0, 0
        want_down = (n_experts, two_i // 2, hidden) if spec.transposed else (n_experts, hidden, two_i // 2)
        shapes = [tuple(down.shape)]
        wants = [want_down]
        if spec.biased:
            shapes += [tuple(b.shape) for b in biases]
            wants += [(n_experts, two_i), (n_experts, hidden)]
        if not two_i or two_i % 2 or shapes != wants:
            layout_text = (
                "(experts, hidden, 2 * intermediate)" if spec.transposed else "(experts, 2 * intermediate, hidden)"
            )
            return f"experts weights laid out other than {layout}'s {layout_text}"
        if not isinstance(getattr(module, "limit", None), (int, float)):
            return "experts without a numeric swiglu limit"
        if spec.alpha_attr is not None and not isinstance(getattr(module, spec.alpha_attr, None), (int, float)):
            return f"experts without a numeric {spec.alpha_attr}"
        act = type(getattr(module, "act_fn", None)).__name__
        if spec.activation_from_act_fn and act not in _SILU_CLASSES:
            return f"experts whose activation (act_fn) is {act}, not SiLU"
        return None

    namespace = {
        "forward": forward,
        "_liger_structural": structural,
        "_liger_clamped": spec,
        "_liger_dispatches": _dispatches_on_choice(base),
    }
    return _subclass(base, ("clamped_experts", layout), "clamped_swiglu", namespace)


def scaled_input_moe_class(base: type) -> type:
    """Liger subclass of a MoE block whose router scales each token *before* its experts (Llama 4's
    ``Llama4TextMoe``: ``sigmoid`` of the top-k router logits, 0 elsewhere).

    Stock runs every expert on every token (the unselected ones on zero rows: E times the
    routed FLOPs). Here only the selected ones run: the token rows scaled by their scores, one
    row per selection, go through the fused_moe op with unit routing weights, the experts'
    weights read in place as transposed views (they are stored ``(E, H, 2I)`` and ``(E, I, H)``).
    Where `fused_moe_reason` says no, the stock block runs. The router and the shared expert stay
    the block's own modules; scores and gradients reach the router as in stock.
    """
    fused = F.liger_fused_moe

    def forward(self, hidden_states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        reason = self._liger_fallback or tensor_reason(hidden_states)
        if reason is not None:
            warn_fallback(type(self).__name__, reason)
            return base.forward(self, hidden_states)
        experts = self.experts
        x = hidden_states.reshape(-1, self.hidden_dim)
        # x: (tokens, hidden) in the dtype of the rows the fused op would take.
        if fused_moe_reason(experts, x) is not None:
            return base.forward(self, hidden_states)
        router_scores, router_logits = self.router(x)
        # The router's own selection (the same top-k of the same logits), its scores gathered so
        # their gradient reaches the router through its sigmoid.
        index = torch.topk(router_logits, self.router.top_k, dim=1).indices
        scores = router_scores.gather(1, index)
        n_tokens, top_k = index.shape
        rows = (x[:, None, :] * scores[:, :, None]).reshape(n_tokens * top_k, -1)
        ids = index.reshape(-1, 1)
        ones = torch.ones(ids.shape, dtype=rows.dtype, device=rows.device)
        gate_up, down = experts.gate_up_proj.transpose(1, 2), experts.down_proj.transpose(1, 2)
        routed = fused(rows, gate_up, down, ids, ones)
        if top_k > 1:
            routed = routed.view(n_tokens, top_k, -1).sum(dim=1)
        out = self.shared_expert(x)
        out.add_(routed)
        return out, router_logits

    def structural(module: nn.Module) -> str | None:
        experts, router = getattr(module, "experts", None), getattr(module, "router", None)
        llama4_router = type(router).__name__ == "Llama4Router" and isinstance(getattr(router, "top_k", None), int)
        return (
            _experts_layout_reason(experts, transposed=True)
            or (None if llama4_router else "a router other than Llama 4's sigmoid top-k (Llama4Router)")
            or _activation_reason(_act(experts), "swiglu")
        )

    return _subclass(base, ("scaled_input_moe",), "swiglu", {"forward": forward, "_liger_structural": structural})


# -- LayerNorm ---------------------------------------------------------------------------------


def _layer_norm_structural(norm: nn.Module) -> str | None:
    shape = getattr(norm, "normalized_shape", None)
    if not isinstance(shape, tuple) or len(shape) != 1:
        return "normalized over more than the last dimension (Liger's layer_norm normalises the last one)"
    if not isinstance(getattr(norm, "eps", None), (int, float)):
        return "no numeric eps"
    return None


def layer_norm_class(base: type, offset: float = 0.0) -> type:
    """The Liger subclass of a LayerNorm class (``torch.nn.LayerNorm`` in vision towers, Nemotron's ``LayerNorm1P``).

    ``offset``: added to the weight (Nemotron's LayerNorm1P stores ``weight - 1``).
    """
    op = F.liger_layer_norm

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        weight, bias = self.weight, self.bias
        params = [t for t in (weight, bias) if t is not None]
        reason = self._liger_fallback or tensor_reason(input, *params)
        if reason is None and input.shape[-1] != self.normalized_shape[0]:
            reason = "an input whose last dimension is not the normalized one"
        if reason is not None:
            warn_fallback(type(self).__name__, reason)
            return base.forward(self, input)
        if weight is not None and offset:
            weight = weight + offset
        # Contiguous in, contiguous out, as torch's layer_norm returns: vision towers .view() the result.
        return op(input.contiguous(), weight, bias, self.eps)

    return _subclass(
        base,
        ("layer_norm", offset),
        "layer_norm",
        {"forward": forward, "_liger_structural": _layer_norm_structural},
    )


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


def liger_half_table_rope(
    q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, unsqueeze_dim: int = 1
) -> tuple[torch.Tensor, torch.Tensor]:
    """Liger's RoPE as GPT-OSS's ``apply_rotary_pos_emb``, whose tables hold one value per rotated pair.

    GPT-OSS computes ``(x1 * cos - x2 * sin, x2 * cos + x1 * sin)`` on the halves ``x1, x2``:
    rotate-half RoPE with the tables repeated over both halves.
    """
    return F.liger_rotary_pos_emb(q, k, cos.repeat(1, 1, 2), sin.repeat(1, 1, 2), unsqueeze_dim=unsqueeze_dim)


def _rotate_pairs(
    q: torch.Tensor, k: torch.Tensor, cos_angles: torch.Tensor, sin_angles: torch.Tensor, unsqueeze_dim: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The first ``2 * cos_angles.shape[-1]`` dims of q and k rotated as interleaved pairs
    ``(x[2j], x[2j + 1])`` by angle j, the rest passed through: Llama 4's complex-form rotation,
    the llama4_rope op with ``freqs_cis = cos + i sin`` on q and k viewed as ``(batch, seq, heads, dim)``."""
    rot = 2 * cos_angles.shape[-1]
    freqs_cis = torch.complex(cos_angles.float(), sin_angles.float())

    def seq_major(t: torch.Tensor) -> torch.Tensor:  # (batch, heads, seq, dim) <-> (batch, seq, heads, dim)
        return t.transpose(1, 2) if unsqueeze_dim == 1 else t

    q_rot, k_rot = F.liger_llama4_rope(seq_major(q[..., :rot]), seq_major(k[..., :rot]), freqs_cis)
    q_rot, k_rot = seq_major(q_rot), seq_major(k_rot)
    if rot == q.shape[-1]:
        return q_rot, k_rot
    return torch.cat([q_rot, q[..., rot:]], dim=-1), torch.cat([k_rot, k[..., rot:]], dim=-1)


def liger_interleaved_rope(
    q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, unsqueeze_dim: int = 1
) -> tuple[torch.Tensor, torch.Tensor]:
    """Liger's RoPE as GLM-4's ``apply_rotary_pos_emb``: the first ``cos.shape[-1]`` dims rotate
    as interleaved pairs ``(x[2j], x[2j + 1])`` by angle j of the tables' first half (which GLM-4
    repeats pairwise), the rest pass through."""
    half = cos.shape[-1] // 2
    return _rotate_pairs(q, k, cos[..., :half], sin[..., :half], unsqueeze_dim)


def liger_paired_tables_rope(
    q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, unsqueeze_dim: int = 1
) -> tuple[torch.Tensor, torch.Tensor]:
    """Liger's RoPE as GLM-4V's ``apply_rotary_pos_emb`` in the transformers releases whose rotary
    embedding repeats each angle pairwise: the first ``cos.shape[-1]`` dims rotate as interleaved
    pairs ``(x[2j], x[2j + 1])`` by the angle in columns 2j and 2j + 1, the rest pass through."""
    return _rotate_pairs(q, k, cos[..., 0::2], sin[..., 0::2], unsqueeze_dim)


def interleaved_tables(stock: Callable) -> str | None:
    """How a stock interleaved-pairs ``apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1)``
    reads its tables, found by running it once on a tiny float64 input (transformers changed
    GLM-4V's between releases): ``"interleaved"`` (angle j in column j of the first half, as
    GLM-4), ``"paired_tables"`` (angle j in columns 2j and 2j + 1), None (neither, or it fails)."""
    a, b = 0.3, 1.1
    # On the CPU whatever the default device (a model built under ``torch.device("meta")`` has no values).
    paired = torch.tensor([a, a, b, b], dtype=torch.float64, device="cpu")
    x = torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=torch.float64, device="cpu")

    def rotated(angles: tuple[float, float]) -> torch.Tensor:
        t = torch.tensor(angles, dtype=torch.float64, device="cpu")
        even, odd = x[0::2], x[1::2]
        return torch.stack((even * t.cos() - odd * t.sin(), odd * t.cos() + even * t.sin()), -1).flatten()

    try:
        q, _ = stock(x.view(1, 1, 1, 4), x.view(1, 1, 1, 4), paired.cos()[None, None], paired.sin()[None, None])
        q = q.reshape(4)
    except Exception:  # noqa: BLE001 - an unknown function: the caller keeps the stock one
        return None
    for kind, angles in (("paired_tables", (a, b)), ("interleaved", (a, a))):
        if torch.allclose(q, rotated(angles), rtol=1e-9, atol=1e-12):
            return kind
    return None


def _deinterleave(x: torch.Tensor) -> torch.Tensor:
    """``cat(x[..., 0::2], x[..., 1::2])``: interleaved pairs to halves (a copy)."""
    return x.unflatten(-1, (-1, 2)).transpose(-1, -2).flatten(-2)


def liger_deinterleaved_rope(
    q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, unsqueeze_dim: int = 1
) -> tuple[torch.Tensor, torch.Tensor]:
    """Liger's RoPE as DeepSeek-V3's ``apply_rotary_pos_emb_interleave``: pairs ``(x[2j], x[2j + 1])``
    rotated by angle j of the tables' first half, the result laid out as halves (the rotated
    even elements, then the odd ones): rotate-half RoPE of the de-interleaved input."""
    half = cos.shape[-1] // 2
    cos = torch.cat((cos[..., :half], cos[..., :half]), dim=-1)
    sin = torch.cat((sin[..., :half], sin[..., :half]), dim=-1)
    return F.liger_rotary_pos_emb(_deinterleave(q), _deinterleave(k), cos, sin, unsqueeze_dim=unsqueeze_dim)


# What each kind of family RoPE rotates: "full" every dim (LLaMA), "partial" the first
# cos.shape[-1] dims (Phi-3, Nemotron, Qwen3-Next), "half_table" every dim from half-width tables
# (GPT-OSS), "interleaved" the first cos.shape[-1] dims as interleaved pairs (GLM-4; GLM-4V, whose
# tables `interleaved_tables` tells apart), "deinterleaved" every dim as interleaved pairs, written
# out as halves (DeepSeek-V3).
_ROPE_KERNELS = {
    "full": liger_rope,
    "partial": liger_partial_rope,
    "half_table": liger_half_table_rope,
    "interleaved": liger_interleaved_rope,
    "paired_tables": liger_paired_tables_rope,
    "deinterleaved": liger_deinterleaved_rope,
}


def _rope_reason(q, k, cos, sin, unsqueeze_dim, kind: str) -> str | None:
    """Why Liger's RoPE does not fit these arguments (the stock function then runs), or None."""
    reason = tensor_reason(q, k, cos, sin)
    if reason is not None:
        return reason
    if unsqueeze_dim not in (1, 2) or q.ndim != 4 or k.ndim != 4 or cos.ndim != 3 or sin.shape != cos.shape:
        return "q/k/cos/sin laid out other than (batch, heads, seq, head_dim) and (batch, seq, rotary_dim)"
    seq = 3 - unsqueeze_dim
    head_dim = q.shape[-1]
    rot = cos.shape[-1] * (2 if kind == "half_table" else 1)
    if (
        k.shape[-1] != head_dim
        or rot % 2
        or (rot > head_dim if kind in ("partial", "interleaved", "paired_tables") else rot != head_dim)
        or k.shape[0] != q.shape[0]
        or not (q.shape[seq] == k.shape[seq] == cos.shape[1])
        or cos.shape[0] not in (1, q.shape[0])
    ):
        return "a rotary dimension or shape Liger's RoPE does not take"
    return None


def _complex_rope_reason(q, k, freqs_cis) -> str | None:
    """Why Liger's complex-form RoPE (llama4_rope) does not fit these arguments, q and k
    ``(batch, seq, heads, head_dim)``, or None."""
    reason = tensor_reason(q, k)
    if reason is not None:
        return reason
    try:
        if llama4_rope_takes(q, k, freqs_cis):
            return None
    except (AttributeError, TypeError):
        pass
    return "q/k/freqs_cis other than (batch, seq, heads, head_dim) and complex64 (batch or 1, seq, head_dim / 2)"


def _mrope_reason(q, k, cos, sin, mrope_section, unsqueeze_dim) -> str | None:
    """Why Liger's M-RoPE does not fit these arguments, or None."""
    reason = tensor_reason(q, k, cos, sin)
    if reason is not None:
        return reason
    if unsqueeze_dim not in (1, 2) or q.ndim != 4 or k.ndim != 4 or cos.ndim != 4 or sin.shape != cos.shape:
        return "q/k laid out other than (batch, heads, seq, head_dim), cos/sin other than (3, batch, seq, head_dim)"
    seq = 3 - unsqueeze_dim
    head_dim = q.shape[-1]
    section = list(mrope_section) if isinstance(mrope_section, (list, tuple)) else None
    if (
        section is None
        or len(section) != 3
        or sum(section) != head_dim // 2
        or cos.shape[0] != 3
        or cos.shape[-1] != head_dim
        or k.shape[-1] != head_dim
        or k.shape[0] != q.shape[0]
        or not (q.shape[seq] == k.shape[seq] == cos.shape[2])
        or cos.shape[1] not in (1, q.shape[0])
    ):
        return "an mrope_section or shape Liger's M-RoPE does not take"
    return None


def kernels_function(layer: nn.Module) -> Callable:
    """The function a ``kernels`` function layer (``use_kernel_forward_from_hub`` on a function) wraps: its
    class's forward calls it from its closure."""
    for cell in getattr(type(layer).forward, "__closure__", None) or ():
        if inspect.isfunction(cell.cell_contents):
            return cell.cell_contents
    raise TypeError(f"{type(layer).__qualname__}: not a kernels function layer (no function in its forward)")


# (stock function, kind) -> its Liger replacement, so repeated patches give the same function.
_ROPES: dict[tuple[Callable, str], Callable] = {}


def rope_function(stock: Callable, kind: str) -> Callable:
    """The Liger replacement for one family's RoPE function: Liger's kernel where it fits, else ``stock``.

    ``kind``: "full", "partial" or "half_table" for an ``apply_rotary_pos_emb(q, k, cos, sin,
    unsqueeze_dim=1)`` (see ``_ROPE_KERNELS``); "mrope" for Qwen2-VL's
    ``apply_multimodal_rotary_pos_emb(q, k, cos, sin, mrope_section, unsqueeze_dim=1)``
    (transformers releases that merge the M-RoPE sections inside the function); "complex" for
    an ``apply_rotary_emb(xq, xk, freqs_cis)`` that rotates interleaved pairs by complex
    ``freqs_cis`` ``(batch, seq, head_dim / 2)`` with q and k ``(batch, seq, heads, head_dim)``
    (Llama 4), "complex_heads_major" for one with q and k ``(batch, heads, seq, head_dim)``
    (DeepSeek-V2); "one_tensor" for Gemma 4's ``apply_rotary_pos_emb(x, cos, sin, unsqueeze_dim=1)``,
    which rotates q and k in separate calls (the rope op with a key of no heads).
    """
    kinds = (*_ROPE_KERNELS, "mrope", "complex", "complex_heads_major", "one_tensor")
    if kind not in kinds:
        raise ValueError(f"kind must be one of {kinds}; got {kind!r}")
    stock = getattr(stock, "_liger_stock", stock)
    if isinstance(stock, nn.Module):
        # With Hugging Face's `kernels` installed, transformers' decorated RoPE function is a `kernels`
        # function layer (an nn.Module instance whose forward calls the function): patch the function itself.
        stock = kernels_function(stock)
    fn = _ROPES.get((stock, kind))
    if fn is not None:
        return fn
    where = f"{stock.__module__}.{stock.__qualname__}"

    if kind == "mrope":
        mrope = F.liger_qwen2vl_mrope

        def liger_fn(q, k, cos, sin, mrope_section, unsqueeze_dim=1):
            reason = _mrope_reason(q, k, cos, sin, mrope_section, unsqueeze_dim)
            if reason is not None:
                warn_fallback(where, reason)
                return stock(q, k, cos, sin, mrope_section, unsqueeze_dim=unsqueeze_dim)
            return mrope(q, k, cos, sin, list(mrope_section), unsqueeze_dim)

    elif kind == "one_tensor":
        rope = F.liger_rotary_pos_emb

        def liger_fn(x, cos, sin, unsqueeze_dim=1):
            # The op rotates q and k: x as q, a key of no heads (nothing to rotate, no gradient).
            no_keys = x.detach().narrow(unsqueeze_dim, 0, 0) if x.ndim == 4 and unsqueeze_dim in (1, 2) else x
            reason = _rope_reason(x, no_keys, cos, sin, unsqueeze_dim, "full")
            if reason is not None:
                warn_fallback(where, reason)
                return stock(x, cos, sin, unsqueeze_dim=unsqueeze_dim)
            return rope(x, no_keys, cos, sin, unsqueeze_dim=unsqueeze_dim)[0]

    elif kind in ("complex", "complex_heads_major"):
        complex_rope = F.liger_llama4_rope
        heads_major = kind == "complex_heads_major"

        def liger_fn(xq, xk, freqs_cis):
            # The op's layout is (batch, seq, heads, head_dim): heads-major q/k go in as transposed views.
            q, k = (xq.transpose(1, 2), xk.transpose(1, 2)) if heads_major and xq.ndim == xk.ndim == 4 else (xq, xk)
            reason = _complex_rope_reason(q, k, freqs_cis)
            if reason is not None:
                warn_fallback(where, reason)
                return stock(xq, xk, freqs_cis)
            q_out, k_out = complex_rope(q, k, freqs_cis)
            return (q_out.transpose(1, 2), k_out.transpose(1, 2)) if heads_major else (q_out, k_out)

    else:
        tables = kind
        if kind == "interleaved":
            # GLM-4V's function read its tables as GLM-4's does, then (a later transformers) pairwise.
            tables = interleaved_tables(stock)
        kernel = _ROPE_KERNELS.get(tables)

        def liger_fn(q, k, cos, sin, unsqueeze_dim=1):
            if unsqueeze_dim == 0 and cos.ndim == 2 and q.ndim == 4:
                # Pixtral's (positions, dim) tables against (batch, heads, positions, dim): the same broadcast.
                cos, sin, unsqueeze_dim = cos[None], sin[None], 1
            reason = _rope_reason(q, k, cos, sin, unsqueeze_dim, kind)
            if reason is None and kernel is None:
                reason = "its interleaved RoPE reads the tables in a way Liger's does not know"
            if reason is not None:
                warn_fallback(where, reason)
                return stock(q, k, cos, sin, unsqueeze_dim=unsqueeze_dim)
            return kernel(q, k, cos, sin, unsqueeze_dim)

        if kind == "deinterleaved":
            # DeepSeek-V3's function takes (and ignores) position_ids before unsqueeze_dim.
            rope_fn = liger_fn

            def liger_fn(q, k, cos, sin, position_ids=None, unsqueeze_dim=1):
                return rope_fn(q, k, cos, sin, unsqueeze_dim)

    # A module-level name derived from the stock function's, so attention modules holding it
    # (rotary_fn) pickle, and a patched process finds it under the same name when unpickling.
    name = "liger_rope__" + where.replace(".", "_") + ("" if kind == "full" else f"__{kind}")
    carry_stock_metadata(liger_fn, stock, keep_name=True)
    liger_fn.__name__ = liger_fn.__qualname__ = name
    liger_fn._liger_stock = stock
    globals()[name] = liger_fn
    _ROPES[(stock, kind)] = liger_fn
    return liger_fn


# -- decoder layers --------------------------------------------------------------------------------

# Layer pattern -> the norm that takes ``residual + attention output``: "pre_norm" (LLaMA, Mistral,
# Qwen2/3, Gemma): ``residual + attn -> post_attention_layernorm -> mlp``; "sandwich" (Gemma 2/3):
# ``residual + post_attention_layernorm(attn) -> pre_feedforward_layernorm -> mlp -> post_feedforward_layernorm``.
LAYER_PATTERNS = {"pre_norm": "post_attention_layernorm", "sandwich": "pre_feedforward_layernorm"}

# (stock forward, pattern) -> its Liger replacement, so repeated patches give the same function.
_LAYER_FORWARDS: dict[tuple[Callable, str], Callable] = {}


def _fused_norm_reason(norm: nn.Module, name: str) -> str | None:
    """Why ``norm`` cannot be computed inside fused_add_rms_norm (None: it can). Cheap: it runs on every call."""
    if getattr(type(norm), "_liger_norm_options", None) is None:
        return (
            f"its {name} is the stock {type(norm).__name__} (a model built before the patch without model=, "
            "or patched with rms_norm=False), whose arithmetic fused_add_rms_norm does not certify"
        )
    return norm._liger_fallback


def _add_norm(
    norm: nn.Module, x: torch.Tensor, residual: torch.Tensor, where: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(norm(residual + x), residual + x)``: one fused_add_rms_norm call where the kernel fits, else stock."""
    weight = None if _weightless(norm) else norm.weight
    reason = tensor_reason(x, residual, *(() if weight is None else (weight,)))
    if reason is None and (x.shape != residual.shape or (weight is not None and weight.shape[0] != x.shape[-1])):
        reason = "a residual or norm weight whose shape does not match the attention output's"
    if reason is None and x.dtype != residual.dtype:
        # Stock's ``residual + x`` promotes (a float32 residual stream under bf16 autocast); the op returns its
        # first input's dtype, so the wider one goes first. Neither wider (bf16 + fp16): stock arithmetic.
        wider = torch.promote_types(x.dtype, residual.dtype)
        if wider == residual.dtype:
            x, residual = residual, x
        elif wider != x.dtype:
            reason = f"a {residual.dtype} residual with a {x.dtype} attention output (their sum has a third dtype)"
    if reason is not None:
        warn_fallback(where, reason)
        summed = residual + x
        return norm(summed), summed
    offset, casting_mode = type(norm)._liger_norm_options
    # in_place: this norm's output feeds the MLP alone, so its incoming gradient belongs to the op (as for the
    # pre-norms in rms_norm_class); the residual stream's gradient is another tensor.
    return F.liger_fused_add_rms_norm(x, residual, weight, _eps(norm), offset, casting_mode, True)


def _as_layer_forward(cls: type, forward: Callable) -> Callable:
    """``forward`` as transformers installs a forward on a decoder layer class ``cls``.

    transformers (5.x releases with ``GradientCheckpointingLayer.__init_subclass__``) wraps each layer
    class's ``forward`` for gradient checkpointing when the class is defined; a function set on the
    class afterwards would run without it. A throwaway subclass holding ``forward`` gets whatever
    wrapping the installed transformers gives (none where it checkpoints in ``__call__``).
    """
    probe = type(cls.__name__, (cls,), {"forward": forward, "__module__": cls.__module__})
    return probe.__dict__["forward"]


def decoder_layer_forward(cls: type, stock: Callable, pattern: str) -> Callable:
    """The Liger ``forward`` of the decoder layer class ``cls``, whose stock ``forward`` is ``stock``, of ``pattern``.

    It computes what ``stock`` does, with the residual add before the MLP's norm and that norm in one
    ``fused_add_rms_norm`` call (``LAYER_PATTERNS`` names the norm). Every argument after
    ``hidden_states`` goes to ``self.self_attn`` by name, as the stock forwards of these patterns pass
    them. The add that ends the layer stays a torch add: fusing it into the next layer's
    ``input_layernorm`` would hand the residual from layer to layer, which changes the layers' call
    signature the model's forward (and gradient checkpointing) relies on.

    Where that norm is not Liger's RMSNorm (whose arithmetic is what the op computes), the stock forward
    runs and warns once (`LigerStockFallbackWarning`); where the tensors do not fit the kernel, the
    add and the norm run as stock does.
    """
    if pattern not in LAYER_PATTERNS:
        raise ValueError(f"pattern must be one of {tuple(LAYER_PATTERNS)}; got {pattern!r}")
    stock = getattr(stock, "_liger_stock", stock)
    fn = _LAYER_FORWARDS.get((cls, stock, pattern))
    if fn is not None:
        return fn
    where = f"{cls.__module__}.{cls.__qualname__}.forward"
    norm_name = LAYER_PATTERNS[pattern]
    sandwich = pattern == "sandwich"
    # The stock forward's named parameters after (self, hidden_states), so positional arguments keep their
    # meaning, and its defaults, which the stock forward hands to the attention module explicitly.
    params = [p for p in list(inspect.signature(stock).parameters.values())[2:] if p.kind is p.POSITIONAL_OR_KEYWORD]
    names = [p.name for p in params]
    defaults = {p.name: p.default for p in params if p.default is not p.empty}

    def forward(self, hidden_states: torch.Tensor, *args, **kwargs) -> torch.Tensor:
        norm = getattr(self, norm_name)
        reason = _fused_norm_reason(norm, norm_name)
        if reason is not None:
            warn_fallback(where, reason)
            return stock(self, hidden_states, *args, **kwargs)
        attention_kwargs = {**defaults, **dict(zip(names, args)), **kwargs}
        residual = hidden_states
        hidden_states, _ = self.self_attn(hidden_states=self.input_layernorm(hidden_states), **attention_kwargs)
        if sandwich:
            hidden_states = self.post_attention_layernorm(hidden_states)
        hidden_states, residual = _add_norm(norm, hidden_states, residual, where)
        hidden_states = self.mlp(hidden_states)
        if sandwich:
            hidden_states = self.post_feedforward_layernorm(hidden_states)
        return residual + hidden_states

    # Stock metadata (the residual add and the norm run as one fused_add_rms_norm call).
    carry_stock_metadata(forward, stock)
    forward._liger_stock = stock
    forward._liger_forward = True
    forward = carry_stock_metadata(_as_layer_forward(cls, forward), stock)
    forward._liger_stock = stock  # on the wrapper too, whatever transformers' wrapping copies
    forward._liger_forward = True
    _LAYER_FORWARDS[(cls, stock, pattern)] = forward
    return forward
