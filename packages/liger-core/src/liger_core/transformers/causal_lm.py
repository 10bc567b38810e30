"""The causal-LM forward the patch installs: fused linear cross-entropy instead of logits under training.

It wraps the family's stock ``<Family>ForCausalLM.forward`` and takes over one case only: a
model in training mode given labels (or ``shift_labels``) and keeping every position
(``logits_to_keep=0``). There the base model runs exactly as the stock forward calls it, and
its final hidden states go straight into ``liger_fused_linear_cross_entropy`` with the LM
head's weight, so the ``(tokens, vocab)`` logits are never materialised; ``logits`` is then
None. ``skip_logits=True`` asks for that path, ``skip_logits=False`` refuses it.

Everything else (evaluation, generation, no labels, other ``logits_to_keep`` values, a
customised loss or LM head, arguments the fused path does not know) is the stock forward
itself, called with the caller's arguments: a transformers feature added there reaches the
patched model unchanged.

The fused loss matches the stock one: labels shifted left by one (or ``shift_labels`` as
given), mean over non-ignored tokens, or the sum divided by ``num_items_in_batch`` when the
trainer passes it (gradient accumulation). Gemma 2/3/4's final-logit soft-capping, Granite's
logit scaling and Falcon-H1's and MuseGlimmer's logit multipliers are applied inside the fused
loss where the stock forward applies them (`_stock_logits`: some multimodal classes do not
soft-cap in some transformers releases); MoE families add the router's load-balancing loss as
their stock forward does.

Where a sharding wrapper owns the LM head's weight (FSDP2 ``fully_shard(lm_head)``, FSDP1 with the
head its own unit, DeepSpeed ZeRO-3), the fused loss runs inside the head's own call, so the
wrapper gathers the weight and routes its gradient back to the shard (see `sharding`). A head
whose class is not exactly ``nn.Linear`` (a PEFT LoRA head, a quantized layer) or a custom
``loss_function`` runs the stock forward and warns once with the reason.

The same forward serves the multimodal ``...ForConditionalGeneration`` classes: the base model
gets the image inputs (``pixel_values``, ``image_grid_thw``, ...) exactly as the stock forward
hands them over, read from the stock forward's own source (see `_model_call`).
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import textwrap
import typing
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as torch_F

from liger_core import functional as F
from liger_core.transformers import layers
from liger_core.transformers.layers import tensor_reason, warn_fallback
from liger_core.transformers.sharding import call_head, stock_head_class, unwrap_head


@dataclass(frozen=True)
class LogitsSpec:
    """How a family turns final hidden states into logits, beyond ``lm_head``.

    The attributes are read from the model's text config (``config.get_text_config()``: the
    config itself for a text model, ``text_config`` for a multimodal one).
    """

    softcap_attr: str | None = None  # logits = cap * tanh(logits / cap)
    scale_attr: str | None = None  # logits = logits / scale
    multiplier_attr: str | None = None  # logits = logits * multiplier (before any soft-capping)
    moe_module: str | None = None  # module holding load_balancing_loss_func (MoE families)


# The stock forwards' named parameters (transformers 5.0 to 5.23) that they hand to the base
# model unchanged; the fused path does the same. A stock forward naming a parameter outside
# these and the head's own is delegated whenever that parameter is given.
_MODEL_ARGS = frozenset(
    (
        "input_ids",
        "attention_mask",
        "position_ids",
        "past_key_values",
        "inputs_embeds",
        "use_cache",
        "cache_position",
        "output_attentions",
        "output_hidden_states",
        "output_router_logits",
    )
)
_HEAD_ARGS = frozenset(("labels", "logits_to_keep"))


def _model_call(stock_forward: Callable) -> tuple[frozenset[str], dict[str, object]] | None:
    """What the stock forward hands its base model: (its parameters passed on as ``name=name``,
    constant keywords such as ``return_dict=True``), read from its source; None where that
    cannot be read or the call is not of that plain form (the static ``_MODEL_ARGS`` then hold).

    Multimodal forwards pass their image arguments on this way; some pass ``labels`` or
    ``logits_to_keep`` too (Gemma 3/4 mask image tokens with them).
    """
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(stock_forward)))
    except (OSError, TypeError, SyntaxError):
        return None
    calls = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "model"
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "self"
    ]
    if len(calls) != 1 or calls[0].args:
        return None
    passed: set[str] = set()
    constants: dict[str, object] = {}
    for kw in calls[0].keywords:
        if kw.arg is None:  # **kwargs
            continue
        if isinstance(kw.value, ast.Name) and kw.value.id == kw.arg:
            passed.add(kw.arg)
        elif isinstance(kw.value, ast.Constant):
            constants[kw.arg] = kw.value.value
        else:
            return None
    return frozenset(passed), constants


def _stock_logits(spec: LogitsSpec, stock_forward: Callable) -> LogitsSpec:
    """``spec`` without the logit transforms this stock forward does not apply.

    Whether a class applies them changes between transformers releases (Gemma 3's and PaliGemma's
    ``...ForConditionalGeneration`` soft-cap in some, not in others, whatever the text config says),
    so an attribute counts only where the stock forward's source names it. Where the source cannot
    be read, the family's declaration holds.
    """
    try:
        source = inspect.getsource(stock_forward)
    except (OSError, TypeError):
        return spec
    unused = {
        name: None
        for name in ("softcap_attr", "scale_attr", "multiplier_attr")
        if getattr(spec, name) is not None and getattr(spec, name) not in source
    }
    return dataclasses.replace(spec, **unused)


def _slicer() -> Callable[[torch.Tensor, int | torch.Tensor], torch.Tensor]:
    """transformers' own slicing of the final hidden states by ``logits_to_keep``."""
    try:
        # Newer transformers: int, 1-D positions, 2-D (batch, k) positions, 2-D boolean mask.
        from transformers.modeling_utils import slice_logits_to_keep

        return slice_logits_to_keep
    except ImportError:
        pass

    def slice_like_stock(hidden_states: torch.Tensor, logits_to_keep: int | torch.Tensor) -> torch.Tensor:
        # transformers releases before that helper: the two lines of their stock forwards.
        slice_indices = slice(-logits_to_keep, None) if isinstance(logits_to_keep, int) else logits_to_keep
        return hidden_states[:, slice_indices, :]

    return slice_like_stock


def _keeps_all(logits_to_keep: object) -> bool:
    return isinstance(logits_to_keep, int) and logits_to_keep == 0


def _head_reason(model: nn.Module, causal_lm_loss: Callable) -> str | None:
    """Why the fused loss would not equal this model's stock loss, or None."""
    inner, wrapper = unwrap_head(model.lm_head)
    cls = stock_head_class(inner)
    # Exactly nn.Linear: a wrapped head (a PEFT LoRA layer, a quantized layer) computes more than weight @ h.
    if cls is not nn.Linear:
        return f"lm_head is a {cls.__qualname__} ({cls.__module__}), not a torch.nn.Linear"
    if model.loss_function is not causal_lm_loss:
        return "the model's loss_function is not transformers' ForCausalLMLoss"
    weight = inner.weight
    if wrapper is not None:
        # Sharded outside the head's call; `call_head` runs the loss inside it, where the wrapper has gathered it.
        # Its dtype is the shard's (a mixed-precision FSDP casts it between kernel dtypes).
        if weight.dtype not in (torch.float32, torch.bfloat16, torch.float16):
            return f"lm_head's weight is {weight.dtype} (Liger's kernels take float32, bfloat16, float16)"
        return None
    if _is_dtensor(weight):
        return "lm_head's weight is a DTensor (tensor parallelism): the fused loss takes a local full matrix"
    if tensor_reason(weight) is not None or weight.shape != (inner.out_features, inner.in_features):
        # Offloaded or partitioned by a wrapper not recognised here: no full matrix to read.
        return "lm_head's weight is not a full float32/bfloat16/float16 matrix on a device"
    return None


def _is_dtensor(t: torch.Tensor) -> bool:
    return type(t).__name__ == "DTensor" and type(t).__module__.startswith("torch.distributed")


def _gathered_weight(head: nn.Module) -> torch.Tensor:
    """The head's weight inside its own call, where the sharding wrapper has gathered it."""
    weight = head.weight
    if (
        _is_dtensor(weight)
        or tensor_reason(weight) is not None
        or weight.shape != (head.out_features, head.in_features)
    ):
        raise RuntimeError(
            f"lm_head's weight inside its own call is {type(weight).__name__} of shape {tuple(weight.shape)}, "
            f"dtype {weight.dtype}; expected the gathered ({head.out_features}, {head.in_features}) matrix: the "
            "sharding wrapper did not unshard it in its forward pre-hook (pass skip_logits=False for the stock loss)"
        )
    return weight


def _loss(
    self, spec: LogitsSpec, hidden_states: torch.Tensor, labels: torch.Tensor | None, kwargs: dict
) -> torch.Tensor:
    """The stock causal-LM loss of ``lm_head(hidden_states)``, without the logits.

    With a sharded head (FSDP1/FSDP2 unit of its own, DeepSpeed ZeRO-3) it runs inside the
    head's own call, so the wrapper gathers the weight for it and handles its gradient.
    """
    inner, wrapper = unwrap_head(self.lm_head)
    if wrapper is None:
        return _head_loss(self, spec, inner, inner.weight, hidden_states, labels, kwargs)
    return call_head(
        self.lm_head,
        inner,
        lambda hidden: _head_loss(self, spec, inner, _gathered_weight(inner), hidden, labels, kwargs),
        hidden_states,
    )


def _head_loss(
    self,
    spec: LogitsSpec,
    head: nn.Module,
    weight: torch.Tensor,
    hidden_states: torch.Tensor,
    labels: torch.Tensor | None,
    kwargs: dict,
) -> torch.Tensor:
    config = self.config.get_text_config()
    softcap = getattr(config, spec.softcap_attr, None) if spec.softcap_attr else None
    scale = getattr(config, spec.scale_attr, None) if spec.scale_attr else None
    multiplier = getattr(config, spec.multiplier_attr, None) if spec.multiplier_attr else None
    ignore_index = kwargs.get("ignore_index", -100)
    shift_labels = kwargs.get("shift_labels")
    if shift_labels is None:
        # As the stock loss: pad one ignored position and shift, so hidden states need no slicing copy.
        shift_labels = torch_F.pad(labels, (0, 1), value=ignore_index)[..., 1:]
    hidden = hidden_states.reshape(-1, hidden_states.shape[-1])
    if scale is not None:
        hidden = hidden / scale  # (h / s) @ W^T == (h @ W^T) / s
    if multiplier is not None:
        hidden = hidden * multiplier  # (h * m) @ W^T == (h @ W^T) * m
    bias = head.bias
    if bias is not None and scale is not None:
        bias = bias / scale
    if bias is not None and multiplier is not None:
        bias = bias * multiplier
    num_items = kwargs.get("num_items_in_batch")
    loss = F.liger_fused_linear_cross_entropy(
        hidden,
        weight,
        shift_labels.reshape(-1).to(hidden.device),
        bias=bias,
        ignore_index=ignore_index,
        reduction="mean" if num_items is None else "sum",
        softcap=softcap,
    )
    if num_items is not None:
        loss = loss / (num_items.to(loss.device) if torch.is_tensor(num_items) else num_items)
    return loss


def _output_class(signature: inspect.Signature, spec: LogitsSpec) -> type:
    """The stock forward's output class, from its return annotation (``tuple | XCausalLMOutputWithPast``)."""
    from transformers.modeling_outputs import CausalLMOutputWithPast, MoeCausalLMOutputWithPast
    from transformers.utils import ModelOutput

    annotation = signature.return_annotation
    for candidate in (annotation, *typing.get_args(annotation)):
        if isinstance(candidate, type) and issubclass(candidate, ModelOutput):
            return candidate
    return CausalLMOutputWithPast if spec.moe_module is None else MoeCausalLMOutputWithPast


def _moe_attr(model: nn.Module, name: str) -> object:
    """A router setting as the stock forward reads it: on the model, else on its text config
    (``num_experts`` is ``num_local_experts`` in some configs)."""
    if hasattr(model, name):
        return getattr(model, name)
    config = model.config.get_text_config()
    if name == "num_experts" and not hasattr(config, name):
        name = "num_local_experts"
    return getattr(config, name)


# True while a patched causal LM's base model runs on positions it makes itself: 0..n-1 in every row, so no
# packed sequences (see `find_packed_sequence_indices`).
_OWN_POSITIONS = False


def _makes_own_positions(model, kwargs: dict) -> bool:
    """Whether the base model will number the positions itself: a text-only call without an attention mask,
    position ids or a cache."""
    given = ("attention_mask", "position_ids", "past_key_values", "cache_position", "inputs_embeds")
    return (
        all(kwargs.get(name) is None for name in given)
        and getattr(model.config, "vision_config", None) is None
        and getattr(model.config, "audio_config", None) is None
    )


def packed_sequence_check(stock: Callable) -> Callable:
    """transformers' ``find_packed_sequence_indices`` that answers "none" without reading the positions when the
    patched causal LM's base model numbered them itself.

    With position ids and no attention mask (a training batch), transformers looks for packed sequences in the
    positions. Eagerly it finds none in 0..n-1 and lets SDPA run with ``is_causal``; under torch.compile it cannot
    read the values, assumes packing and builds a (batch, 1, seq, seq) mask, and attention runs masked: on an H200
    LLaMA-3.2-1B's attention took 87 ms a step compiled against 32 ms eager. The answer is known without reading.
    """

    def find_packed_sequence_indices(position_ids: torch.Tensor) -> torch.Tensor | None:
        if _OWN_POSITIONS:
            return None
        return stock(position_ids)

    return layers.carry_stock_metadata(find_packed_sequence_indices, stock)


def make_forward(spec: LogitsSpec, stock_forward: Callable) -> Callable:
    """The Liger causal-LM forward around one family's ``stock_forward`` (the stock class's ``forward``)."""
    from transformers.loss.loss_utils import ForCausalLMLoss
    from transformers.utils import ModelOutput
    from transformers.utils.generic import can_return_tuple

    stock_forward = getattr(stock_forward, "_liger_stock", stock_forward)
    spec = _stock_logits(spec, stock_forward)
    signature = inspect.signature(stock_forward)
    params = list(signature.parameters.values())[1:]  # without self
    positional = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    named = {p.name: p.default for p in params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}
    call = _model_call(stock_forward)
    if call is None:
        passed, constants = frozenset(n for n in named if n in _MODEL_ARGS), {}
    else:
        passed, constants = call
    # The named arguments the base model gets (with the stock defaults), and those the fused path
    # does not know: a call giving one of these is delegated to the stock forward.
    model_args = {name: default for name, default in named.items() if name in passed}
    unknown = {name: default for name, default in named.items() if name not in passed and name not in _HEAD_ARGS}
    slice_hidden = _slicer()
    output_class = _output_class(signature, spec)
    output_fields = [f.name for f in dataclasses.fields(output_class)]
    balancing_loss = (
        importlib.import_module(spec.moe_module).load_balancing_loss_func if spec.moe_module is not None else None
    )

    @can_return_tuple  # pops return_dict and turns the output into a tuple as the stock forwards do
    def fused(self, **kwargs) -> ModelOutput:
        labels = kwargs.get("labels") if "labels" in passed else kwargs.pop("labels", None)
        logits_to_keep = (
            kwargs.get("logits_to_keep", 0) if "logits_to_keep" in passed else kwargs.pop("logits_to_keep", 0)
        )
        if "output_router_logits" in model_args and kwargs.get("output_router_logits") is None:
            kwargs["output_router_logits"] = self.config.get_text_config().output_router_logits
        # The base model gets what the stock forward gives it: its named arguments and every extra keyword.
        global _OWN_POSITIONS
        _OWN_POSITIONS = _makes_own_positions(self, kwargs)
        try:
            outputs = self.model(**{**model_args, **kwargs, **constants})
        finally:
            _OWN_POSITIONS = False
        hidden_states = outputs.last_hidden_state
        if not _keeps_all(logits_to_keep):
            hidden_states = slice_hidden(hidden_states, logits_to_keep)
        result = {name: getattr(outputs, name, None) for name in output_fields if name not in ("loss", "logits")}
        result["loss"] = _loss(self, spec, hidden_states, labels, kwargs)
        if balancing_loss is not None and kwargs.get("output_router_logits"):
            aux = balancing_loss(
                outputs.router_logits,
                _moe_attr(self, "num_experts"),
                _moe_attr(self, "num_experts_per_tok"),
                kwargs.get("attention_mask"),
            )
            if "aux_loss" in output_fields:
                result["aux_loss"] = aux
            coef = _moe_attr(self, "router_aux_loss_coef")
            result["loss"] = result["loss"] + coef * aux.to(result["loss"].device)
        return output_class(**result)

    def forward(self, *args, skip_logits: bool | None = None, **kwargs):
        if skip_logits is False:
            return stock_forward(self, *args, **kwargs)
        if len(args) > len(positional) or any(name in kwargs for name in positional[: len(args)]):
            return stock_forward(self, *args, **kwargs)  # a call the stock forward refuses; let it say so
        given = {**dict(zip(positional, args)), **kwargs}
        has_targets = given.get("labels") is not None or given.get("shift_labels") is not None
        if skip_logits is None:
            fuse = (
                self.training
                and has_targets
                and _keeps_all(given.get("logits_to_keep", 0))
                and all(given.get(name, default) is default for name, default in unknown.items())
            )
            if fuse:
                reason = _head_reason(self, ForCausalLMLoss)
                if reason is not None:
                    # A training call the fused loss would take but for the head or loss: say why logits appear.
                    warn_fallback(f"{type(self).__name__}'s fused linear cross-entropy", reason)
                    fuse = False
            return fused(self, **given) if fuse else stock_forward(self, *args, **kwargs)
        if not has_targets:
            raise ValueError("skip_logits=True needs labels (or shift_labels): there is nothing else to return")
        extra = [name for name, default in unknown.items() if given.get(name, default) is not default]
        reason = _head_reason(self, ForCausalLMLoss) or (
            f"the fused path does not know the argument(s) {extra}" if extra else None
        )
        if reason is not None:
            raise ValueError(f"skip_logits=True: the loss cannot be computed without logits here: {reason}")
        return fused(self, **given)

    # The stock signature plus skip_logits: generate() and the trainers inspect it for logits_to_keep etc.
    extra = inspect.Parameter("skip_logits", inspect.Parameter.KEYWORD_ONLY, default=None, annotation="bool | None")
    kinds = [p.kind for p in signature.parameters.values()]
    at = kinds.index(inspect.Parameter.VAR_KEYWORD) if inspect.Parameter.VAR_KEYWORD in kinds else len(kinds)
    new_params = list(signature.parameters.values())
    new_params.insert(at, extra)
    # The stock metadata (name, module, annotations, __wrapped__...), then the signature with skip_logits.
    layers.carry_stock_metadata(forward, stock_forward)
    forward.__signature__ = signature.replace(parameters=new_params)
    forward._liger_forward = True
    forward._liger_stock = stock_forward
    return forward
