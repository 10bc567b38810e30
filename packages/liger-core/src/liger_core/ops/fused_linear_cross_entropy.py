"""The `fused_linear_cross_entropy` op: its contract, argument checks and PyTorch reference."""

from __future__ import annotations

import torch

from liger_core.ops import _losses as L
from liger_core.ops import cross_entropy as _ce

ACCUM_DTYPES = (None, torch.float32, torch.bfloat16, torch.float16)


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
    """
    raise NotImplementedError("contract only: call liger_core.functional.liger_fused_linear_cross_entropy")


def check_args(
    input,
    weight,
    target,
    bias,
    ce_weight,
    ignore_index,
    lse_square_scale,
    label_smoothing,
    reduction,
    softcap,
    return_z_loss,
    accum_dtype,
):
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
    _raise_bad_args(
        input,
        weight,
        target,
        bias,
        ce_weight,
        ignore_index,
        lse_square_scale,
        label_smoothing,
        reduction,
        softcap,
        return_z_loss,
        accum_dtype,
    )


def _raise_bad_args(
    input,
    weight,
    target,
    bias,
    ce_weight,
    ignore_index,
    lse_square_scale,
    label_smoothing,
    reduction,
    softcap,
    return_z_loss,
    accum_dtype,
):
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


def math(
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
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(loss, z_loss)`` by the formula; float64 inputs give the oracle, others compute the
    logits in ``input.dtype`` and the loss in float32."""
    logits = input @ weight.to(input.dtype).t()
    if bias is not None:
        logits = logits + bias.to(logits.dtype)
    return _ce.math(logits, target, ce_weight, ignore_index, lse_square_scale, label_smoothing, reduction, softcap)


def reference(
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
    args = (input, weight, target, bias, ce_weight, ignore_index, lse_square_scale, label_smoothing, reduction, softcap)
    check_args(*args, return_z_loss, accum_dtype)
    target_stats(input, weight, target, ce_weight, ignore_index)
    loss, z = math(*args)
    loss, z = loss.float(), z.float()
    return (loss, z) if return_z_loss else loss
