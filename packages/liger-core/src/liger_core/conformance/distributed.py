"""Multi-process checks of the ops that take a process group (`vocab_parallel_cross_entropy`):
CPU processes over gloo, each rank running one backend's implementation on its shard, compared
with the single-process float64 reference on the full inputs.

A backend's tests call `check_vocab_parallel(backend.name, device)`; the processes are spawned,
so they inherit the environment (``LIGER_EXTRA_BACKENDS``, ``TRITON_INTERPRET``) but nothing else.
On an accelerator each rank takes its own device (``<type>:<rank>``) and the type's collective
backend (`COLLECTIVES`); on the CPU, gloo.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from liger_core.conformance import assert_close

OP = "vocab_parallel_cross_entropy"

# The torch.distributed backend of each device type's tensors.
COLLECTIVES = {"cpu": "gloo", "cuda": "nccl", "xpu": "xccl", "npu": "hccl"}


def devices_for(device_type: str) -> int:
    """How many ranks of `check_vocab_parallel` ``device_type`` can hold (one device each)."""
    if device_type == "cpu":
        return 1 << 30
    module = getattr(torch, device_type, None)
    return module.device_count() if module is not None and hasattr(module, "device_count") else 0


@dataclass(frozen=True)
class ShardCase:
    """Full logits ``(tokens, world * vocab_shard)``, sharded by rank; targets drawn over the whole
    vocabulary, ``ignored`` of them set to ``ignore_index``; ``grad_scalar`` the upstream gradient
    of a reduced loss (a per-row loss gets seeded normal values)."""

    tokens: int
    vocab_shard: int
    dtype: torch.dtype = torch.float32
    reduction: str = "mean"
    ignore_index: int = -100
    ignored: float = 0.25
    in_place: bool = False
    grad_scalar: float = 1.0
    seed: int = 0

    @property
    def id(self) -> str:
        return (
            f"{self.tokens}x{self.vocab_shard}-{str(self.dtype).removeprefix('torch.')}-{self.reduction}"
            f"-ignore={self.ignore_index}{'-in_place' if self.in_place else ''}"
        )


# Small (the interpreter runs them on 2 cores) but reaching: every reduction, bf16, an ignore_index
# that is also a column index of rank 1's shard (its local 3), a scaled upstream gradient, in_place,
# a batch where every target is ignored, one class per rank, and 40 rows (liger-ops-cuda's
# one-program-per-row forward in its interpreter; fewer rows take its (row, tile) programs).
CASES: tuple[ShardCase, ...] = (
    ShardCase(9, 13),
    ShardCase(9, 13, reduction="sum", grad_scalar=-2.5, seed=1),
    ShardCase(9, 13, reduction="none", seed=2),
    ShardCase(12, 40, dtype=torch.bfloat16, reduction="none", seed=3),
    ShardCase(16, 7, ignore_index=10, ignored=0.0, seed=4),
    ShardCase(9, 33, in_place=True, reduction="sum", seed=5),
    ShardCase(5, 6, ignored=1.0, seed=6),
    ShardCase(6, 1, seed=7),
    ShardCase(40, 24, reduction="none", seed=8),
)


def _inputs(case: ShardCase, world: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(case.seed)
    vocab = world * case.vocab_shard
    logits = (3.0 * torch.randn(case.tokens, vocab, generator=g, dtype=torch.float64)).to(case.dtype)
    target = torch.randint(0, vocab, (case.tokens,), generator=g)
    if case.ignore_index >= 0:
        # The class equal to ignore_index is ignored: make sure some rows also target the classes
        # whose local index on another shard equals it.
        target[:world] = torch.arange(world) * case.vocab_shard + case.ignore_index % case.vocab_shard
    drop = torch.rand(case.tokens, generator=g) < case.ignored
    target = torch.where(drop, torch.full_like(target, case.ignore_index), target)
    return logits, target


def _oracle(case: ShardCase, logits: torch.Tensor, target: torch.Tensor, upstream: torch.Tensor):
    """The single-process full-vocabulary reference in float64: cross_entropy's formula."""
    from liger_core.ops import cross_entropy as ce

    x = logits.double().requires_grad_(True)
    loss, _ = ce.math(x, target, None, case.ignore_index, 0.0, 0.0, case.reduction, None)
    loss.backward(upstream.double())
    return loss.detach(), x.grad


def _worker(
    rank: int, world: int, init_file: str, backend_name: str, device_type: str, cases: tuple[ShardCase, ...]
) -> None:
    torch.set_num_threads(1)
    device = torch.device("cpu" if device_type == "cpu" else f"{device_type}:{rank}")
    if device_type != "cpu":
        getattr(torch, device_type).set_device(device)
    collective = COLLECTIVES[device_type]
    dist.init_process_group(collective, init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        from liger_core import registry

        fn = registry.get_backend(backend_name).op(OP)
        if fn is None:
            raise AssertionError(f"backend {backend_name!r} does not implement {OP}")
        from liger_core.op import implementation_callable

        fn = implementation_callable(fn)
        group = dist.group.WORLD
        for case in cases:
            _check_case(fn, case, rank, world, group, device)
        _check_errors(fn, rank, world, group, device)
    finally:
        dist.destroy_process_group()


def _check_case(fn, case: ShardCase, rank: int, world: int, group, device: torch.device) -> None:
    logits, target = _inputs(case, world)
    cols = slice(rank * case.vocab_shard, (rank + 1) * case.vocab_shard)
    shard = logits[:, cols].contiguous().to(device).requires_grad_(True)
    target_on = target.to(device)
    # in_place may overwrite the logits passed: a copy of the shard, kept in the graph.
    passed = shard.clone() if case.in_place else shard
    loss = fn(passed, target_on, group, case.ignore_index, case.reduction, case.in_place)
    if case.reduction == "none":
        upstream = torch.randn(case.tokens, generator=torch.Generator().manual_seed(case.seed + 7))
    else:
        upstream = torch.tensor(case.grad_scalar)
    loss.backward(upstream.to(device=device, dtype=loss.dtype))
    want_loss, want_grad = _oracle(case, logits, target, upstream)
    what = f"{OP}[{case.id}] rank {rank}/{world}"
    if loss.dtype != case.dtype or shard.grad.dtype != case.dtype:
        raise AssertionError(f"{what}: dtypes {loss.dtype}, {shard.grad.dtype}; expected {case.dtype}")
    assert_close(loss, want_loss, case.dtype, f"{what}: loss")
    assert_close(shard.grad, want_grad[:, cols], case.dtype, f"{what}: grad_logits")
    if not torch.equal(target_on.cpu(), target):
        raise AssertionError(f"{what}: target was modified")
    # Every rank returns the same loss, bit for bit.
    losses = [torch.empty_like(loss) for _ in range(world)]
    dist.all_gather(losses, loss.detach().contiguous(), group=group)
    if not all(torch.equal(other, losses[0]) for other in losses):
        raise AssertionError(f"{what}: the ranks' losses differ: {[t.tolist() for t in losses]}")


def _expect_error(what: str, error: type[Exception], match: str, call) -> None:
    import re

    try:
        call()
    except error as e:
        if not re.search(match, str(e)):
            raise AssertionError(f"{what}: {error.__name__} {str(e)!r} does not match {match!r}") from e
        return
    raise AssertionError(f"{what}: no {error.__name__} raised")


def _check_errors(fn, rank: int, world: int, group, device: torch.device) -> None:
    """Bad input that only a group reveals raises the same error on every rank (none hangs)."""
    target = torch.tensor([0, 3, 2 * world - 1], device=device)
    # Shards of different widths: rank r holds 2 + r columns.
    ragged = torch.randn(3, 2 + rank, device=device)
    _expect_error(
        f"{OP}: shard widths differing across ranks",
        ValueError,
        r"every rank of group must hold logits of one shape \(tokens, vocab_shard\); got rank 0: \(3, 2\), "
        r"rank 1: \(3, 3\)",
        lambda: fn(ragged, target, group, -100, "mean", False),
    )
    # A target past the full vocabulary (2 * world classes), though within a shard's width times 2.
    bad = torch.tensor([0, 2 * world, 1], device=device)
    _expect_error(
        f"{OP}: target past the full vocabulary",
        ValueError,
        rf"target must be in \[0, {2 * world}\) or equal ignore_index=-100; 1 are not \(first: {2 * world}\)",
        lambda: fn(torch.randn(3, 2, device=device), bad, group, -100, "mean", False),
    )
    # The op still works after the errors (no collective was left half done).
    out = fn(torch.randn(3, 2, device=device), target, group, -100, "sum", False)
    if not torch.isfinite(out):
        raise AssertionError(f"{OP}: a call after the errors gave {out}")


def check_vocab_parallel(
    backend_name: str, device_type: str = "cpu", world: int = 2, cases: tuple[ShardCase, ...] = CASES
) -> None:
    """Run `CASES` on ``world`` processes with backend ``backend_name``, each rank on its own
    ``device_type`` device (CPU: gloo; needs `devices_for` >= ``world``): every rank's
    loss and shard gradient against the float64 full-vocabulary reference at its dtype's
    tolerance, equal losses on every rank, and the group-wide errors. Raises on the first failure
    (the failing rank's traceback)."""
    with tempfile.TemporaryDirectory() as tmp:
        init_file = os.path.join(tmp, "rendezvous")
        mp.start_processes(
            _worker,
            args=(world, init_file, backend_name, device_type, cases),
            nprocs=world,
            join=True,
            start_method="spawn",
        )
