"""The `kl_div` op: its contract, argument checks and PyTorch reference."""

from __future__ import annotations

import torch

from liger_core.ops import _losses as L

REDUCTIONS = L.DIV_REDUCTIONS


def kl_div(
    y_pred: torch.Tensor,
    y_true: torch.Tensor,
    reduction: str = "batchmean",
    log_target: bool = False,
    eps: float = 1e-10,
) -> torch.Tensor:
    """Kullback-Leibler divergence ``KL(y_true || exp(y_pred))`` per element, as
    ``torch.nn.functional.kl_div`` (the semantics of liger-kernel 0.8.5)::

        log_target=False: loss = y_true * (log(max(y_true, eps)) - y_pred)
        log_target=True:  loss = exp(y_true) * (y_true - y_pred)

    Args:
        y_pred: ``(tokens, vocab)`` log-probabilities, float32, bfloat16 or float16.
        y_true: ``(tokens, vocab)`` probabilities (log-probabilities with ``log_target``), any
            of those dtypes. A constant: it gets no gradient.
        reduction: ``"batchmean"`` (sum / tokens), ``"sum"``, ``"mean"`` (sum / elements) or
            ``"none"`` (per element).
        log_target: whether ``y_true`` holds log-probabilities.
        eps: floor of ``y_true`` inside the log (so ``y_true = 0`` gives 0), ``>= 0``.

    Returns:
        float32: a scalar, or ``(tokens, vocab)`` for ``"none"``. Backward gives ``grad_y_pred``
        (``y_pred.dtype``): ``-y_true`` (``-exp(y_true)``) times the incoming gradient, divided
        by tokens (``batchmean``) or elements (``mean``). An empty batch gives 0.
    """
    raise NotImplementedError("contract only: call liger_core.functional.liger_kl_div")


def check_args(y_pred, y_true, reduction, log_target, eps) -> None:
    try:
        if (
            L.is_float(y_pred)
            and L.is_float(y_true)
            and y_pred.ndim == 2
            and y_true.shape == y_pred.shape
            and y_true.device == y_pred.device
            and reduction in REDUCTIONS
            and type(log_target) is bool
            and eps >= 0
        ):
            return
    except (AttributeError, TypeError):
        pass
    _raise_bad_args(y_pred, y_true, reduction, log_target, eps)


def _raise_bad_args(y_pred, y_true, reduction, log_target, eps) -> None:
    op = "kl_div"
    L.check_matrix(op, "y_pred", y_pred)
    L.check_matrix(op, "y_true", y_true)
    L.check_same_device(op, y_pred=y_pred, y_true=y_true)
    if y_true.shape != y_pred.shape:
        raise ValueError(f"{op}: y_true must have y_pred's shape {tuple(y_pred.shape)}; got {tuple(y_true.shape)}")
    L.check_reduction(op, reduction, REDUCTIONS)
    if not isinstance(log_target, bool):
        raise TypeError(f"{op}: log_target must be True or False; got {log_target!r}")
    if not isinstance(eps, (int, float)) or not eps >= 0:
        raise ValueError(f"{op}: eps must be a number >= 0; got {eps!r}")


def math(y_pred: torch.Tensor, y_true: torch.Tensor, reduction: str, log_target: bool, eps: float) -> torch.Tensor:
    """The formula, differentiable in ``y_pred`` (float64 for the oracle, else float32)."""
    compute = torch.float64 if y_pred.dtype == torch.float64 else torch.float32
    x = y_pred.to(compute)
    t = y_true.detach().to(compute)
    loss = torch.exp(t) * (t - x) if log_target else t * (torch.log(torch.clamp_min(t, eps)) - x)
    if reduction == "none":
        return loss
    total = loss.sum()
    if reduction == "batchmean":
        return total / max(x.shape[0], 1)
    if reduction == "mean":
        return total / max(x.numel(), 1)
    return total


def reference(
    y_pred: torch.Tensor,
    y_true: torch.Tensor,
    reduction: str = "batchmean",
    log_target: bool = False,
    eps: float = 1e-10,
) -> torch.Tensor:
    check_args(y_pred, y_true, reduction, log_target, eps)
    return math(y_pred, y_true, reduction, log_target, eps).float()
