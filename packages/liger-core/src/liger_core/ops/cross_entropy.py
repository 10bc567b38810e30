"""The `cross_entropy` op: its contract, argument checks and PyTorch reference."""

from __future__ import annotations

import torch

from liger_core.ops import _losses as L

REDUCTIONS = L.CE_REDUCTIONS


def cross_entropy(
    logits: torch.Tensor,
    target: torch.Tensor,
    weight: torch.Tensor | None = None,
    ignore_index: int = -100,
    lse_square_scale: float = 0.0,
    label_smoothing: float = 0.0,
    reduction: str = "mean",
    softcap: float | None = None,
    return_z_loss: bool = False,
    in_place: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Cross-entropy of logits against class indices, as ``torch.nn.functional.cross_entropy``
    plus z-loss and Gemma-2 softcapping (the semantics of liger-kernel 0.8.5).

    Per row ``i`` with target ``y = target[i]`` (``V`` classes, ``x`` the row, after softcapping
    ``x = softcap * tanh(x / softcap)`` when ``softcap`` is set; ``lse = logsumexp(x)``,
    ``logp = x - lse``, ``w`` the class weights or ones, ``s = label_smoothing``)::

        loss_i = (1 - s) * w[y] * (-logp[y]) + (s / V) * sum_j w[j] * (-logp[j])
        z_i    = lse_square_scale * lse**2
        total_i = loss_i + z_i

    Rows whose target is ``ignore_index`` contribute nothing (loss 0, gradient 0).
    Reductions: ``"none"`` gives ``total_i`` per row (0 on ignored rows); ``"sum"`` sums them;
    ``"mean"`` gives ``sum(loss_i) / sum(w[y_i]) + sum(z_i) / n`` over the ``n`` non-ignored rows
    (the z-loss is not class-weighted). A batch where every target is ignored (or empty) gives
    0 and zero gradients, never NaN.

    Args:
        logits: ``(tokens, vocab)``, float32, bfloat16 or float16; computed in float32. Rows may
            be strided. Never modified unless ``in_place``.
        target: ``(tokens,)`` integer class indices in ``[0, vocab)`` or ``ignore_index``;
            anything else is a ValueError.
        weight: ``(vocab,)`` class weights (a constant: no gradient), or None.
        ignore_index: target value of rows to skip.
        lse_square_scale: z-loss scale (PaLM), ``>= 0``.
        label_smoothing: in ``[0, 1]``.
        reduction: ``"mean"``, ``"sum"`` or ``"none"``.
        softcap: logit softcap ``> 0`` (Gemma 2), or None.
        return_z_loss: also return the z-loss term, reduced like the loss (for logging: it is
            already part of the loss and carries no gradient of its own).
        in_place: opt-in memory saving (liger-kernel 0.8.5's cross-entropy always does it): the
            backend may write the gradient w.r.t. ``logits`` into ``logits``' own memory, during the
            forward or the backward, instead of a separate logits-sized buffer (about 2 GB at
            4096 x 128256 fp32). The caller must not read ``logits`` after the forward (nor keep
            it saved for another op's backward, nor run the backward twice). The gradient stays
            exact for every reduction and upstream gradient; ``target`` and ``weight`` are never
            modified. A backend may silently use a separate buffer where it cannot write in
            place (e.g. logits not contiguous, or not requiring grad); the reference always does.

    Returns:
        The loss (scalar, or ``(tokens,)`` for ``"none"``) in ``logits.dtype``; with
        ``return_z_loss`` the pair ``(loss, z_loss)``. Backward gives ``grad_logits``
        (``logits.dtype``); target and weight get none.
    """
    raise NotImplementedError("contract only: call liger_core.functional.liger_cross_entropy")


def check_args(
    logits,
    target,
    weight,
    ignore_index,
    lse_square_scale,
    label_smoothing,
    reduction,
    softcap,
    return_z_loss,
    in_place=False,
):
    """Raise a clear error for arguments outside the contract (target values: `target_stats`)."""
    try:
        if (
            L.is_float(logits)
            and logits.ndim == 2
            and logits.shape[1] > 0
            and isinstance(target, torch.Tensor)
            and target.dtype in L.INDEX_DTYPES
            and target.shape == logits.shape[:1]
            and target.device == logits.device
            and (
                weight is None
                or (L.is_float(weight) and weight.shape == logits.shape[1:] and weight.device == logits.device)
            )
            and L.ce_options_ok(ignore_index, lse_square_scale, label_smoothing, reduction, softcap, return_z_loss)
            and type(in_place) is bool
        ):
            return
    except (AttributeError, TypeError):
        pass
    _raise_bad_args(
        logits,
        target,
        weight,
        ignore_index,
        lse_square_scale,
        label_smoothing,
        reduction,
        softcap,
        return_z_loss,
        in_place,
    )


def _raise_bad_args(
    logits,
    target,
    weight,
    ignore_index,
    lse_square_scale,
    label_smoothing,
    reduction,
    softcap,
    return_z_loss,
    in_place=False,
):
    op = "cross_entropy"
    L.check_matrix(op, "logits", logits)
    L.check_vocab(op, "logits", logits.shape[1])
    L.check_labels(op, "target", target, logits.shape[0], logits.device)
    L.check_class_weight(op, "weight", weight, logits.shape[1], logits.device)
    L.check_ce_options(op, ignore_index, lse_square_scale, label_smoothing, reduction, softcap, return_z_loss)
    if type(in_place) is not bool:
        raise TypeError(f"{op}: in_place must be True or False; got {in_place!r}")


def target_stats(logits, target, weight, ignore_index) -> tuple[int, float]:
    """(non-ignored rows, their summed class weight); ValueError for out-of-range targets."""
    return L.label_stats("cross_entropy", target, ignore_index, logits.shape[1], weight)


def math(
    logits: torch.Tensor,
    target: torch.Tensor,
    weight: torch.Tensor | None = None,
    ignore_index: int = -100,
    lse_square_scale: float = 0.0,
    label_smoothing: float = 0.0,
    reduction: str = "mean",
    softcap: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(loss, z_loss)`` by the formula, differentiable by autograd (float64 for the oracle,
    else float32); both in the compute dtype, z_loss detached."""
    compute = torch.float64 if logits.dtype == torch.float64 else torch.float32
    x = logits.to(compute)
    if softcap is not None:
        x = softcap * torch.tanh(x / softcap)
    n_classes = x.shape[1]
    valid = target != ignore_index
    safe = torch.where(valid, target, torch.zeros_like(target)).long()
    lse = torch.logsumexp(x, dim=-1)
    logp = x - lse[:, None]
    w = None if weight is None else weight.to(compute).detach()
    nll = -logp.gather(1, safe[:, None]).squeeze(1)
    w_y = w.gather(0, safe) if w is not None else torch.ones_like(nll)
    loss = w_y * nll
    if label_smoothing > 0:
        smooth = -(logp * w).sum(-1) if w is not None else -logp.sum(-1)
        loss = (1 - label_smoothing) * loss + (label_smoothing / n_classes) * smooth
    z = lse_square_scale * lse * lse
    zero = torch.zeros((), dtype=compute, device=x.device)
    loss = torch.where(valid, loss, zero)
    z = torch.where(valid, z, zero)
    if reduction == "none":
        return loss + z, z.detach()
    if reduction == "sum":
        return loss.sum() + z.sum(), z.sum().detach()
    n = valid.sum().to(compute)
    denom = (w_y * valid).sum() if w is not None else n
    # Everything ignored: numerators are 0; divide by 1 so the result (and its gradient) is 0, not NaN.
    denom = torch.where(denom == 0, torch.ones_like(denom), denom)
    n = torch.where(n == 0, torch.ones_like(n), n)
    z_mean = z.sum() / n
    return loss.sum() / denom + z_mean, z_mean.detach()


def reference(
    logits: torch.Tensor,
    target: torch.Tensor,
    weight: torch.Tensor | None = None,
    ignore_index: int = -100,
    lse_square_scale: float = 0.0,
    label_smoothing: float = 0.0,
    reduction: str = "mean",
    softcap: float | None = None,
    return_z_loss: bool = False,
    in_place: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    # in_place only permits writing into logits; the reference always uses a separate buffer.
    check_args(
        logits,
        target,
        weight,
        ignore_index,
        lse_square_scale,
        label_smoothing,
        reduction,
        softcap,
        return_z_loss,
        in_place,
    )
    target_stats(logits, target, weight, ignore_index)
    loss, z = math(logits, target, weight, ignore_index, lse_square_scale, label_smoothing, reduction, softcap)
    loss, z = loss.to(logits.dtype), z.to(logits.dtype)
    return (loss, z) if return_z_loss else loss
