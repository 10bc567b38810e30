"""cross_entropy's own paths (`_cross_entropy`'s kernels) the shared suite does not reach with the
default plans: rows over several vocabulary tiles, the one-program-per-row forward (and its
memory), the in-place gradient, masked vocabulary, bad targets behind the row kernel. The
`row_programs` and `tile_programs` fixtures (conftest.py) force each forward plan."""

import pytest
import torch
import triton
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from liger_core.conformance.check import check, make_args
from liger_core.ops import cross_entropy as ce_contract
from liger_ops_cuda import hardware
from liger_ops_cuda._cross_entropy import plan_vocab_rows, plan_vocab_tiles, use_row_programs
from liger_ops_cuda._tiling import plan_chunks
from liger_ops_cuda.cross_entropy import LigerCrossEntropyFunction


@pytest.fixture
def small_tiles(monkeypatch):
    """Vocabulary tiles of 32: every row below spans several tiles with a ragged last one."""
    monkeypatch.setattr(hardware, "CE_BLOCK", 32)


def ce_args(device, n, vocab, dtype=torch.float32, **params):
    return make_args("cross_entropy", device, shape=(n, vocab), dtype=dtype, **params)


def test_plans(device):
    assert plan_vocab_tiles(128256)[:2] == (hardware.CE_BLOCK, triton.cdiv(128256, hardware.CE_BLOCK))
    assert plan_vocab_tiles(5)[:2] == (8, 1)
    assert plan_vocab_rows(128256)[0] == hardware.CE_ROW_BLOCK and plan_vocab_rows(5)[0] == 8
    # The row path needs CE_ROW_PROGRAMS_MIN_ROWS_PER_SM rows per SM; fewer keep the tiles.
    threshold = hardware.CE_ROW_PROGRAMS_MIN_ROWS_PER_SM * hardware.sm_count()
    dev = torch.device(device)
    assert use_row_programs(threshold, dev) and not use_row_programs(threshold - 1, dev)
    assert plan_chunks(16384, 128256) == 4096  # 1 GiB of bf16 logits, rows a multiple of 256
    assert plan_chunks(3, 10) == 3 and plan_chunks(10**6, 10**9) == 1


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_rows_over_several_tiles(backend, device, small_tiles, reduction, dtype):
    args = ce_args(device, 13, 70, dtype, weighted=True, seed=21)
    check(
        backend, "cross_entropy", args, grad_scalar=1.5, lse_square_scale=0.01, label_smoothing=0.15,
        reduction=reduction, softcap=6.0, return_z_loss=True,
    )  # fmt: skip
    check(backend, "cross_entropy", ce_args(device, 9, 100, dtype, seed=22), reduction=reduction)


def test_in_place_writes_the_gradient_into_the_logits(backend, device, small_tiles):
    """in_place=True writes the gradient into the logits' memory and equals the oracle."""
    args = ce_args(device, 11, 70, weighted=True, seed=23)
    logits, target, weight = args["logits"], args["target"], args["weight"]
    x = logits.clone().requires_grad_()
    buf = x.detach()
    loss = LigerCrossEntropyFunction.apply(x, target, weight, -100, 1e-3, 0.1, "mean", None, False, True)
    loss.backward()
    assert torch.equal(buf, x.grad), "the gradient was not written into the logits' memory"
    x64 = logits.double().requires_grad_()
    ce_contract.math(x64, target, weight.double(), -100, 1e-3, 0.1, "mean", None)[0].backward()
    torch.testing.assert_close(x.grad.double(), x64.grad, rtol=1e-4, atol=1e-6)


# weighted, label_smoothing, lse_square_scale, softcap, return_z_loss
ROW_OPTIONS = {
    "plain": (False, 0.0, 0.0, None, False),
    "weight-smoothing": (True, 0.2, 0.0, None, False),
    "zloss-softcap": (False, 0.0, 1e-2, 4.0, True),
    "everything": (True, 0.1, 1e-3, 5.0, True),
    "zeros-z-returned": (False, 0.0, 0.0, None, True),
}


@pytest.mark.parametrize("in_place", [False, True], ids=["copy", "in-place"])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("option", list(ROW_OPTIONS))
def test_row_programs(backend, device, row_programs, option, reduction, in_place):
    """The one-program-per-row forward (rows of 70 over three steps of 32, ignored rows) against
    the float64 oracle: loss, z-loss and gradient, for every option."""
    weighted, smoothing, zscale, softcap, return_z = ROW_OPTIONS[option]
    check(
        backend, "cross_entropy", ce_args(device, 13, 70, weighted=weighted, seed=40), grad_scalar=1.5,
        lse_square_scale=zscale, label_smoothing=smoothing, reduction=reduction, softcap=softcap,
        return_z_loss=return_z, in_place=in_place,
    )  # fmt: skip


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_row_programs_half(backend, device, row_programs, dtype):
    args = ce_args(device, 11, 100, dtype, weighted=True, seed=41)
    check(backend, "cross_entropy", args, label_smoothing=0.1, lse_square_scale=1e-3, softcap=8.0)


@pytest.mark.parametrize("ignore_index", [-100, 3])
def test_row_programs_ignored(backend, device, row_programs, ignore_index):
    """Every row ignored (loss 0, zero gradient, no NaN), and ignore_index inside the vocabulary."""
    args = ce_args(device, 9, 70, weighted=True, seed=42, ignore_index=ignore_index)
    for target in (args["target"], torch.full_like(args["target"], ignore_index)):
        for reduction in ("mean", "sum", "none"):
            check(
                backend, "cross_entropy", dict(args, target=target), lse_square_scale=1e-3, label_smoothing=0.1,
                reduction=reduction, return_z_loss=True,
            )  # fmt: skip


@pytest.mark.parametrize("path", ["row_programs", "tile_programs"])
def test_masked_vocabulary(backend, device, path, request, small_tiles):
    """-inf logits filling whole vocabulary steps (the first ones included) give the oracle's
    finite loss and gradient on both paths, not NaN from exp(-inf - -inf)."""
    request.getfixturevalue(path)
    args = ce_args(device, 10, 70, seed=43)
    logits = args["logits"].clone()
    logits[:, :40] = float("-inf")
    target = torch.where(args["target"] >= 0, 40 + args["target"] % 30, args["target"])
    for reduction in ("mean", "none"):
        check(backend, "cross_entropy", dict(args, logits=logits, target=target), reduction=reduction)


def test_row_programs_bad_target(backend, device, row_programs):
    """A target outside the vocabulary is still reported (the row kernel only masks its load)."""
    args = ce_args(device, 6, 70, seed=44)
    target = args["target"].clone()
    target[2] = 70
    with pytest.raises(ValueError, match="70"):
        backend.op("cross_entropy")(args["logits"], target, None, -100, 0.0, 0.0, "mean", None, False, False)


class _Allocations(TorchDispatchMode):
    """Every new tensor storage on ``device`` created while active (views and in-place results,
    which share their inputs' storage, are not new), with its shape and its size as the CUDA
    caching allocator counts it (multiples of 512 bytes). The sum bounds the peak."""

    def __init__(self, device):
        super().__init__()
        self.device_type = torch.device(device).type
        self.seen = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        inputs = {t.untyped_storage().data_ptr() for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)}
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor) and t.device.type == self.device_type:
                storage = t.untyped_storage()
                if storage.nbytes() and storage.data_ptr() not in inputs:
                    self.seen.append((str(func), tuple(t.shape), -(-storage.nbytes() // 512) * 512))
        return out


def _allocations_of_a_step(backend, device, n_rows, vocab, reduction="mean"):
    args = ce_args(device, n_rows, vocab, seed=45)
    x = args["logits"].requires_grad_()
    with _Allocations(device) as allocs:
        backend.op("cross_entropy")(x, args["target"], None, -100, 0.0, 0.0, reduction, None, False, True).backward()
    return allocs


def test_row_programs_allocate_no_partials(backend, device, monkeypatch):
    """The forward+backward of cross_entropy(in_place=True) on the row path allocates the per-row
    loss and lse and a few scalars only. Recorded at 40 rows (the interpreter is slow) and
    projected to 4096 rows, liger-kernel 0.8.5's benchmark shape: under its 53,760 bytes. The
    tile path, recorded the same way, shows its (rows, tiles) partials: the recorder sees them."""
    n, vocab, bench_rows = 40, 24, 4096
    monkeypatch.setattr(hardware, "CE_BLOCK", 8)  # 3 tiles per row on the tile path
    monkeypatch.setattr(hardware, "CE_ROW_PROGRAMS_MIN_ROWS_PER_SM", 10**9)
    tiles = _allocations_of_a_step(backend, device, n, vocab)
    assert any(shape == (n, 3) for _, shape, _ in tiles.seen), tiles.seen

    monkeypatch.setattr(hardware, "CE_ROW_PROGRAMS_MIN_ROWS_PER_SM", 0)
    monkeypatch.setattr(hardware, "CE_ROW_BLOCK", 8)
    for reduction in ("mean", "sum"):
        rows = _allocations_of_a_step(backend, device, n, vocab, reduction)
        row_sized = [(func, shape) for func, shape, _ in rows.seen if n in shape]
        # loss and lse (fp32, asserted by size below); no z, no target logits, no masks, no partials
        assert [shape for _, shape in row_sized] == [(n,), (n,)], rows.seen
        fixed = [(func, shape, size) for func, shape, size in rows.seen if n not in shape]
        assert all(size == 512 and max(shape, default=1) <= 4 for _, shape, size in fixed), fixed
        projected = 2 * 4 * bench_rows + sum(size for _, _, size in fixed)
        assert projected <= 52 * 1024, (projected, rows.seen)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="measures the CUDA caching allocator")
def test_peak_memory_at_4096_x_128256(backend):
    """liger-kernel's benchmark measure: max_memory_allocated during forward+backward minus the
    memory allocated before (inputs excluded), fp32 logits, in_place; liger-kernel 0.8.5: 53,760 bytes."""
    n, v = 4096, 128256
    logits = torch.randn(n, v, device="cuda").requires_grad_()
    target = torch.randint(0, v, (n,), device="cuda")
    ce = backend.op("cross_entropy")
    ce(logits, target, None, -100, 0.0, 0.0, "mean", None, False, True).backward()  # compile outside the measure
    logits.grad = None
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    ce(logits, target, None, -100, 0.0, 0.0, "mean", None, False, True).backward()
    torch.cuda.synchronize()
    extra = torch.cuda.max_memory_allocated() - base
    assert extra <= 53760, extra
