"""Argument checks and label statistics shared by the loss ops (cross_entropy, fused_linear_cross_entropy,
kl_div, jsd, fused_linear_jsd, tvd), so every backend raises the same errors and divides by the same counts."""

from __future__ import annotations

from collections.abc import Callable

import torch

from liger_core.ops._checks import FLOAT_DTYPES, check_floating, check_same_device

INDEX_DTYPES = frozenset((torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8))
CE_REDUCTIONS = ("mean", "sum", "none")
DIV_REDUCTIONS = ("batchmean", "sum", "mean", "none")


def check_matrix(op: str, name: str, t: torch.Tensor, what: str = "(tokens, vocab)") -> None:
    check_floating(op, name, t)
    if t.dim() != 2:
        raise ValueError(f"{op}: {name} must be 2-D {what}; got shape {tuple(t.shape)}")


def check_vocab(op: str, name: str, n_classes: int) -> None:
    if n_classes < 1:
        raise ValueError(f"{op}: {name} must have at least one class (vocab >= 1); got vocab {n_classes}")


def check_labels(op: str, name: str, labels: torch.Tensor, n_rows: int, device: torch.device) -> None:
    if not isinstance(labels, torch.Tensor):
        raise TypeError(f"{op}: {name} must be a torch.Tensor of class indices; got {type(labels).__name__}")
    if labels.dtype not in INDEX_DTYPES:
        raise TypeError(
            f"{op}: {name} must have an integer dtype (int64); got {str(labels.dtype).removeprefix('torch.')}"
        )
    if labels.shape != (n_rows,):
        raise ValueError(f"{op}: {name} must have shape (tokens,) = ({n_rows},); got {tuple(labels.shape)}")
    if labels.device != device:
        raise ValueError(
            f"{op}: all tensors must be on one device; the input is on {device} but {name} is on {labels.device}"
        )


def check_class_weight(op: str, name: str, weight: torch.Tensor | None, n_classes: int, device: torch.device) -> None:
    if weight is None:
        return
    check_floating(op, name, weight)
    if weight.shape != (n_classes,):
        raise ValueError(f"{op}: {name} must have shape (vocab,) = ({n_classes},); got {tuple(weight.shape)}")
    if weight.device != device:
        raise ValueError(
            f"{op}: all tensors must be on one device; the input is on {device} but {name} is on {weight.device}"
        )


def check_reduction(op: str, reduction: str, allowed: tuple[str, ...]) -> None:
    if reduction not in allowed:
        raise ValueError(f"{op}: reduction must be one of {allowed}; got {reduction!r}")


def check_ce_options(
    op: str, ignore_index, lse_square_scale, label_smoothing, reduction, softcap, return_z_loss
) -> None:
    """Checks shared by cross_entropy and fused_linear_cross_entropy (slow path)."""
    if isinstance(ignore_index, bool) or not isinstance(ignore_index, int):
        raise TypeError(f"{op}: ignore_index must be an int; got {ignore_index!r}")
    if not isinstance(lse_square_scale, (int, float)) or not lse_square_scale >= 0:
        raise ValueError(f"{op}: lse_square_scale must be a number >= 0; got {lse_square_scale!r}")
    if not isinstance(label_smoothing, (int, float)) or not 0 <= label_smoothing <= 1:
        raise ValueError(f"{op}: label_smoothing must be a number in [0, 1]; got {label_smoothing!r}")
    check_reduction(op, reduction, CE_REDUCTIONS)
    if softcap is not None and (not isinstance(softcap, (int, float)) or not softcap > 0):
        raise ValueError(f"{op}: softcap must be None or a number > 0; got {softcap!r}")
    if not isinstance(return_z_loss, bool):
        raise TypeError(f"{op}: return_z_loss must be True or False; got {return_z_loss!r}")


def ce_options_ok(ignore_index, lse_square_scale, label_smoothing, reduction, softcap, return_z_loss) -> bool:
    """The fast-path predicate for the options checked by `check_ce_options`."""
    return (
        type(ignore_index) is int
        and lse_square_scale >= 0
        and 0 <= label_smoothing <= 1
        and reduction in CE_REDUCTIONS
        and (softcap is None or softcap > 0)
        and type(return_z_loss) is bool
    )


def _label_figures(target, ignore_index, n_classes, weight):
    valid = target != ignore_index
    bad = valid & ((target < 0) | (target >= n_classes))
    safe = torch.where(valid & ~bad, target, torch.zeros((), dtype=target.dtype, device=target.device)).long()
    count = valid.sum(dtype=torch.float64)
    wsum = count if weight is None else (weight.double().gather(0, safe) * valid).sum()
    return torch.stack([count, bad.sum(dtype=torch.float64), wsum])


def _check_label_figures(op, target, ignore_index, n_classes, stats) -> tuple[int, float]:
    n_valid, n_bad, weight_sum = int(stats[0]), int(stats[1]), float(stats[2])
    if n_bad:
        first = int(target[(target != ignore_index) & ((target < 0) | (target >= n_classes))][0])
        raise ValueError(
            f"{op}: every target must be in [0, {n_classes}) or equal ignore_index={ignore_index}; "
            f"{n_bad} are not (first: {first})"
        )
    return n_valid, weight_sum


def label_stats(
    op: str,
    target: torch.Tensor,
    ignore_index: int,
    n_classes: int,
    weight: torch.Tensor | None = None,
) -> tuple[int, float]:
    """``(rows whose target is not ignore_index, sum of weight[target] over those rows)``.

    Raises ValueError when a target outside ``[0, n_classes)`` is not ``ignore_index``. One
    host synchronisation: the three figures come back in one transfer. Without ``weight``
    the weight sum equals the count.
    """
    stats = _label_figures(target, ignore_index, n_classes, weight).tolist()
    return _check_label_figures(op, target, ignore_index, n_classes, stats)


def reduced(args: dict) -> bool:
    """``Op.grads_in_forward`` of a loss whose ``reduction`` other than ``"none"`` makes it a scalar."""
    return args["reduction"] != "none"


def take_fused_grads(ctx) -> tuple:
    """The gradients a fused loss computed in its forward and kept as ``ctx.fused_grads``, taken
    off ``ctx`` so that autograd holds the only reference: it then adopts grad_weight as ``.grad``
    instead of cloning it (what a saved tensor would cost). A second backward through the same
    graph raises: the gradients were handed over already."""
    grads, ctx.fused_grads = ctx.fused_grads, None
    if grads is None:
        raise RuntimeError(
            "this fused loss computed its gradients in the forward and handed them to autograd already; "
            "run the forward again for another backward (retain_graph cannot replay it)"
        )
    return grads


def pinned_host_empty(shape: torch.Size | tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """An uninitialised pinned host buffer. The device is named: under `torch.set_default_device`
    or a ``with torch.device(...)`` block a bare `torch.empty` would allocate on that device, and
    only CPU tensors can be pinned."""
    return torch.empty(shape, dtype=dtype, device="cpu", pin_memory=True)


class HostCopy:
    """A small device tensor's values on their way to the host without a synchronisation: a
    copy into pinned memory behind an event, queued now; `tolist` waits for that event only, so
    work queued in between keeps the device busy while the host waits. On the CPU the values are
    there already (the interpreter runs the same code path)."""

    def __init__(self, values: torch.Tensor) -> None:
        if values.device.type == "cpu":
            self._host, self._event = values, None
        else:
            self._host = pinned_host_empty(values.shape, values.dtype)
            self._host.copy_(values, non_blocking=True)
            self._event = torch.Event(device=values.device)
            self._event.record()

    def tolist(self) -> list:
        if self._event is not None:
            self._event.synchronize()
            self._event = None
        return self._host.tolist()


class PendingBadCount:
    """A count of bad values (ids, indices) on its way to the host (`HostCopy`, queued before an op's
    kernels, which run on clamped values meanwhile); `check` calls ``raise_bad(count)`` when it is not
    zero, once the kernels are queued. Inside a CUDA graph capture nothing is copied or checked: a
    replay runs on whatever values it is given, clamped. Shared by fused_moe's ids and embedding's
    indices, so both fail alike without a host synchronisation."""

    def __init__(self, n_bad: torch.Tensor, raise_bad: Callable[[int], None]) -> None:
        capturing = n_bad.device.type == "cuda" and torch.cuda.is_current_stream_capturing()
        self._n_bad = None if capturing else HostCopy(n_bad)
        self._raise_bad = raise_bad

    def check(self) -> None:
        if self._n_bad is not None:
            n_bad = int(self._n_bad.tolist())
            self._n_bad = None
            if n_bad:
                self._raise_bad(n_bad)


class PendingLabelStats:
    """`label_stats` whose host read waits until `result`: the figures travel to the host behind
    an event (`HostCopy`), so work queued in between (GEMMs that do not read the targets) keeps the
    device busy while the host waits for the three numbers, instead of the device idling while the
    host prepares the first chunk after a full synchronisation. Nothing that indexes by target may
    run before `result` has returned."""

    def __init__(self, op: str, target: torch.Tensor, ignore_index: int, n_classes: int) -> None:
        self._args = (op, target, ignore_index, n_classes)
        self._figures = HostCopy(_label_figures(target, ignore_index, n_classes, None))
        self._result: tuple[int, float] | None = None

    def result(self) -> tuple[int, float]:
        """``label_stats``'s value; raises its ValueError for a target out of range."""
        if self._result is None:
            self._result = _check_label_figures(*self._args, self._figures.tolist())
        return self._result


def label_count(op: str, labels: torch.Tensor | None, ignore_index: int, n_rows: int) -> int:
    """Rows that count in jsd/tvd/fused_linear_jsd: not ignore_index, or all rows without labels."""
    if labels is None:
        return n_rows
    return int((labels != ignore_index).sum())


def is_float(t) -> bool:
    return isinstance(t, torch.Tensor) and t.dtype in FLOAT_DTYPES


def distributions_ok(x: torch.Tensor, y: torch.Tensor) -> bool:
    """The fast-path test of `check_distributions`."""
    return is_float(x) and is_float(y) and x.ndim == 2 and y.shape == x.shape and y.device == x.device


def check_distributions(op: str, x_name: str, x: torch.Tensor, y_name: str, y: torch.Tensor) -> None:
    """A divergence's two inputs: floating ``(tokens, vocab)`` matrices of one shape on one device."""
    check_matrix(op, x_name, x)
    check_matrix(op, y_name, y)
    check_same_device(op, **{x_name: x, y_name: y})
    if y.shape != x.shape:
        raise ValueError(f"{op}: {y_name} must have {x_name}'s shape {tuple(x.shape)}; got {tuple(y.shape)}")


def drop_ignored_rows(
    loss: torch.Tensor, labels: torch.Tensor | None, ignore_index: int
) -> tuple[torch.Tensor, int | torch.Tensor]:
    """A ``(tokens, vocab)`` elementwise loss with the rows labelled ``ignore_index`` zeroed, and
    the number of rows kept (all of them without labels). The count stays a tensor: no host sync,
    and the formula runs on fake tensors (torch.compile derives output shapes from it)."""
    if labels is None:
        return loss, loss.shape[0]
    keep = (labels != ignore_index)[:, None]
    return torch.where(keep, loss, torch.zeros((), dtype=loss.dtype, device=loss.device)), keep.sum()


def reduce_divergence(loss: torch.Tensor, reduction: str, n_rows: int | torch.Tensor) -> torch.Tensor:
    """A ``(tokens, vocab)`` elementwise loss reduced as ``torch.nn.KLDivLoss`` does, over ``n_rows``
    counted rows: ``"batchmean"`` divides the sum by them, ``"mean"`` by their elements."""
    if reduction == "none":
        return loss
    total = loss.sum()
    if reduction == "batchmean":
        return total / at_least_one(n_rows)
    if reduction == "mean":
        return total / at_least_one(n_rows * loss.shape[1])
    return total


def at_least_one(n: int | torch.Tensor) -> int | torch.Tensor:
    """``max(n, 1)`` for a count that may be a tensor (kept on the device)."""
    return n.clamp(min=1) if isinstance(n, torch.Tensor) else max(n, 1)


__all__ = [
    "grad_scale_through",
    "CE_REDUCTIONS",
    "DIV_REDUCTIONS",
    "ce_options_ok",
    "check_ce_options",
    "check_class_weight",
    "check_labels",
    "check_matrix",
    "check_reduction",
    "check_same_device",
    "check_distributions",
    "distributions_ok",
    "at_least_one",
    "drop_ignored_rows",
    "reduce_divergence",
    "is_float",
    "label_count",
    "label_stats",
    "HostCopy",
    "PendingLabelStats",
]


# Named option sets the cross-entropy samples run (cross_entropy and the fused linear one): the
# builders' arguments (``weighted``: class weights; ``bias``: an lm_head bias, fused linear only)
# and the contract's.
CE_OPTIONS = {
    "plain": {},
    "bias": dict(bias=True),
    "class_weight": dict(weighted=True),
    "smoothing": dict(label_smoothing=0.1),
    "zloss": dict(lse_square_scale=1e-2, return_z_loss=True),
    "softcap": dict(softcap=4.0),
    "everything": dict(
        weighted=True, bias=True, label_smoothing=0.2, lse_square_scale=1e-3, return_z_loss=True, softcap=5.0
    ),
}


def grad_scale_through(grad_out: torch.Tensor, operand: torch.Tensor) -> float:
    """The size of the terms summed in ``grad_out @ operand`` before they cancel: the atol scale
    for a gradient that is such a product (float64 tensors)."""
    if grad_out.numel() == 0 or operand.numel() == 0:
        return 1.0
    return float((grad_out.abs() @ operand.abs()).max())


def autograd_function(name: str, module: str, forward: Callable, backward: Callable) -> type[torch.autograd.Function]:
    """A ``torch.autograd.Function`` subclass built from its two static methods: for the loss
    factories (`_preference_functions.autograd_functions`, ...), whose Functions a backend module registers
    as its own. ``module`` is that backend module's name: `backend.collect_ops` takes only objects
    defined in the module it reads. Built by ``type`` so that autograd's metaclass names the
    backward node after ``name`` (``<name>Backward``), as a class statement would."""
    namespace = {
        "__module__": module,
        "__qualname__": name,
        "forward": staticmethod(forward),
        "backward": staticmethod(backward),
    }
    return type(name, (torch.autograd.Function,), namespace)


class LinearChunkKernels:
    """A backend's matmul steps in the chunked fused linear losses that liger-core orchestrates
    (fused_linear_grpo, the distillation losses): a chunk's float32 logits, the weight gradient's
    accumulation, the final scaling by the incoming gradient. The defaults are plain torch; a
    backend overrides what its hardware does otherwise (fp32-output GEMMs, fused accumulation)."""

    def logits_weight(self, weight: torch.Tensor) -> torch.Tensor:
        """``weight`` as `logits` takes it (once per call, e.g. upcast once for every chunk)."""
        return weight

    def logits(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """``x @ weight.T`` in float32 (``weight`` from `logits_weight`), a buffer of its own."""
        return x.float() @ weight.float().t()

    def new_weight_grad(self, weight: torch.Tensor) -> torch.Tensor:
        """The weight gradient's buffer, in ``weight``'s dtype; `add_weight_grad` fills it."""
        return torch.zeros_like(weight)

    def add_weight_grad(self, grad_weight: torch.Tensor, grad_logits: torch.Tensor, x: torch.Tensor, first: bool):
        """``grad_weight += grad_logits.T @ x`` (``first``: the first chunk's product; the
        orchestration zeroes the buffer itself when there was no chunk)."""
        grad_weight += grad_logits.t() @ x

    def scale_grad(self, grad: torch.Tensor, upstream: torch.Tensor) -> torch.Tensor:
        """``grad`` (computed in the forward) times the incoming float32 gradient, in its dtype."""
        return (grad * upstream).to(grad.dtype)


def fused_grad_buffers(
    kernels: LinearChunkKernels, x: torch.Tensor, weight: torch.Tensor, need_x: bool, need_w: bool, need_b: bool
) -> tuple:
    """``(grad_x, grad_weight, grad_bias)`` buffers for a chunked fused loss that computes its
    gradients in the forward (None where not needed): ``x``'s shape and dtype, the weight's from
    `kernels.new_weight_grad`, a float32 bias gradient of the weight's rows (zeroed)."""
    gx = torch.empty_like(x) if need_x else None
    gw = kernels.new_weight_grad(weight) if need_w else None
    gb = torch.zeros(weight.shape[0], dtype=torch.float32, device=x.device) if need_b else None
    return gx, gw, gb


def add_chunk_grads(
    kernels: LinearChunkKernels,
    grad_logits: torch.Tensor,
    rows: slice,
    x: torch.Tensor,
    weight: torch.Tensor,
    grad_x: torch.Tensor | None,
    grad_weight: torch.Tensor | None,
    grad_bias: torch.Tensor | None,
    first: bool,
) -> None:
    """A chunk's float32 logits gradient ``G`` (the ``rows`` of the flat input ``x``) carried to
    the linear layer's operands in the chunked fused losses: ``grad_x[rows] = G @ weight``,
    ``grad_weight += G^T @ x[rows]`` (`kernels.add_weight_grad`; ``first``: the first chunk) and
    ``grad_bias += sum(G)`` (float32); each skipped where its buffer is None."""
    g = grad_logits.to(x.dtype)
    if grad_x is not None:
        torch.mm(g, weight, out=grad_x[rows])
    if grad_weight is not None:
        kernels.add_weight_grad(grad_weight, g, x[rows], first)
    if grad_bias is not None:
        grad_bias += grad_logits.sum(0)


def scale_fused_grads(
    kernels: LinearChunkKernels, grads: tuple, grad_loss: torch.Tensor, bias_dtype: torch.dtype | None
) -> tuple:
    """``(grad_x, grad_weight, grad_bias)`` computed in the forward (None where not wanted) times
    the incoming gradient: the first two by `kernels.scale_grad`, the float32 bias gradient into
    ``bias_dtype``."""
    gx, gw, gb = grads
    up = grad_loss.float()
    gx = None if gx is None else kernels.scale_grad(gx, up)
    gw = None if gw is None else kernels.scale_grad(gw, up)
    gb = None if gb is None else (gb * up).to(bias_dtype)
    return gx, gw, gb
