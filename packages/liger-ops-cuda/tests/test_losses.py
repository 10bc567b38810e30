"""CUDA-specific loss paths the shared suite does not reach with the default tile plans:
rows over several vocabulary tiles, the one-program-per-row cross-entropy forward (and its
memory), several token chunks in the fused linear losses, the deferred backward of reduction
"none", in-place gradients, device-side gradient scaling, and int64 row offsets."""

import pytest
import torch
import triton
import triton.language as tl
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from liger_core.conformance.cross_entropy_check import check_cross_entropy
from liger_core.conformance.cross_entropy_check import make_inputs as ce_inputs
from liger_core.conformance.fused_linear_cross_entropy_check import check_fused_linear_cross_entropy
from liger_core.conformance.fused_linear_cross_entropy_check import make_inputs as flce_inputs
from liger_core.conformance.fused_linear_jsd_check import check_fused_linear_jsd
from liger_core.conformance.fused_linear_jsd_check import make_inputs as fljsd_inputs
from liger_core.conformance.jsd_check import check_jsd
from liger_core.conformance.jsd_check import make_inputs as jsd_inputs
from liger_core.conformance.kl_div_check import check_kl_div
from liger_core.conformance.kl_div_check import make_inputs as kl_inputs
from liger_core.conformance.tvd_check import check_tvd
from liger_core.conformance.tvd_check import make_inputs as tvd_inputs
from liger_core.ops import cross_entropy as ce_contract
from liger_ops_cuda import BACKEND, hardware
from liger_ops_cuda import _ce_kernels as ce_kernels
from liger_ops_cuda._ce_kernels import _row_offset, row_plan, scale_unless_one, tile_plan, use_row_programs
from liger_ops_cuda.cross_entropy import LigerCrossEntropyFunction
from liger_ops_cuda.fused_linear_cross_entropy import chunk_tokens

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


@pytest.fixture
def small_tiles(monkeypatch):
    """Vocabulary tiles of 32: every row below spans several tiles with a ragged last one."""
    monkeypatch.setattr(hardware, "CE_BLOCK", 32)
    monkeypatch.setattr(hardware, "DIV_BLOCK", 32)


@pytest.fixture
def small_chunks(monkeypatch):
    """Token chunks of 8 (ragged last chunk) in the fused linear losses."""
    monkeypatch.setattr(hardware, "FLCE_CHUNK_ELEMENTS", 8 * 70)
    monkeypatch.setattr(hardware, "FLJSD_CHUNK_ELEMENTS", 8 * 70)
    monkeypatch.setattr(hardware, "FLCE_CHUNK_MULTIPLE", 4)


class _NotLaunched:
    """Stands in for a kernel that must not run: launching it fails the test."""

    def __init__(self, name):
        self.name = name

    def __getitem__(self, grid):
        raise AssertionError(f"{self.name} was launched")


@pytest.fixture
def row_programs(monkeypatch):
    """Every cross_entropy forward on one program per row, rows streamed in steps of 32 (rows
    below span several with a ragged last one); the (row, tile) forward must not run."""
    monkeypatch.setattr(hardware, "CE_ROW_PROGRAMS_MIN_ROWS_PER_SM", 0)
    monkeypatch.setattr(hardware, "CE_ROW_BLOCK", 32)
    monkeypatch.setattr(ce_kernels, "_ce_partials_kernel", _NotLaunched("_ce_partials_kernel"))


@pytest.fixture
def tile_programs(monkeypatch):
    """Every cross_entropy forward on (row, tile) programs; the row kernel must not run."""
    monkeypatch.setattr(hardware, "CE_ROW_PROGRAMS_MIN_ROWS_PER_SM", 10**9)
    monkeypatch.setattr(ce_kernels, "_ce_row_kernel", _NotLaunched("_ce_row_kernel"))


def test_tile_plan_and_chunks():
    assert tile_plan(128256)[:2] == (hardware.CE_BLOCK, triton.cdiv(128256, hardware.CE_BLOCK))
    assert tile_plan(5)[:2] == (8, 1)
    assert row_plan(128256)[0] == hardware.CE_ROW_BLOCK and row_plan(5)[0] == 8
    # The row path needs CE_ROW_PROGRAMS_MIN_ROWS_PER_SM rows per SM; fewer keep the tiles.
    threshold = hardware.CE_ROW_PROGRAMS_MIN_ROWS_PER_SM * hardware.sm_count()
    dev = torch.device(DEVICE)
    assert use_row_programs(threshold, dev) and not use_row_programs(threshold - 1, dev)
    # 4096 x 128256 bf16 logits: 512-token chunks (128 MiB), a multiple of 128 tokens.
    assert chunk_tokens(4096, 128256) == 512
    assert chunk_tokens(3, 10) == 3 and chunk_tokens(10**6, 10**9) == 1


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_rows_over_several_tiles(small_tiles, reduction, dtype):
    logits, target, weight = ce_inputs(13, 70, dtype, DEVICE, weighted=True, seed=21)
    check_cross_entropy(
        BACKEND, logits, target, weight, lse_square_scale=0.01, label_smoothing=0.15, reduction=reduction,
        softcap=6.0, return_z_loss=True, grad_scalar=1.5,
    )  # fmt: skip
    logits, target, _ = ce_inputs(9, 100, dtype, DEVICE, seed=22)
    check_cross_entropy(BACKEND, logits, target, reduction=reduction)


def test_cross_entropy_in_place_function(small_tiles):
    """The internal in-place variant (used on logits the caller hands over) writes the gradient
    into the logits' memory and equals the oracle."""
    logits, target, weight = ce_inputs(11, 70, torch.float32, DEVICE, weighted=True, seed=23)
    x = logits.clone().requires_grad_()
    buf = x.detach()
    loss, _ = LigerCrossEntropyFunction.apply(x, target, weight, -100, 1e-3, 0.1, "mean", None, True)
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
def test_cross_entropy_row_programs(row_programs, option, reduction, in_place):
    """The one-program-per-row forward (rows of 70 over three steps of 32, ignored rows) against
    the float64 oracle: loss, z-loss and gradient, for every option."""
    weighted, smoothing, zscale, softcap, return_z = ROW_OPTIONS[option]
    logits, target, weight = ce_inputs(13, 70, torch.float32, DEVICE, weighted=weighted, seed=40)
    check_cross_entropy(
        BACKEND, logits, target, weight, lse_square_scale=zscale, label_smoothing=smoothing, reduction=reduction,
        softcap=softcap, return_z_loss=return_z, grad_scalar=1.5, in_place=in_place,
    )  # fmt: skip


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_cross_entropy_row_programs_half(row_programs, dtype):
    logits, target, weight = ce_inputs(11, 100, dtype, DEVICE, weighted=True, seed=41)
    check_cross_entropy(BACKEND, logits, target, weight, label_smoothing=0.1, lse_square_scale=1e-3, softcap=8.0)


@pytest.mark.parametrize("ignore_index", [-100, 3])
def test_cross_entropy_row_programs_ignored(row_programs, ignore_index):
    """Every row ignored (loss 0, zero gradient, no NaN), and ignore_index inside the vocabulary."""
    logits, target, weight = ce_inputs(9, 70, torch.float32, DEVICE, weighted=True, seed=42, ignore_index=ignore_index)
    for t in (target, torch.full_like(target, ignore_index)):
        for reduction in ("mean", "sum", "none"):
            check_cross_entropy(
                BACKEND, logits, t, weight, ignore_index, 1e-3, 0.1, reduction, return_z_loss=True
            )  # fmt: skip


@pytest.mark.parametrize("path", ["row_programs", "tile_programs"])
def test_cross_entropy_masked_vocabulary(path, request, small_tiles):
    """-inf logits filling whole vocabulary steps (the first ones included) give the oracle's
    finite loss and gradient on both paths, not NaN from exp(-inf - -inf)."""
    request.getfixturevalue(path)
    logits, target, _ = ce_inputs(10, 70, torch.float32, DEVICE, seed=43)
    logits[:, :40] = float("-inf")
    target = torch.where(target >= 0, 40 + target % 30, target)
    for reduction in ("mean", "none"):
        check_cross_entropy(BACKEND, logits, target, reduction=reduction)


def test_cross_entropy_row_programs_bad_target(row_programs):
    """A target outside the vocabulary is still reported (the row kernel only masks its load)."""
    logits, target, _ = ce_inputs(6, 70, torch.float32, DEVICE, seed=44)
    target[2] = 70
    with pytest.raises(ValueError, match="70"):
        BACKEND.ops["cross_entropy"](logits, target)


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

    def total(self):
        return sum(size for _, _, size in self.seen)


def _allocations_of_a_step(n_rows, vocab, **options):
    logits, target, _ = ce_inputs(n_rows, vocab, torch.float32, DEVICE, seed=45)
    x = logits.requires_grad_()
    with _Allocations(DEVICE) as allocs:
        BACKEND.ops["cross_entropy"](x, target, in_place=True, **options).backward()
    return allocs


def test_cross_entropy_row_programs_allocate_no_partials(monkeypatch):
    """The forward+backward of cross_entropy(in_place=True) on the row path allocates the per-row
    loss and lse and a few scalars only. Recorded at 40 rows (the interpreter is slow) and
    projected to 4096 rows, liger-kernel 0.8.5's benchmark shape: under its 53,760 bytes. The
    tile path, recorded the same way, shows its (rows, tiles) partials: the recorder sees them."""
    n, vocab, bench_rows = 40, 24, 4096
    monkeypatch.setattr(hardware, "CE_BLOCK", 8)  # 3 tiles per row on the tile path
    monkeypatch.setattr(hardware, "CE_ROW_PROGRAMS_MIN_ROWS_PER_SM", 10**9)
    tiles = _allocations_of_a_step(n, vocab)
    assert any(shape == (n, 3) for _, shape, _ in tiles.seen), tiles.seen

    monkeypatch.setattr(hardware, "CE_ROW_PROGRAMS_MIN_ROWS_PER_SM", 0)
    monkeypatch.setattr(hardware, "CE_ROW_BLOCK", 8)
    for reduction in ("mean", "sum"):
        rows = _allocations_of_a_step(n, vocab, reduction=reduction)
        row_sized = [(func, shape) for func, shape, _ in rows.seen if n in shape]
        # loss and lse (fp32, asserted by size below); no z, no target logits, no masks, no partials
        assert [shape for _, shape in row_sized] == [(n,), (n,)], rows.seen
        fixed = [(func, shape, size) for func, shape, size in rows.seen if n not in shape]
        assert all(size == 512 and max(shape, default=1) <= 4 for _, shape, size in fixed), fixed
        projected = 2 * 4 * bench_rows + sum(size for _, _, size in fixed)
        assert projected <= 52 * 1024, (projected, rows.seen)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="measures the CUDA caching allocator")
def test_cross_entropy_peak_memory_at_4096_x_128256():
    """liger-kernel's benchmark measure: max_memory_allocated during forward+backward minus the
    memory allocated before (inputs excluded), fp32 logits, in_place; liger-kernel 0.8.5: 53,760 bytes."""
    n, v = 4096, 128256
    logits = torch.randn(n, v, device="cuda").requires_grad_()
    target = torch.randint(0, v, (n,), device="cuda")
    BACKEND.ops["cross_entropy"](logits, target, in_place=True).backward()  # compile outside the measure
    logits.grad = None
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    BACKEND.ops["cross_entropy"](logits, target, in_place=True).backward()
    torch.cuda.synchronize()
    extra = torch.cuda.max_memory_allocated() - base
    assert extra <= 53760, extra


@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_flce_row_programs_in_place_gradient(row_programs, small_chunks, reduction):
    """fused_linear_cross_entropy through the row forward (bias, class weights, every option):
    ce_rows writes the gradient over the chunk's logits after the row kernel has read them."""
    x, w, t, b, cw = flce_inputs(21, 16, 70, torch.float32, DEVICE, seed=46, bias=True, ce_weight=True)
    check_fused_linear_cross_entropy(
        BACKEND, x, w, t, b, cw, lse_square_scale=0.01, label_smoothing=0.1, reduction=reduction, softcap=5.0,
        return_z_loss=True, grad_scalar=0.75,
    )  # fmt: skip


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_flce_several_chunks_every_option(small_tiles, small_chunks, reduction):
    x, w, t, b, cw = flce_inputs(37, 16, 70, torch.float32, DEVICE, seed=24, bias=True, ce_weight=True)
    assert chunk_tokens(37, 70) == 8
    check_fused_linear_cross_entropy(
        BACKEND, x, w, t, b, cw, lse_square_scale=0.01, label_smoothing=0.1, reduction=reduction, softcap=5.0,
        return_z_loss=True, grad_scalar=0.75,
    )  # fmt: skip


@pytest.mark.parametrize("accum_dtype", [None, torch.float32], ids=["accum-none", "accum-fp32"])
def test_flce_bf16_several_chunks(small_chunks, accum_dtype):
    x, w, t, b, _ = flce_inputs(30, 16, 70, torch.bfloat16, DEVICE, seed=25, bias=True)
    check_fused_linear_cross_entropy(BACKEND, x, w, t, b, accum_dtype=accum_dtype)


def test_flce_deferred_none_without_input_grad(small_chunks):
    x, w, t, _, _ = flce_inputs(20, 8, 70, torch.float32, DEVICE, seed=26)
    check_fused_linear_cross_entropy(BACKEND, x, w, t, reduction="none", input_grad=False)


def test_flce_fp32_weight_with_bf16_input(small_chunks):
    """An fp32 lm_head with bf16 activations: the GEMMs run in bf16 (as autocast would) and
    grad_weight comes back in fp32."""
    x, w, t, _, _ = flce_inputs(20, 16, 70, torch.bfloat16, DEVICE, seed=27)
    w32 = w.float().requires_grad_()
    xi = x.clone().requires_grad_()
    BACKEND.ops["fused_linear_cross_entropy"](xi, w32, t).backward()
    assert w32.grad.dtype == torch.float32 and xi.grad.dtype == torch.bfloat16
    x64, w64 = x.double().requires_grad_(), w.double().requires_grad_()
    ce_contract.math(x64 @ w64.t(), t, None, -100, 0.0, 0.0, "mean", None)[0].backward()
    torch.testing.assert_close(w32.grad.double(), w64.grad, rtol=2e-2, atol=2e-2 * float(w64.grad.abs().max()))


@pytest.mark.parametrize("reduction", ["batchmean", "sum", "mean", "none"])
def test_divergences_over_several_tiles(small_tiles, reduction):
    check_kl_div(BACKEND, *kl_inputs(7, 70, torch.float32, DEVICE, seed=28), reduction=reduction, grad_scalar=0.5)
    check_kl_div(BACKEND, *kl_inputs(7, 70, torch.bfloat16, DEVICE, log_target=True, seed=29), reduction, True)
    p, q, lab = tvd_inputs(9, 70, torch.float32, DEVICE, seed=30)
    check_tvd(BACKEND, p, q, lab, reduction, grad_scalar=3.0)
    check_tvd(BACKEND, p, q, None, reduction)


@pytest.mark.parametrize("beta", [0.0, 0.4, 1.0])
def test_jsd_over_several_tiles(small_tiles, beta):
    s, t, lab = jsd_inputs(9, 70, torch.float32, DEVICE, seed=31)
    check_jsd(BACKEND, s, t, lab, beta, grad_scalar=2.0)


@pytest.mark.parametrize("beta,temperature", [(0.5, 1.0), (0.0, 2.0), (1.0, 0.5)])
def test_fused_linear_jsd_several_chunks(small_tiles, small_chunks, beta, temperature):
    xs, ws, xt, wt, lab = fljsd_inputs(30, 8, 12, 70, torch.float32, DEVICE, seed=32)
    check_fused_linear_jsd(BACKEND, xs, ws, xt, wt, lab, beta, temperature=temperature, grad_scalar=0.5)


def test_scale_unless_one():
    g = torch.arange(10000, dtype=torch.float32, device=DEVICE)
    scale_unless_one(g, torch.ones(1, device=DEVICE))
    assert torch.equal(g, torch.arange(10000, dtype=torch.float32, device=DEVICE))
    scale_unless_one(g, torch.full((1,), -2.0, device=DEVICE))
    assert torch.equal(g, -2 * torch.arange(10000, dtype=torch.float32, device=DEVICE))


@triton.jit
def _offsets_kernel(ROWS, OUT, row_stride):
    i = tl.program_id(0)
    tl.store(OUT + i, _row_offset(tl.load(ROWS + i), row_stride))


def test_row_offsets_are_int64_beyond_2_31():
    """The row offset every loss kernel uses, at rows x stride far past 2**31 (4096 x 128256 fp32
    logits pass it at row 16744; 65536 tokens reach 8.4e9), computed by the kernels' own helper
    without allocating the tensor it would address."""
    rows = torch.tensor([0, 1, 16744, 65535, 2**31 // 128256 + 1], dtype=torch.int32, device=DEVICE)
    out = torch.zeros(rows.numel(), dtype=torch.int64, device=DEVICE)
    _offsets_kernel[(rows.numel(),)](rows, out, 128256)
    assert out.tolist() == [r * 128256 for r in rows.tolist()]
    assert max(out.tolist()) > 2**31


def test_loss_kernels_compile_for_h100():
    """The real Triton compiler (not the interpreter) builds a variant of every loss kernel path
    for sm_90a with its bundled ptxas; no GPU needed. `compile_loss_kernels.py --all` does all."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).with_name("compile_loss_kernels.py")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    run = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=900)
    if run.returncode == 2:
        pytest.skip(run.stderr.strip()[-300:] or "no NVIDIA Triton backend here")
    assert run.returncode == 0, run.stderr[-3000:]
    assert "compiled" in run.stdout
