"""The `cross_entropy` op: cross-entropy with z-loss and softcapping (liger-kernel's semantics),
declared once."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from liger_core.bench import spec as B
from liger_core.op import Checks, Op, bad, on_other_device, sample
from liger_core.ops import _losses as L
from liger_core.ops import _samples as S
from liger_core.ops._losses import reduced as _losses_reduced

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
    loss, z = math(
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
    loss, z = loss.to(logits.dtype), z.to(logits.dtype)
    return (loss, z) if return_z_loss else loss


def check_args(
    logits: torch.Tensor,
    target: torch.Tensor,
    weight: torch.Tensor | None,
    ignore_index: int,
    lse_square_scale: float,
    label_smoothing: float,
    reduction: str,
    softcap: float | None,
    return_z_loss: bool,
    in_place: bool,
) -> None:
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
    weight: torch.Tensor | None,
    ignore_index: int,
    lse_square_scale: float,
    label_smoothing: float,
    reduction: str,
    softcap: float | None,
    return_z_loss: bool = True,
    in_place: bool = False,
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


# -- declaration ---------------------------------------------------------------------------------


def args(
    device,
    shape=(4, 20),
    dtype=torch.float32,
    seed=0,
    ignored=0.25,
    weighted=False,
    scale=3.0,
    layout="rows",
    target_dtype=torch.int64,
    **options,
):
    """logits (tokens, vocab) of spread ``scale``, targets with some rows ignored, optional class
    weights. ``layout``: ``rows``; ``sliced`` (rows 102 elements wider than the vocabulary);
    ``columns`` (column-major storage)."""
    n, vocab = shape
    g = S.gen(seed)
    ignore_index = options.get("ignore_index", -100)
    if layout == "sliced":
        logits = S.to(device, dtype, S.normal((n, vocab + 102), g, scale))[:, 1 : vocab + 1]
    elif layout == "columns":
        logits = S.to(device, dtype, S.normal((vocab, n), g, scale)).t()
    else:
        logits = S.to(device, dtype, S.normal(shape, g, scale))
    target = S.labels(n, vocab, seed, ignore_index, ignored).to(device=device, dtype=target_dtype)
    weight = S.to(device, dtype, torch.rand(vocab, generator=g) + 0.5) if weighted else None
    return dict(logits=logits, target=target, weight=weight, **options)


# The shared option sets, without the lm_head bias cross_entropy does not have.
OPTIONS = {name: {k: v for k, v in o.items() if k != "bias"} for name, o in L.CE_OPTIONS.items() if name != "bias"}


def option_args(device, option="plain", **params):
    """`args` with one of the named option sets (class weights, smoothing, z-loss, softcap)."""
    return args(device, **OPTIONS[option], **params)


def samples():
    # One class, odd vocabularies, many short rows, rows wider than any vendor's single block.
    shapes = ((1, 1), (4, 7), (9, 33), (33, 130), (3, 40000))
    yield from S.grid(args, dict(dtype=S.DTYPES, shape=shapes))
    yield from S.grid(
        option_args, dict(dtype=S.OPTION_DTYPES, reduction=REDUCTIONS, option=OPTIONS), shape=(37, 300), seed=3
    )
    # The z-loss output, and a scaled upstream gradient.
    yield from S.grid(
        args,
        dict(reduction=REDUCTIONS),
        grad_scalar=-2.5,
        shape=(20, 77),
        seed=5,
        weighted=True,
        lse_square_scale=0.05,
        return_z_loss=True,
    )
    # Every target ignored, and an empty batch: loss 0 and zero gradients, not NaN.
    yield from S.grid(
        args,
        dict(weighted=(False, True), reduction=REDUCTIONS),
        shape=(6, 50),
        ignored="all",
        lse_square_scale=0.1,
        label_smoothing=0.1,
    )
    yield from S.grid(args, dict(reduction=REDUCTIONS), shape=(0, 10))
    # An ignore_index that is also a class id (0, 5) or another negative value.
    yield from S.grid(args, dict(ignore_index=(0, 5, -1)), shape=(25, 40), seed=9, label_smoothing=0.1)
    yield sample(args, shape=(15, 199), seed=11, layout="sliced", target_dtype=torch.int32, reduction="none")
    yield sample(args, shape=(15, 64), seed=11, layout="columns")
    # Logits of +-1e4: the online softmax must not overflow.
    yield sample(args, shape=(8, 1000), seed=13, scale=1e4, reduction="sum")
    # in_place: the same loss and gradient; target and weight untouched.
    yield from S.grid(
        option_args,
        dict(dtype=S.OPTION_DTYPES, reduction=REDUCTIONS, option=("plain", "everything")),
        grad_scalar=-2.5,
        shape=(37, 300),
        seed=17,
        in_place=True,
    )
    # in_place on rows wider than one block, on strided logits (a backend may fall back to a
    # separate buffer there), on a single class, and without grad (forward only).
    yield sample(args, shape=(3, 5000), seed=19, weighted=True, label_smoothing=0.1, in_place=True)
    yield sample(args, shape=(15, 199), seed=21, layout="sliced", reduction="none", in_place=True)
    yield sample(args, shape=(4, 1), seed=23, reduction="sum", in_place=True)
    yield sample(args, forward_only=True, shape=(11, 257), seed=29, weighted=True, reduction="sum", in_place=True)


def _scales(a, upstream):
    if not a["return_z_loss"]:
        return {}
    loss, _ = math(*a.values())
    return {"z_loss": S.peak(loss)}


def _torch_cross_entropy(logits, target, weight=None, ignore_index=-100, label_smoothing=0.0, reduction="mean", **_):
    # transformers' causal-LM loss: logits upcast to float32, then F.cross_entropy.
    return F.cross_entropy(
        logits.float(),
        target,
        weight=weight,
        ignore_index=ignore_index,
        label_smoothing=label_smoothing,
        reduction=reduction,
    )


OP = Op(
    cross_entropy,
    since=(1, 3),
    math=math,
    grads=("logits",),
    grads_in_forward=_losses_reduced,
    outputs=("loss", "z_loss"),
    no_grad_outputs=("z_loss",),
    samples=samples,
    smoke=(
        sample(args, shape=(3, 5), weighted=True, lse_square_scale=1e-3, label_smoothing=0.1),
        sample(args, shape=(6, 3000), weighted=True, lse_square_scale=1e-3, label_smoothing=0.1),
    ),
    error_sample=sample(args, weighted=True, ignored=0.0),
    errors=(
        *S.CLASS_TARGET_ERRORS,
        bad("logits_1d", ValueError, r"logits must be 2-D \(tokens, vocab\); got shape \(20,\)", logits=lambda x: x[0]),
        bad(
            "logits_int",
            TypeError,
            r"logits must have dtype float32, bfloat16, float16; got int64",
            logits=lambda x: x.long(),
        ),
        bad(
            "weight_shape",
            ValueError,
            r"weight must have shape \(vocab,\) = \(20,\); got \(19,\)",
            weight=lambda w: w[:19],
        ),
        bad("weight_device", ValueError, r"one device.*weight is on", weight=on_other_device),
        bad("reduction", ValueError, r"reduction must be one of \('mean', 'sum', 'none'\); got 'avg'", reduction="avg"),
        bad("smoothing", ValueError, r"label_smoothing must be a number in \[0, 1\]; got 1.5", label_smoothing=1.5),
        bad("softcap", ValueError, r"softcap must be None or a number > 0; got 0", softcap=0),
        bad("zscale", ValueError, r"lse_square_scale must be a number >= 0; got -1", lse_square_scale=-1),
        bad("zloss_flag", TypeError, r"return_z_loss must be True or False; got 1", return_z_loss=1),
        bad("in_place_flag", TypeError, r"in_place must be True or False; got 1", in_place=1),
    ),
    checks=Checks(
        out_dtypes=lambda a: (a["logits"].dtype, a["logits"].dtype),
        atol_scales=_scales,
        tolerance_from={name: ("logits", "weight") for name in ("loss", "z_loss", "grad_logits")},
        # The gradient may be written into the logits' own memory.
        overwritable=lambda a: ("logits",) if a["in_place"] else (),
    ),
    bench=B.vocab_rows(
        lambda s, dt, dev, gen: dict(
            logits=B.normal((s.tokens, s.vocab), dt, dev, gen),
            target=B.targets(s.tokens, s.vocab, dev, gen),
            # liger-kernel's cross-entropy always writes the gradient into the logits; our op
            # does so only when asked, so ask: both then save the same logits-sized buffer.
            in_place=True,
        ),
        _torch_cross_entropy,
        # forward reads the logits; backward reads them again and writes their gradient.
        lambda s, e: (s.tokens * s.vocab * e + 8 * s.tokens, 2 * s.tokens * s.vocab * e + 8 * s.tokens),
        {
            B.LIGER_KERNEL: B.liger_kernel(
                "liger_cross_entropy",
                "logits",
                "target",
                "weight",
                ignore_index="ignore_index",
                reduction="reduction",
                label_smoothing="label_smoothing",
                lse_square_scale="lse_square_scale",
                softcap="softcap",
                return_z_loss="return_z_loss",
            ),
            B.TORCH_NPU: B.torch_npu(
                lambda m, logits, target, ignore_index, reduction, label_smoothing, **_: m.npu_cross_entropy_loss(
                    logits, target, reduction=reduction, ignore_index=ignore_index, label_smoothing=label_smoothing
                )[0]
            ),
        },
    ),
)
