"""The `fused_linear_cross_entropy` op: the lm_head projection and cross-entropy without the
logits, declared once."""

from __future__ import annotations

import inspect

import torch
import torch.nn.functional as F

from liger_core.bench import spec as B
from liger_core.op import Checks, Op, bad, on_other_device, sample, set_item
from liger_core.ops import _losses as L
from liger_core.ops import _samples as S
from liger_core.ops import cross_entropy as _ce
from liger_core.ops._losses import reduced as _losses_reduced

ACCUM_DTYPES = (None, torch.float32, torch.bfloat16, torch.float16)
REDUCTIONS = L.CE_REDUCTIONS


def fused_linear_cross_entropy(
    input: torch.Tensor,
    weight: torch.Tensor,
    target: torch.Tensor,
    bias: torch.Tensor | None = None,
    ce_weight: torch.Tensor | None = None,
    ignore_index: int = -100,
    lse_square_scale: float = 0.0,
    label_smoothing: float = 0.0,
    reduction: str = "mean",
    softcap: float | None = None,
    return_z_loss: bool = False,
    accum_dtype: torch.dtype | None = None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """The lm_head projection followed by cross-entropy, without materialising all logits.

    ``logits = input @ weight.T (+ bias)``, then exactly `cross_entropy` (see there for the
    loss, z-loss, softcap, label smoothing, class weights ``ce_weight``, ``ignore_index`` and
    the reductions). Backends compute the logits a chunk of tokens at a time, so peak memory
    stays far below ``tokens x vocab``.

    Args:
        input: ``(tokens, hidden)``, float32, bfloat16 or float16 (never modified).
        weight: ``(vocab, hidden)``; another float dtype is cast to ``input.dtype`` for the
            matmul, as autocast would.
        target: ``(tokens,)`` integer class indices in ``[0, vocab)`` or ``ignore_index``.
        bias: ``(vocab,)`` or None.
        ce_weight: ``(vocab,)`` class weights (constant), or None.
        ignore_index, lse_square_scale, label_smoothing, reduction, softcap, return_z_loss:
            as in `cross_entropy`.
        accum_dtype: dtype in which ``grad_weight`` and ``grad_bias`` are accumulated over the
            token chunks: None (their own dtype) or float32 / bfloat16 / float16. Precision
            only; the results come back in ``weight.dtype`` / ``bias.dtype``.

    Returns:
        The loss in float32 (scalar, or ``(tokens,)`` for ``"none"``), or ``(loss, z_loss)``.
        Backward gives ``grad_input``, ``grad_weight`` and ``grad_bias`` in their tensors' dtypes.
        The logits are computed in ``input.dtype`` (tensor cores) and the cross-entropy in float32.
        With no target to count (every target ``ignore_index``, or no tokens) the ``"mean"`` loss
        is 0.0 with zero gradients, where ``F.cross_entropy`` returns nan: a batch of padding
        does not poison the step.

    Mixed dtypes: ``weight`` (and ``bias``) of another float dtype than ``input`` are cast to
    ``input.dtype`` for the matmul (autocast's rule; their gradients come back in their own
    dtypes). `fused_moe` does not cast: its expert weights must share ``hidden_states``' dtype.
    """
    args = (input, weight, target, bias, ce_weight, ignore_index, lse_square_scale, label_smoothing, reduction, softcap)
    check_args(*args, return_z_loss, accum_dtype)
    target_stats(input, weight, target, ce_weight, ignore_index)
    loss, z = math(*args, return_z_loss, accum_dtype)
    loss, z = loss.float(), z.float()
    return (loss, z) if return_z_loss else loss


def check_args(
    input: torch.Tensor,
    weight: torch.Tensor,
    target: torch.Tensor,
    bias: torch.Tensor | None,
    ce_weight: torch.Tensor | None,
    ignore_index: int,
    lse_square_scale: float,
    label_smoothing: float,
    reduction: str,
    softcap: float | None,
    return_z_loss: bool,
    accum_dtype: torch.dtype | None,
) -> None:
    """Raise a clear error for arguments outside the contract (target values: `target_stats`)."""
    try:
        dev = input.device
        if (
            L.is_float(input)
            and L.is_float(weight)
            and input.ndim == 2
            and weight.ndim == 2
            and weight.shape[0] > 0
            and weight.shape[1] == input.shape[1]
            and weight.device == dev
            and isinstance(target, torch.Tensor)
            and target.dtype in L.INDEX_DTYPES
            and target.shape == input.shape[:1]
            and target.device == dev
            and (bias is None or (L.is_float(bias) and bias.shape == weight.shape[:1] and bias.device == dev))
            and (
                ce_weight is None
                or (L.is_float(ce_weight) and ce_weight.shape == weight.shape[:1] and ce_weight.device == dev)
            )
            and L.ce_options_ok(ignore_index, lse_square_scale, label_smoothing, reduction, softcap, return_z_loss)
            and accum_dtype in ACCUM_DTYPES
        ):
            return
    except (AttributeError, TypeError):
        pass
    op = "fused_linear_cross_entropy"
    L.check_matrix(op, "input", input, "(tokens, hidden)")
    L.check_matrix(op, "weight", weight, "(vocab, hidden)")
    L.check_same_device(op, input=input, weight=weight)
    L.check_vocab(op, "weight", weight.shape[0])
    if weight.shape[1] != input.shape[1]:
        raise ValueError(
            f"{op}: weight must have shape (vocab, hidden) with hidden = input.shape[1] = {input.shape[1]}; "
            f"got weight.shape={tuple(weight.shape)}"
        )
    L.check_labels(op, "target", target, input.shape[0], input.device)
    L.check_class_weight(op, "bias", bias, weight.shape[0], input.device)
    L.check_class_weight(op, "ce_weight", ce_weight, weight.shape[0], input.device)
    L.check_ce_options(op, ignore_index, lse_square_scale, label_smoothing, reduction, softcap, return_z_loss)
    if accum_dtype not in ACCUM_DTYPES:
        raise ValueError(
            f"{op}: accum_dtype must be None, torch.float32, torch.bfloat16 or torch.float16; got {accum_dtype!r}"
        )


def target_stats(input, weight, target, ce_weight, ignore_index) -> tuple[int, float]:
    """(non-ignored rows, their summed class weight); ValueError for out-of-range targets."""
    return L.label_stats("fused_linear_cross_entropy", target, ignore_index, weight.shape[0], ce_weight)


def logits_of(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """``input @ weight.T (+ bias)`` in ``input.dtype``, as the lm_head computes them."""
    logits = input @ weight.to(input.dtype).t()
    return logits if bias is None else logits + bias.to(logits.dtype)


def math(
    input: torch.Tensor,
    weight: torch.Tensor,
    target: torch.Tensor,
    bias: torch.Tensor | None,
    ce_weight: torch.Tensor | None,
    ignore_index: int,
    lse_square_scale: float,
    label_smoothing: float,
    reduction: str,
    softcap: float | None,
    return_z_loss: bool = True,
    accum_dtype: torch.dtype | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(loss, z_loss)`` by the formula; float64 inputs give the oracle, others compute the
    logits in ``input.dtype`` and the loss in float32."""
    logits = logits_of(input, weight, bias)
    return _ce.math(logits, target, ce_weight, ignore_index, lse_square_scale, label_smoothing, reduction, softcap)


# -- declaration ---------------------------------------------------------------------------------


def args(device, shape=(4, 8, 20), dtype=torch.float32, seed=0, ignored=0.25, bias=False, weighted=False, **options):
    """input (tokens, hidden), an lm_head weight (vocab, hidden) giving O(3) logits, targets with
    some rows ignored, optional bias and class weights."""
    n, hidden, vocab = shape
    g = S.gen(seed)
    x = S.to(device, dtype, S.normal((n, hidden), g))
    w = S.to(device, dtype, S.normal((vocab, hidden), g, 3.0 / max(hidden, 1) ** 0.5))
    target = S.labels(n, vocab, seed, options.get("ignore_index", -100), ignored).to(device)
    b = S.to(device, dtype, S.normal(vocab, g, 0.5)) if bias else None
    cw = S.to(device, dtype, torch.rand(vocab, generator=g) + 0.5) if weighted else None
    return dict(input=x, weight=w, target=target, bias=b, ce_weight=cw, **options)


def option_args(device, option="plain", tokens=37, **params):
    """`args` at (tokens, 24, 130) with one of the named option sets (`_losses.CE_OPTIONS`)."""
    return args(device, shape=(tokens, 24, 130), **L.CE_OPTIONS[option], **params)


def samples():
    # (tokens, hidden, vocab): one token, odd sizes, vocab wider than one block, more tokens than a chunk.
    shapes = ((1, 8, 5), (7, 16, 33), (40, 24, 300), (5, 32, 9000), (130, 16, 40))
    yield from S.grid(args, dict(dtype=S.DTYPES, shape=shapes))
    # More tokens than hidden, and fewer: an implementation may hold the logits differently when
    # they fit in grad_weight's storage (tokens <= hidden).
    yield from S.grid(
        option_args,
        dict(tokens=(37, 19), dtype=S.OPTION_DTYPES, reduction=REDUCTIONS, option=L.CE_OPTIONS),
        seed=3,
    )
    yield from S.grid(
        args,
        dict(accum_dtype=(None, torch.float32), dtype=S.OPTION_DTYPES),
        grad_scalar=0.5,
        shape=(70, 16, 50),
        seed=4,
        bias=True,
    )
    # Every target ignored: loss 0 and zero gradients, not NaN.
    yield from S.grid(
        args,
        dict(reduction=REDUCTIONS),
        shape=(6, 8, 20),
        ignored="all",
        bias=True,
        weighted=True,
        lse_square_scale=0.1,
    )
    # input without requires_grad (a frozen trunk): only the lm_head gets gradients.
    yield sample(args, frozen=("input",), shape=(9, 8, 30), seed=6)
    yield sample(args, forward_only=True, shape=(9, 8, 30), seed=7)


def _scales(a, upstream):
    # grad_input and grad_weight are products with the logits' gradient g: their terms cancel.
    logits = logits_of(a["input"], a["weight"], a["bias"]).requires_grad_()
    ce_args = (a["target"], a["ce_weight"], a["ignore_index"], a["lse_square_scale"], a["label_smoothing"])
    loss, _ = _ce.math(logits, *ce_args, a["reduction"], a["softcap"])
    scales = {"z_loss": S.peak(loss.detach())}
    if upstream["loss"] is None or not logits.numel():
        return scales
    (g,) = torch.autograd.grad(loss, logits, upstream["loss"])
    scales["grad_input"] = L.grad_scale_through(g, a["weight"])
    scales["grad_weight"] = L.grad_scale_through(g.t(), a["input"])
    scales["grad_bias"] = S.peak(g.abs().sum(0))
    return scales


def _torch_fused_linear_cross_entropy(input, weight, target, bias=None, ce_weight=None, **ce):
    logits = F.linear(input, weight, bias)
    return _ce.OP.bench.torch_fn(logits, target, ce_weight, **ce)


def _cut_cross_entropy():
    from cut_cross_entropy import linear_cross_entropy

    def call(input, weight, target, bias=None, ignore_index=-100, reduction="mean", softcap=None, **_):
        if bias is not None:
            raise ValueError("cut-cross-entropy takes no bias")
        return linear_cross_entropy(
            input, weight, target, ignore_index=ignore_index, softcap=softcap, reduction=reduction
        )

    return call


OP = Op(
    fused_linear_cross_entropy,
    since=(1, 3),
    math=math,
    grads=("input", "weight", "bias"),
    grads_in_forward=_losses_reduced,
    outputs=("loss", "z_loss"),
    no_grad_outputs=("z_loss",),
    samples=samples,
    # (tokens, hidden, vocab)
    smoke=(sample(args, shape=(3, 8, 5), bias=True), sample(args, shape=(20, 16, 700), bias=True)),
    error_sample=sample(args, ignored=0.0, bias=True, weighted=True),
    errors=(
        bad("target_range", ValueError, r"target must be in \[0, 20\).*first: 21", target=set_item(1, 21)),
        bad(
            "hidden_mismatch",
            ValueError,
            r"weight must have shape \(vocab, hidden\) with hidden = input.shape\[1\] = 8",
            weight=lambda w: w[:, :7],
        ),
        bad(
            "input_3d",
            ValueError,
            r"input must be 2-D \(tokens, hidden\); got shape \(1, 4, 8\)",
            input=lambda x: x.reshape(1, 4, 8),
        ),
        bad("bias_shape", ValueError, r"bias must have shape \(vocab,\) = \(20,\); got \(3,\)", bias=lambda b: b[:3]),
        bad(
            "ce_weight_shape", ValueError, r"ce_weight must have shape \(vocab,\) = \(20,\)", ce_weight=lambda w: w[:3]
        ),
        bad("weight_device", ValueError, r"one device.*weight is on", weight=on_other_device),
        bad("accum", ValueError, r"accum_dtype must be None, torch.float32.*got torch.int32", accum_dtype=torch.int32),
        bad("reduction", ValueError, r"reduction must be one of", reduction="batchmean"),
        bad("target_shape", ValueError, r"target must have shape \(tokens,\) = \(4,\)", target=lambda t: t[:2]),
    ),
    checks=Checks(
        out_dtypes=lambda a: (torch.float32, torch.float32),
        atol_scales=_scales,
        tolerance_from={
            name: ("input", "weight") for name in ("loss", "z_loss", "grad_input", "grad_weight", "grad_bias")
        },
    ),
    bench=B.BenchSpec(
        group="losses",
        axes=("tokens", "hidden", "vocab"),
        layouts={
            "rows": lambda s, dt, dev, gen: dict(
                input=B.hidden_states(s, dt, dev, gen),
                weight=B.lm_head(s, dt, dev, gen),
                target=B.targets(s.tokens, s.vocab, dev, gen),
            )
        },
        torch_fn=_torch_fused_linear_cross_entropy,
        traffic=lambda s, e: (
            (s.tokens + s.vocab) * s.hidden * e + 8 * s.tokens,
            3 * (s.tokens + s.vocab) * s.hidden * e + 8 * s.tokens,
        ),
        describe=B.linear_text,
        # forward: the logits matmul; backward: the input and weight gradients.
        flops=lambda s: (2 * s.tokens * s.hidden * s.vocab, 4 * s.tokens * s.hidden * s.vocab),
        peers={
            # liger-kernel's takes our parameters in our order.
            B.LIGER_KERNEL: B.liger_kernel(
                "liger_fused_linear_cross_entropy", *inspect.signature(fused_linear_cross_entropy).parameters
            ),
            B.CUT_CROSS_ENTROPY: B.Peer(_cut_cross_entropy),
        },
    ),
)
