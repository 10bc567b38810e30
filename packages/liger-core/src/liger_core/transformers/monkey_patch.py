"""``apply_liger_kernel_to_<family>()``: swap a transformers model family's layers for Liger's.

A patch replaces, in the family's ``modeling_<family>`` module, the RMSNorm and MLP classes
by their Liger subclasses (`liger_core.transformers.layers`), ``apply_rotary_pos_emb`` by the
Liger RoPE (in front of the stock function), and wraps ``<Family>ForCausalLM.forward`` in the
fused-linear-cross-entropy forward (`liger_core.transformers.causal_lm`). Each of them runs the
stock computation wherever Liger's does not fit, so every config the stock classes build still
builds and runs. Models built afterwards use Liger's layers. Given
``model=``, the patch also converts that live model's modules (its norms, MLPs and experts)
and its forward.

Every patch is recorded; `revert_liger_kernel_patches` restores the stock objects.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from types import MethodType

import torch
from torch import nn

from liger_core.transformers import layers
from liger_core.transformers.causal_lm import LogitsSpec, make_forward

MIN_TRANSFORMERS = "5.0.0"


@dataclass(frozen=True)
class Norm:
    offset: float = 0.0
    casting_mode: str = "llama"
    # Only where the class serves solely as a pre-norm (see layers.rms_norm_class).
    in_place: bool = True


@dataclass(frozen=True)
class Family:
    """What one model family's patch swaps."""

    module: str  # transformers.models.<module>.modeling_<module>
    causal_lm: str
    norms: tuple[str, ...]
    norm: Norm
    mlps: tuple[str, ...] = ()  # gate/up/down MLP classes
    mlp_kind: str = "swiglu"  # "swiglu", "geglu" or "phi3" (fused gate_up_proj)
    experts: tuple[str, ...] = ()  # fused-weight MoE experts classes
    partial_rope: bool = False  # Phi-3 rotates only part of the head dim
    logits: LogitsSpec = field(default_factory=LogitsSpec)

    @property
    def modeling(self) -> str:
        return f"transformers.models.{self.module}.modeling_{self.module}"


_GEMMA_NORM = Norm(offset=1.0, casting_mode="gemma", in_place=False)

FAMILIES: dict[str, Family] = {
    "llama": Family("llama", "LlamaForCausalLM", ("LlamaRMSNorm",), Norm(), ("LlamaMLP",)),
    "mistral": Family("mistral", "MistralForCausalLM", ("MistralRMSNorm",), Norm(), ("MistralMLP",)),
    "mixtral": Family(
        "mixtral",
        "MixtralForCausalLM",
        ("MixtralRMSNorm",),
        Norm(),
        experts=("MixtralExperts",),
        logits=LogitsSpec(moe_module="transformers.models.mixtral.modeling_mixtral"),
    ),
    "qwen2": Family("qwen2", "Qwen2ForCausalLM", ("Qwen2RMSNorm",), Norm(), ("Qwen2MLP",)),
    # Qwen3's norm class is also its q/k norm, whose output feeds RoPE: no in-place gradient.
    "qwen3": Family("qwen3", "Qwen3ForCausalLM", ("Qwen3RMSNorm",), Norm(in_place=False), ("Qwen3MLP",)),
    "qwen3_moe": Family(
        "qwen3_moe",
        "Qwen3MoeForCausalLM",
        ("Qwen3MoeRMSNorm",),
        Norm(in_place=False),
        ("Qwen3MoeMLP",),
        experts=("Qwen3MoeExperts",),
        logits=LogitsSpec(moe_module="transformers.models.qwen3_moe.modeling_qwen3_moe"),
    ),
    "gemma": Family("gemma", "GemmaForCausalLM", ("GemmaRMSNorm",), _GEMMA_NORM, ("GemmaMLP",), "geglu"),
    "gemma2": Family(
        "gemma2",
        "Gemma2ForCausalLM",
        ("Gemma2RMSNorm",),
        _GEMMA_NORM,
        ("Gemma2MLP",),
        "geglu",
        logits=LogitsSpec(softcap_attr="final_logit_softcapping"),
    ),
    "gemma3_text": Family(
        "gemma3",
        "Gemma3ForCausalLM",
        ("Gemma3RMSNorm",),
        _GEMMA_NORM,
        ("Gemma3MLP",),
        "geglu",
        logits=LogitsSpec(softcap_attr="final_logit_softcapping"),
    ),
    "phi3": Family("phi3", "Phi3ForCausalLM", ("Phi3RMSNorm",), Norm(), ("Phi3MLP",), "phi3", partial_rope=True),
    "granite": Family(
        "granite",
        "GraniteForCausalLM",
        ("GraniteRMSNorm",),
        Norm(),
        ("GraniteMLP",),
        logits=LogitsSpec(scale_attr="logits_scaling"),
    ),
    # OLMo2 scales in float32 and casts last (Gemma's casting, no offset); its norms are post-norms.
    "olmo2": Family("olmo2", "Olmo2ForCausalLM", ("Olmo2RMSNorm",), Norm(0.0, "gemma", False), ("Olmo2MLP",)),
}

# (object, attribute) -> the stock value, first patch wins; for revert_liger_kernel_patches.
_SAVED: dict[tuple[int, str], tuple[object, str, object]] = {}


def _set(obj: object, name: str, value: object) -> None:
    key = (id(obj), name)
    if key not in _SAVED:
        _SAVED[key] = (obj, name, obj.__dict__.get(name, _MISSING) if hasattr(obj, "__dict__") else _MISSING)
    setattr(obj, name, value)


_MISSING = object()


def _stock_value(obj: object, name: str) -> object:
    """``obj.name`` as it was before any patch."""
    saved = _SAVED.get((id(obj), name))
    value = getattr(obj, name, None) if saved is None or saved[2] is _MISSING else saved[2]
    # An inherited attribute (nothing saved of its own) reads the patched value: Liger's records the stock one.
    return getattr(value, "_liger_stock", value)


def revert_liger_kernel_patches() -> None:
    """Restore every class attribute and module function a patch replaced (live models stay patched)."""
    for obj, name, old in reversed(list(_SAVED.values())):
        if old is _MISSING:
            delattr(obj, name)
        else:
            setattr(obj, name, old)
    _SAVED.clear()


def _check_transformers() -> None:
    try:
        import transformers
        from packaging.version import Version
    except ImportError as e:
        raise ImportError(
            f'liger_core.transformers needs transformers >= {MIN_TRANSFORMERS}: pip install "liger-core[transformers]"'
        ) from e

    if Version(transformers.__version__) < Version(MIN_TRANSFORMERS):
        raise ImportError(
            f"liger_core.transformers needs transformers >= {MIN_TRANSFORMERS}; found {transformers.__version__} "
            f'(pip install -U "transformers>={MIN_TRANSFORMERS}")'
        )


def _apply(
    model_type: str,
    rope: bool,
    cross_entropy: bool,
    fused_linear_cross_entropy: bool,
    rms_norm: bool,
    mlp: bool,
    model: nn.Module | None,
) -> None:
    if cross_entropy and fused_linear_cross_entropy:
        raise ValueError(
            "cross_entropy=True and fused_linear_cross_entropy=True are exclusive: fused linear cross-entropy "
            "already computes the loss without logits; pick one"
        )
    _check_transformers()
    fam = FAMILIES[model_type]
    mod = importlib.import_module(fam.modeling)

    # Liger class for each stock class to swap, built first so a missing op fails before any change.
    swaps: dict[type, type] = {}
    if rms_norm:
        for name in fam.norms:
            stock = layers.stock_class(getattr(mod, name))
            swaps[stock] = layers.rms_norm_class(stock, fam.norm.offset, fam.norm.casting_mode, fam.norm.in_place)
    if mlp:
        for name in fam.mlps:
            stock = layers.stock_class(getattr(mod, name))
            swaps[stock] = (
                layers.phi3_mlp_class(stock) if fam.mlp_kind == "phi3" else layers.gated_mlp_class(stock, fam.mlp_kind)
            )
        for name in fam.experts:
            stock = layers.stock_class(getattr(mod, name))
            swaps[stock] = layers.experts_class(stock)
    causal_lm = getattr(mod, fam.causal_lm)
    stock_rope = _stock_value(mod, "apply_rotary_pos_emb")
    rope_fn = None
    if rope:
        layers.require_op("liger_rotary_pos_emb")
        rope_fn = layers.rope_function(stock_rope, fam.partial_rope)
    if cross_entropy:
        layers.require_op("liger_cross_entropy")
    if fused_linear_cross_entropy:
        layers.require_op("liger_fused_linear_cross_entropy")
        forward = make_forward(fam.logits, _stock_value(causal_lm, "forward"))

    for stock, liger in swaps.items():
        _set(mod, stock.__name__, liger)
    if rope_fn is not None:
        _set(mod, "apply_rotary_pos_emb", rope_fn)
    if cross_entropy:
        _patch_cross_entropy()
    if fused_linear_cross_entropy:
        _set(causal_lm, "forward", forward)

    if model is not None:
        if not isinstance(model, nn.Module):
            raise TypeError(f"model must be a transformers PreTrainedModel; got {type(model).__name__}")
        for module in model.modules():
            liger = swaps.get(layers.stock_class(type(module)))
            if liger is not None and type(module) is not liger:
                module.__class__ = liger
                layers.prepare_live(module)  # what the Liger __init__ decides for a module built after the patch
            if rope_fn is not None and module.__dict__.get("rotary_fn") is stock_rope:
                # transformers 5.0 attention modules keep a reference to the RoPE function (unused by
                # forward); point it at Liger's, or pickling the model finds two functions by one name.
                module.rotary_fn = rope_fn
        if fused_linear_cross_entropy and isinstance(model, layers.stock_class(causal_lm)):
            # The class is patched above; an instance may carry its own bound forward too.
            if "forward" in model.__dict__:
                model.forward = MethodType(forward, model)


def _patch_cross_entropy() -> None:
    """Route transformers' loss functions through Liger's cross-entropy (logits still materialised).

    Replaces ``transformers.loss.loss_utils.fixed_cross_entropy`` (what ``ForCausalLMLoss`` calls),
    not torch's ``cross_entropy``, so nothing outside transformers' losses changes.
    """
    from transformers.loss import loss_utils

    liger_ce = layers.require_op("liger_cross_entropy")

    def fixed_cross_entropy(source, target, num_items_in_batch=None, ignore_index: int = -100, **kwargs):
        reduction = "sum" if num_items_in_batch is not None else "mean"
        loss = liger_ce(source, target, ignore_index=ignore_index, reduction=reduction)
        if reduction == "sum":
            if torch.is_tensor(num_items_in_batch):
                num_items_in_batch = num_items_in_batch.to(loss.device)
            loss = loss / num_items_in_batch
        return loss

    _set(loss_utils, "fixed_cross_entropy", fixed_cross_entropy)


def _make_apply(model_type: str, mlp_flag: str) -> Callable:
    fam = FAMILIES[model_type]
    pretty = fam.causal_lm.removesuffix("ForCausalLM")

    def apply(
        rope: bool = True,
        cross_entropy: bool = False,
        fused_linear_cross_entropy: bool = True,
        rms_norm: bool = True,
        mlp: bool = True,
        model: nn.Module | None = None,
    ) -> None:
        _apply(model_type, rope, cross_entropy, fused_linear_cross_entropy, rms_norm, mlp, model)

    # The public signature names the MLP flag as Liger Kernel users know it (swiglu= or geglu=).
    params = [p.replace(name=mlp_flag) if p.name == "mlp" else p for p in inspect.signature(apply).parameters.values()]

    def wrapper(*args, **kwargs):
        bound = wrapper.__signature__.bind(*args, **kwargs)
        bound.apply_defaults()
        a = bound.arguments
        return apply(
            a["rope"], a["cross_entropy"], a["fused_linear_cross_entropy"], a["rms_norm"], a[mlp_flag], a["model"]
        )

    wrapper.__signature__ = inspect.Signature(params, return_annotation=None)
    wrapper.__name__ = wrapper.__qualname__ = f"apply_liger_kernel_to_{model_type}"
    wrapper.__module__ = __name__
    wrapper.__doc__ = f"""Use Liger's kernels in transformers' {pretty} models (model_type {model_type!r}).

    Args:
        rope: swap ``apply_rotary_pos_emb`` for Liger's RoPE.
        cross_entropy: compute the stock loss with Liger's cross-entropy (logits still materialised).
        fused_linear_cross_entropy: {fam.causal_lm}.forward skips the logits under training with
            labels and uses fused linear cross-entropy. Exclusive with ``cross_entropy``.
        rms_norm: swap {", ".join(fam.norms)} for Liger's RMSNorm.
        {mlp_flag}: swap {", ".join(fam.mlps + fam.experts)} for Liger's {mlp_flag}.
        model: a model already built: its modules and forward are converted too.

    Every config the stock classes serve still builds and runs: a module whose config or inputs Liger's
    kernel does not fit (another activation, float64, the meta device) runs the stock computation and
    warns once per reason (``LigerStockFallbackWarning``).
    """
    return wrapper


apply_liger_kernel_to_llama = _make_apply("llama", "swiglu")
apply_liger_kernel_to_mistral = _make_apply("mistral", "swiglu")
apply_liger_kernel_to_mixtral = _make_apply("mixtral", "swiglu")
apply_liger_kernel_to_qwen2 = _make_apply("qwen2", "swiglu")
apply_liger_kernel_to_qwen3 = _make_apply("qwen3", "swiglu")
apply_liger_kernel_to_qwen3_moe = _make_apply("qwen3_moe", "swiglu")
apply_liger_kernel_to_gemma = _make_apply("gemma", "geglu")
apply_liger_kernel_to_gemma2 = _make_apply("gemma2", "geglu")
apply_liger_kernel_to_gemma3_text = _make_apply("gemma3_text", "geglu")
apply_liger_kernel_to_phi3 = _make_apply("phi3", "swiglu")
apply_liger_kernel_to_granite = _make_apply("granite", "swiglu")
apply_liger_kernel_to_olmo2 = _make_apply("olmo2", "swiglu")

MODEL_TYPE_TO_APPLY_LIGER_FN: dict[str, Callable] = {
    "llama": apply_liger_kernel_to_llama,
    "mistral": apply_liger_kernel_to_mistral,
    "mixtral": apply_liger_kernel_to_mixtral,
    "qwen2": apply_liger_kernel_to_qwen2,
    "qwen3": apply_liger_kernel_to_qwen3,
    "qwen3_moe": apply_liger_kernel_to_qwen3_moe,
    "gemma": apply_liger_kernel_to_gemma,
    "gemma2": apply_liger_kernel_to_gemma2,
    "gemma3_text": apply_liger_kernel_to_gemma3_text,
    "phi3": apply_liger_kernel_to_phi3,
    "granite": apply_liger_kernel_to_granite,
    "olmo2": apply_liger_kernel_to_olmo2,
}


def _apply_liger_kernel_to_instance(model: nn.Module, **kwargs) -> None:
    """Patch a live model by its ``config.model_type`` (the keyword arguments its patch takes)."""
    model_type = getattr(getattr(model, "config", None), "model_type", None)
    fn = MODEL_TYPE_TO_APPLY_LIGER_FN.get(model_type)
    if fn is None:
        raise ValueError(f"no Liger patch for model_type {model_type!r}; supported: {sorted(FAMILIES)}")
    params = inspect.signature(fn).parameters
    fn(model=model, **{k: v for k, v in kwargs.items() if k in params and k != "model"})
