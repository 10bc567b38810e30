"""The `embedding` op: a token-embedding lookup (``nn.Embedding``) and its weight gradient, declared once."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from liger_core.bench import spec as B
from liger_core.op import Op, bad, on_other_device, sample
from liger_core.ops import _samples as S
from liger_core.ops._checks import FLOAT_DTYPES, check_floating, check_same_device

if TYPE_CHECKING:
    from liger_core.ops._losses import PendingBadCount

INDEX_DTYPES = frozenset((torch.int32, torch.int64))


def embedding(weight: torch.Tensor, indices: torch.Tensor, padding_idx: int | None = None) -> torch.Tensor:
    """Embedding lookup, ``out[..., :] = weight[indices[...], :]`` (``torch.nn.functional.embedding``
    with ``padding_idx``, no ``max_norm``), in liger-kernel's argument order (weight first).

    Args:
        weight: ``(num_embeddings, embedding_dim)``, float32, bfloat16 or float16, any strides.
        indices: int64 or int32 of any shape (an empty one included), every value in
            ``[0, num_embeddings)``; anything else (negative included) is an IndexError naming
            ``indices`` (counted on the device: a backend reads the count behind an event once its
            kernels are queued, which run on clamped indices meanwhile, never out of the table).
        padding_idx: None, or a row of ``weight`` (negative counts from the end, as in torch)
            that receives no gradient; its row is looked up as any other.

    Returns:
        ``(*indices.shape, embedding_dim)`` in weight's dtype, exact copies of weight's rows.
        Backward gives ``grad_weight`` (weight's dtype and shape): for each row, the sum in
        float32 of the incoming gradient rows of the positions that looked it up, rounded once;
        zero for rows no position looked up and for ``padding_idx``. ``weight`` is not modified.
    """
    check_args(weight, indices, padding_idx)
    check_indices(indices, weight.shape[0])
    return _ReferenceEmbedding.apply(weight, indices, padding_idx)


def check_args(weight: torch.Tensor, indices: torch.Tensor, padding_idx: int | None) -> None:
    """Raise a clear error for arguments outside the contract (one cheap predicate first)."""
    try:
        if (
            weight.dtype in FLOAT_DTYPES
            and weight.ndim == 2
            and indices.dtype in INDEX_DTYPES
            and weight.device == indices.device
            and (
                padding_idx is None or (type(padding_idx) is int and -weight.shape[0] <= padding_idx < weight.shape[0])
            )
        ):
            return
    except (AttributeError, TypeError):
        pass
    check_floating("embedding", "weight", weight)
    if not isinstance(indices, torch.Tensor):
        raise TypeError(f"embedding: indices must be a torch.Tensor; got {type(indices).__name__}")
    if indices.dtype not in INDEX_DTYPES:
        raise TypeError(
            f"embedding: indices must have dtype int64 or int32; got {str(indices.dtype).removeprefix('torch.')}"
        )
    check_same_device("embedding", weight=weight, indices=indices)
    if weight.ndim != 2:
        raise ValueError(
            f"embedding: weight must be 2-D (num_embeddings, embedding_dim); got weight.shape={tuple(weight.shape)}"
        )
    n = weight.shape[0]
    raise ValueError(f"embedding: padding_idx must be None or an int in [{-n}, {n}); got {padding_idx!r}")


def _bad_indices(indices: torch.Tensor, num_embeddings: int) -> torch.Tensor:
    return (indices < 0) | (indices >= num_embeddings)


def _raise_bad_indices(indices: torch.Tensor, num_embeddings: int, n_bad: int) -> None:
    first = int(indices[_bad_indices(indices, num_embeddings)][0])
    raise IndexError(
        f"embedding: indices must be in [0, {num_embeddings}) (the rows of weight); {n_bad} are not (first: {first})"
    )


def check_indices(indices: torch.Tensor, num_embeddings: int) -> None:
    """Raise IndexError for an index outside ``[0, num_embeddings)`` (one host synchronisation)."""
    n_bad = int(_bad_indices(indices, num_embeddings).sum())
    if n_bad:
        _raise_bad_indices(indices, num_embeddings, n_bad)


def clamp_indices(indices: torch.Tensor, num_embeddings: int) -> tuple[torch.Tensor, PendingBadCount]:
    """``indices`` with those outside ``[0, num_embeddings)`` replaced by 0, for the kernels, and the
    pending check of the originals (no host synchronisation here): call its ``check`` after queuing
    the forward's kernels. Shared by every backend, so a bad index fails alike everywhere."""
    bad = _bad_indices(indices, num_embeddings)
    from liger_core.ops._losses import PendingBadCount

    pending = PendingBadCount(bad.sum(), lambda n_bad: _raise_bad_indices(indices, num_embeddings, n_bad))
    return indices.masked_fill(bad, 0), pending


class _ReferenceEmbedding(torch.autograd.Function):
    """The reference: `math`'s lookup, and the contract's gradient (each row's incoming gradients
    summed in float32 and rounded once; torch's own backward sums a bfloat16 table in bfloat16)."""

    @staticmethod
    def forward(ctx, weight: torch.Tensor, indices: torch.Tensor, padding_idx: int | None) -> torch.Tensor:
        ctx.save_for_backward(indices)
        ctx.table, ctx.padding_idx = (weight.shape[0], weight.dtype), padding_idx
        return math(weight, indices, padding_idx)

    @staticmethod
    def backward(ctx, dy: torch.Tensor):
        (indices,) = ctx.saved_tensors
        (num_embeddings, dtype), padding_idx = ctx.table, ctx.padding_idx
        acc = torch.float64 if dtype == torch.float64 else torch.float32
        grad = torch.zeros((num_embeddings, dy.shape[-1]), dtype=acc, device=dy.device)
        grad.index_add_(0, indices.reshape(-1).long(), dy.reshape(-1, dy.shape[-1]).to(acc))
        if padding_idx is not None:
            grad[padding_idx] = 0
        return grad.to(dtype), None, None


def math(weight: torch.Tensor, indices: torch.Tensor, padding_idx: int | None) -> torch.Tensor:
    """The formula, differentiable by autograd in weight, for any floating dtype (float64 for the oracle)."""
    return torch.nn.functional.embedding(indices, weight, padding_idx)


# -- declaration ---------------------------------------------------------------------------------


def args(
    device,
    num_embeddings=50,
    dim=16,
    shape=(3, 7),
    dtype=torch.float32,
    index_dtype=torch.int64,
    padding_idx=None,
    duplicates=False,
    strided=False,
):
    """weight (num_embeddings, dim) and indices of ``shape``; ``duplicates``: every index from
    a handful of rows (long sums per row), ``strided``: weight a column slice of a wider table."""
    g = S.gen(0)
    if strided:
        weight = S.to(device, dtype, S.normal((num_embeddings, dim + 5), g))[:, 2 : dim + 2]
    else:
        weight = S.to(device, dtype, S.normal((num_embeddings, dim), g))
    high = min(4, num_embeddings) if duplicates else num_embeddings
    indices = torch.randint(0, high, shape, generator=S.gen(1)).to(device=device, dtype=index_dtype)
    if padding_idx is not None and indices.numel():
        indices.view(-1)[0] = padding_idx % num_embeddings  # the padding row is looked up
    return dict(weight=weight, indices=indices, padding_idx=padding_idx)


def _with_first(indices: torch.Tensor, value: int) -> torch.Tensor:
    out = indices.clone()
    out.view(-1)[0] = value
    return out


def samples():
    # One row and one index, odd sizes, rows wider than any vendor's single block, many positions
    # (several programs), a 1-D and a 3-D index tensor, no index at all.
    cases = (
        dict(num_embeddings=1, dim=1, shape=(1,)),
        dict(num_embeddings=50, dim=33, shape=(3, 7)),
        dict(num_embeddings=7, dim=4099, shape=(5,)),
        dict(num_embeddings=300, dim=64, shape=(2, 3, 150)),
        dict(num_embeddings=20, dim=16, shape=(0, 4)),
    )
    for dtype in S.DTYPES:
        for case in cases:
            yield sample(args, dtype=dtype, **case)
    # Every position on a few rows (long per-row sums), padding rows, int32 indices, a strided table.
    yield from S.grid(args, dict(dtype=S.OPTION_DTYPES), duplicates=True, num_embeddings=40, shape=(257,))
    yield from S.grid(args, dict(padding_idx=(0, 5, -1)), num_embeddings=30, dim=24, shape=(4, 9))
    yield sample(args, index_dtype=torch.int32, num_embeddings=60, dim=40, shape=(6, 11))
    yield sample(args, strided=True, num_embeddings=30, dim=24, shape=(4, 9))


def _bench_layout(s, dt, dev, gen):
    # liger-kernel's benchmark_embedding: input_ids (BT / 512, 512) drawn from the model's vocabulary,
    # an (vocab, hidden) table, BT swept from 1024: here tokens = BT.
    seq = 512 if s.tokens % 512 == 0 else s.tokens
    return dict(
        weight=B.normal((s.vocab, s.hidden), dt, dev, gen),
        indices=B.targets(s.tokens, s.vocab, dev, gen).view(-1, seq),
    )


def _liger_kernel_embedding():
    # liger-kernel's experimental embedding (its LigerEmbedding module owns its table; its
    # Function takes the table and the indices).
    from liger_kernel.ops import LigerEmbeddingFunction

    return lambda weight, indices, padding_idx=None: LigerEmbeddingFunction.apply(weight, indices)


OP = Op(
    embedding,
    since=(1, 7),
    math=math,
    grads=("weight",),
    samples=samples,
    smoke=(sample(args, num_embeddings=10, dim=8, shape=(2, 3)), sample(args, shape=(4, 33), dim=128)),
    error_sample=sample(args),
    errors=(
        bad(
            "int_weight",
            TypeError,
            r"weight must have dtype float32, bfloat16, float16; got int64",
            weight=lambda w: w.long(),
        ),
        bad(
            "float_indices",
            TypeError,
            r"indices must have dtype int64 or int32; got float32",
            indices=lambda i: i.float(),
        ),
        bad(
            "weight_1d",
            ValueError,
            r"weight must be 2-D \(num_embeddings, embedding_dim\); got weight.shape=\(50,\)",
            weight=lambda w: w[:, 0],
        ),
        bad("padding_idx", ValueError, r"padding_idx must be None or an int in \[-50, 50\); got 50", padding_idx=50),
        bad("padding_idx_type", ValueError, r"padding_idx must be None or an int .*got 1.5", padding_idx=1.5),
        bad("mixed_devices", ValueError, r"one device.*weight is on .*indices is on", indices=on_other_device),
        # Out of the table: past the end, negative, far past the end (a raw read there can end the process).
        bad(
            "index_past_end",
            IndexError,
            r"embedding: indices must be in \[0, 50\) \(the rows of weight\); 1 are not \(first: 50\)",
            indices=lambda i: _with_first(i, 50),
        ),
        bad(
            "index_negative",
            IndexError,
            r"indices must be in \[0, 50\).*first: -1\)",
            indices=lambda i: _with_first(i, -1),
        ),
        bad(
            "index_far_past_end",
            IndexError,
            r"indices must be in \[0, 50\).*first: 1000000\)",
            indices=lambda i: _with_first(i, 1_000_000),
        ),
    ),
    bench=B.BenchSpec(
        group="activations",
        axes=("tokens", "vocab", "hidden"),
        layouts={"ids": _bench_layout},
        torch_fn=lambda weight, indices, padding_idx=None: torch.nn.functional.embedding(indices, weight, padding_idx),
        # Forward reads the looked-up rows and the indices, writes the output; backward reads the
        # incoming gradient and writes the whole table's gradient.
        traffic=lambda s, e: (
            2 * s.tokens * s.hidden * e + 8 * s.tokens,
            s.tokens * s.hidden * e + s.vocab * s.hidden * e,
        ),
        describe=lambda s: B.dims(("tokens", s.tokens), ("vocab", s.vocab), ("hidden", s.hidden)),
        peers={B.LIGER_KERNEL: B.Peer(_liger_kernel_embedding)},
    ),
)
