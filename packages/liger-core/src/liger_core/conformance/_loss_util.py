"""Helpers shared by the loss checks (cross_entropy, fused_linear_cross_entropy, kl_div, jsd,
fused_linear_jsd, tvd): seeded inputs, the incoming gradient, and input-unchanged checks."""

from __future__ import annotations

import torch


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def labels(n: int, vocab: int, seed: int, ignore_index: int = -100, ignored: float | str = 0.25) -> torch.Tensor:
    """``n`` class indices in ``[0, vocab)``; a fraction ``ignored`` (or ``"all"``) set to ``ignore_index``."""
    g = gen(seed + 101)
    t = torch.randint(0, vocab, (n,), generator=g)
    if ignored == "all":
        return torch.full((n,), ignore_index, dtype=torch.int64)
    drop = torch.rand(n, generator=g) < float(ignored)
    if n >= 2 and ignored:
        drop[1] = True  # at least one ignored row whenever some are wanted
    return torch.where(drop, torch.full_like(t, ignore_index), t)


def upstream(shape: torch.Size, seed: int, scalar: float = 1.0) -> torch.Tensor:
    """The gradient fed to backward: ``scalar`` for a scalar loss (1.0 is what ``loss.backward()``
    sends; other values test the scaling), random values for an unreduced loss."""
    if len(shape) == 0:
        return torch.tensor(scalar, dtype=torch.float64)
    return torch.randn(shape, generator=gen(seed + 7), dtype=torch.float64)


def clones(*tensors):
    return tuple(None if t is None else t.detach().clone() for t in tensors)


def assert_unchanged(op: str, **pairs) -> None:
    """``name=(after, before)``: the op must leave its inputs as they were."""
    for name, (after, before) in pairs.items():
        if before is None:
            continue
        assert torch.equal(after.detach(), before), f"{op} modified its input {name}"


def grad_scale_through(grad_out: torch.Tensor, operand: torch.Tensor) -> float:
    """The size of the terms summed in ``grad_out @ operand`` before they cancel: the atol scale
    for a gradient that is such a product."""
    if grad_out.numel() == 0 or operand.numel() == 0:
        return 1.0
    return float((grad_out.abs() @ operand.abs()).max())
