"""The `vocab_parallel_cross_entropy` op: cross-entropy over logits whose vocabulary is sharded
across a tensor-parallel process group, declared once.

The collectives live here (vendor-neutral, `torch.distributed`): `shard_layout` (which columns this
rank holds, and the check that every rank holds the same shard shape) and `combine_shards` (one
all-gather of the per-row statistics). A backend computes the per-shard statistics and the
gradient with its kernels and calls these two between them; the backward needs no communication.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F

from liger_core.bench import spec as B
from liger_core.op import Checks, Op, bad, sample
from liger_core.ops import _losses as L
from liger_core.ops import _samples as S

OP_NAME = "vocab_parallel_cross_entropy"
REDUCTIONS = L.CE_REDUCTIONS
# Local target of an ignored row, as the shard kernels see it: never a column index, nor `n_cols`
# (the local target of a row whose class another rank holds).
LOCAL_IGNORE = -1


def vocab_parallel_cross_entropy(
    logits: torch.Tensor,
    target: torch.Tensor,
    group: Any = None,
    ignore_index: int = -100,
    reduction: str = "mean",
    in_place: bool = False,
) -> torch.Tensor:
    """Cross-entropy of logits against class indices when each rank of ``group`` holds one
    contiguous shard of the vocabulary (Megatron-style tensor parallelism of the lm_head).

    Rank ``r`` of a group of ``R`` ranks holds the columns ``[r * V_local, (r + 1) * V_local)`` of
    the full ``(tokens, V)`` logits, ``V = R * V_local``; every rank passes the same global
    ``target``. Per row ``i`` with target ``y`` (``x`` the full row)::

        loss_i = logsumexp(x) - x[y]

    computed from one all-gather of each rank's per-row ``(logsumexp of its shard, its shard's
    x[y] or 0)``. Rows whose target is ``ignore_index`` contribute nothing (loss 0, gradient 0).
    Reductions as ``torch.nn.functional.cross_entropy``: ``"none"`` (per row, 0 on ignored rows),
    ``"sum"``, ``"mean"`` over the non-ignored rows (0, never NaN, when there are none). Every rank
    returns the same loss, equal to ``cross_entropy`` of the gathered logits; with ``group=None``
    or a group of one rank it is ``cross_entropy(logits, target, ignore_index=ignore_index,
    reduction=reduction)``.

    Args:
        logits: ``(tokens, V_local)``, this rank's shard, float32, bfloat16 or float16; computed in
            float32. Rows may be strided. Never modified unless ``in_place``.
        target: ``(tokens,)`` integer global class indices in ``[0, V)`` or ``ignore_index``, the
            same on every rank; anything else is a ValueError.
        group: a ``torch.distributed`` process group (all its ranks call the op together), or None
            for one process. Every rank must hold the same ``(tokens, V_local)`` shape, else a
            ValueError on every rank.
        ignore_index: target value of rows to skip.
        reduction: ``"mean"``, ``"sum"`` or ``"none"``.
        in_place: opt-in memory saving, as ``cross_entropy``'s: the backend may write the gradient
            w.r.t. ``logits`` into ``logits``' own memory; the caller must not read ``logits``
            after the forward. ``target`` is never modified. A backend may use a separate buffer
            where it cannot write in place; the reference always does.

    Returns:
        The loss (scalar, or ``(tokens,)`` for ``"none"``) in ``logits.dtype``. Backward gives
        ``grad_logits`` (``logits.dtype``) for this rank's shard, ``softmax(x)[shard] -
        onehot(y)[shard]`` times the upstream gradient and the reduction's scale, with no
        communication; target gets none.
    """
    check_args(logits, target, group, ignore_index, reduction, in_place)
    layout = shard_layout(logits, group)
    L.label_stats(OP_NAME, target, ignore_index, layout.vocab)
    return _loss(logits, target, group, ignore_index, reduction, layout).to(logits.dtype)


def check_args(
    logits: torch.Tensor,
    target: torch.Tensor,
    group: Any,
    ignore_index: int,
    reduction: str,
    in_place: bool,
) -> None:
    """Raise a clear error for arguments outside the contract (target values and shard shapes:
    `shard_layout` and the backend's target check)."""
    try:
        if (
            L.is_float(logits)
            and logits.ndim == 2
            and logits.shape[1] > 0
            and isinstance(target, torch.Tensor)
            and target.dtype in L.INDEX_DTYPES
            and target.shape == logits.shape[:1]
            and target.device == logits.device
            and (group is None or isinstance(group, dist.ProcessGroup))
            and type(ignore_index) is int
            and reduction in REDUCTIONS
            and type(in_place) is bool
        ):
            return
    except (AttributeError, TypeError):
        pass
    op = OP_NAME
    L.check_matrix(op, "logits", logits, "(tokens, vocab_shard)")
    L.check_vocab(op, "logits", logits.shape[1])
    L.check_labels(op, "target", target, logits.shape[0], logits.device)
    if group is not None and not isinstance(group, dist.ProcessGroup):
        raise TypeError(f"{op}: group must be None or a torch.distributed.ProcessGroup; got {type(group).__name__}")
    if isinstance(ignore_index, bool) or not isinstance(ignore_index, int):
        raise TypeError(f"{op}: ignore_index must be an int; got {ignore_index!r}")
    L.check_reduction(op, reduction, REDUCTIONS)
    if type(in_place) is not bool:
        raise TypeError(f"{op}: in_place must be True or False; got {in_place!r}")


# -- orchestration: the collectives every backend shares -------------------------------------------


@dataclass(frozen=True)
class ShardLayout:
    """This rank's place in the vocabulary: ``rank`` and ``world`` of the group, the first global
    column it holds, and the full vocabulary size."""

    rank: int
    world: int
    vocab_start: int
    vocab: int


def shard_layout(logits: torch.Tensor, group: Any) -> ShardLayout:
    """Where this rank's shard sits; with more than one rank, one all-gather of the shard shapes
    (a few integers, read on the host) checks that every rank holds the same ``(tokens, V_local)``
    and raises the same ValueError on every rank when they differ."""
    n_rows, n_cols = logits.shape
    world = 1 if group is None else dist.get_world_size(group)
    if world == 1:
        return ShardLayout(0, 1, 0, n_cols)
    rank = dist.get_rank(group)
    if rank < 0:
        raise ValueError(f"{OP_NAME}: this process is not a member of group")
    mine = torch.tensor([n_rows, n_cols], dtype=torch.int64, device=logits.device)
    shapes = [torch.empty_like(mine) for _ in range(world)]
    dist.all_gather(shapes, mine, group=group)
    got = [tuple(s.tolist()) for s in shapes]
    if any(s != got[0] for s in got):
        raise ValueError(
            f"{OP_NAME}: every rank of group must hold logits of one shape (tokens, vocab_shard); "
            f"got {', '.join(f'rank {r}: {s}' for r, s in enumerate(got))}"
        )
    return ShardLayout(rank, world, rank * n_cols, world * n_cols)


def local_target(target: torch.Tensor, layout: ShardLayout, n_cols: int, ignore_index: int) -> torch.Tensor:
    """The targets as this shard's kernels see them (int64): the local column where this rank holds
    the class, ``n_cols`` (no column: no target term) where another rank does, `LOCAL_IGNORE` on
    ignored rows. The shard kernels run with ``ignore_index=LOCAL_IGNORE``, so a global
    ``ignore_index`` that is also a local column index cannot be mistaken for one."""
    t = target.long()
    local = t - layout.vocab_start
    local = torch.where((local >= 0) & (local < n_cols), local, n_cols)
    return torch.where(t == ignore_index, LOCAL_IGNORE, local)


def target_logit(x: torch.Tensor, local: torch.Tensor) -> torch.Tensor:
    """Per row, the target's logit where this shard holds it, else 0 (in ``x``'s dtype: callers
    pass float32 or float64); one gather of ``tokens`` elements."""
    n_cols = x.shape[1]
    local = local.long()
    owned = (local >= 0) & (local < n_cols)
    picked = x.gather(1, torch.where(owned, local, 0)[:, None]).squeeze(1)
    return torch.where(owned, picked, torch.zeros((), dtype=picked.dtype, device=picked.device))


def combine_shards(
    lse: torch.Tensor, x_y: torch.Tensor, group: Any, layout: ShardLayout
) -> tuple[torch.Tensor, torch.Tensor]:
    """(logsumexp of the full rows, their target logits) from every rank's per-row ``lse`` of its
    shard and ``x_y`` (0 where it does not hold the target): one all-gather of a ``(2, tokens)``
    buffer, combined in rank order, so every rank gets the same values. Differentiable w.r.t.
    this rank's own ``lse`` and ``x_y`` (the other ranks' are constants here: each rank
    differentiates its own shard), which the reference's autograd uses."""
    if layout.world == 1:
        return lse, x_y
    mine = torch.stack([lse, x_y])
    parts = [torch.empty_like(mine, requires_grad=False) for _ in range(layout.world)]
    dist.all_gather(parts, mine.detach().contiguous(), group=group)
    parts[layout.rank] = mine
    stats = torch.stack(parts)
    return torch.logsumexp(stats[:, 0], dim=0), stats[:, 1].sum(dim=0)


def row_losses(lse: torch.Tensor, x_y: torch.Tensor, target: torch.Tensor, ignore_index: int) -> torch.Tensor:
    """``lse - x_y`` per row, 0 on ignored rows."""
    return torch.where(target != ignore_index, lse - x_y, torch.zeros((), dtype=lse.dtype, device=lse.device))


def reduce_losses(rows: torch.Tensor, reduction: str, n_valid: torch.Tensor | int) -> torch.Tensor:
    """The reduction of the per-row losses; the mean divides by the non-ignored rows (1 when there
    are none: 0, not NaN). ``n_valid`` may stay on the device."""
    if reduction == "none":
        return rows
    if reduction == "sum":
        return rows.sum()
    if isinstance(n_valid, torch.Tensor):
        return rows.sum() / n_valid.clamp(min=1).to(rows.dtype)
    return rows.sum() / max(n_valid, 1)


def _loss(logits, target, group, ignore_index, reduction, layout: ShardLayout) -> torch.Tensor:
    compute = torch.float64 if logits.dtype == torch.float64 else torch.float32
    x = logits.to(compute)
    local = local_target(target, layout, x.shape[1], ignore_index)
    lse, x_y = combine_shards(torch.logsumexp(x, dim=-1), target_logit(x, local), group, layout)
    rows = row_losses(lse, x_y, target, ignore_index)
    return reduce_losses(rows, reduction, (target != ignore_index).sum())


def math(
    logits: torch.Tensor,
    target: torch.Tensor,
    group: Any,
    ignore_index: int,
    reduction: str,
    in_place: bool = False,
) -> torch.Tensor:
    """The loss by the formula, differentiable by autograd w.r.t. this rank's shard (float64 for
    the oracle, else float32); with a group, the same collectives as the backends."""
    return _loss(logits, target, group, ignore_index, reduction, shard_layout(logits, group))


# -- declaration ---------------------------------------------------------------------------------


def args(
    device,
    shape=(4, 20),
    dtype=torch.float32,
    seed=0,
    ignored=0.25,
    scale=3.0,
    layout="rows",
    target_dtype=torch.int64,
    **options,
):
    """One process's logits (tokens, vocab) of spread ``scale`` (group None: the whole
    vocabulary), targets with some rows ignored. ``layout``: ``rows``; ``sliced`` (rows 102
    elements wider than the vocabulary, as a shard sliced from wider logits); ``columns``."""
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
    return dict(logits=logits, target=target, **options)


def samples():
    # One process (group None): the shard is the whole vocabulary, as cross_entropy. The shard
    # kernels' paths: one class, odd vocabularies, rows wider than any vendor's single block (in
    # float32 only: cross_entropy's samples run those kernels on such rows in every dtype).
    shapes = ((1, 1), (4, 7), (9, 33), (33, 130))
    yield from S.grid(args, dict(dtype=S.DTYPES, shape=shapes))
    yield sample(args, shape=(3, 40000))
    yield from S.grid(args, dict(dtype=S.OPTION_DTYPES, reduction=REDUCTIONS), grad_scalar=-2.5, shape=(37, 300))
    # Every target ignored, and an empty batch: loss 0 and zero gradients, not NaN.
    yield from S.grid(args, dict(reduction=REDUCTIONS), shape=(6, 50), ignored="all")
    yield from S.grid(args, dict(reduction=REDUCTIONS), shape=(0, 10))
    # An ignore_index that is also a class id (0, 5) or another negative value.
    yield from S.grid(args, dict(ignore_index=(0, 5, -1)), shape=(25, 40), seed=9)
    yield sample(args, shape=(15, 199), seed=11, layout="sliced", target_dtype=torch.int32, reduction="none")
    yield sample(args, shape=(15, 64), seed=11, layout="columns")
    # Logits of +-1e4: the online softmax must not overflow.
    yield sample(args, shape=(8, 1000), seed=13, scale=1e4, reduction="sum")
    # in_place: the same loss and gradient, target untouched; forward only.
    yield from S.grid(args, dict(dtype=S.OPTION_DTYPES, reduction=REDUCTIONS), shape=(37, 300), seed=17, in_place=True)
    yield sample(args, shape=(15, 199), seed=21, layout="sliced", reduction="none", in_place=True)
    yield sample(args, forward_only=True, shape=(11, 257), seed=29, reduction="sum", in_place=True)


def _torch_cross_entropy(logits, target, ignore_index=-100, reduction="mean", **_):
    # One process: transformers' causal-LM loss, logits upcast to float32, then F.cross_entropy.
    return F.cross_entropy(logits.float(), target, ignore_index=ignore_index, reduction=reduction)


def _liger_kernel_vocab_parallel_cross_entropy():
    # liger-kernel 0.8.5's ``LigerVocabParallelCEFunction`` (what its ``LigerVocabParallelCrossEntropy``
    # calls) at one rank (``tp_group=None``): ``[seq, batch, vocab]`` logits, per-token float32 losses
    # only, so the reduction is done here as ours does it. It keeps a float32 copy of exp(logits) for
    # its backward; ours needs nothing of the logits' size besides the logits.
    from liger_kernel.ops.vocab_parallel_cross_entropy import LigerVocabParallelCEFunction

    def call(logits, target, group=None, ignore_index=-100, reduction="mean", **_):
        rows = LigerVocabParallelCEFunction.apply(
            logits[:, None, :], target[:, None], group, ignore_index, 0.0, "pytorch", "global"
        ).view(-1)
        return reduce_losses(rows, reduction, (target != ignore_index).sum()).to(logits.dtype)

    return call


OP = Op(
    vocab_parallel_cross_entropy,
    since=(1, 5),
    math=math,
    grads=("logits",),
    outputs=("loss",),
    samples=samples,
    smoke=S.vocab_smoke(args),
    error_sample=sample(args, ignored=0.0),
    errors=(
        *S.CLASS_TARGET_ERRORS,
        bad(
            "logits_1d",
            ValueError,
            r"logits must be 2-D \(tokens, vocab_shard\); got shape \(20,\)",
            logits=lambda x: x[0],
        ),
        bad(
            "logits_int",
            TypeError,
            r"logits must have dtype float32, bfloat16, float16; got int64",
            logits=lambda x: x.long(),
        ),
        bad("group", TypeError, r"group must be None or a torch.distributed.ProcessGroup; got str", group="tp"),
        bad("ignore_index", TypeError, r"ignore_index must be an int; got 1.5", ignore_index=1.5),
        bad("reduction", ValueError, r"reduction must be one of \('mean', 'sum', 'none'\); got 'avg'", reduction="avg"),
        bad("in_place_flag", TypeError, r"in_place must be True or False; got 1", in_place=1),
    ),
    checks=Checks(
        out_dtypes=lambda a: (a["logits"].dtype,),
        tolerance_from={name: ("logits",) for name in ("loss", "grad_logits")},
        # The gradient may be written into the logits' own memory.
        overwritable=lambda a: ("logits",) if a["in_place"] else (),
    ),
    # One process (the bench runs one): a rank's work on its shard, the collectives aside.
    bench=B.vocab_rows(
        lambda s, dt, dev, gen: dict(
            logits=B.normal((s.tokens, s.vocab), dt, dev, gen),
            target=B.targets(s.tokens, s.vocab, dev, gen),
            in_place=True,
        ),
        _torch_cross_entropy,
        # forward reads the logits; backward reads them again and writes their gradient.
        lambda s, e: (s.tokens * s.vocab * e + 8 * s.tokens, 2 * s.tokens * s.vocab * e + 8 * s.tokens),
        {B.LIGER_KERNEL: B.Peer(_liger_kernel_vocab_parallel_cross_entropy)},
    ),
)
