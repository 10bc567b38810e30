"""Every tile plan for real model shapes passes the launch guard on every SoC of the table.

The interpreter checks neither the grid limit nor the UB, so this sweep is what shows that
no shape a model produces overflows an Ascend core: hidden sizes 64..65536 (those of
LLaMA, Qwen, Mistral, Gemma, Phi, DeepSeek, and odd ones), 1..65536 rows, every dtype
pair, with and without weight, forward and backward.
"""

from __future__ import annotations

import itertools

import pytest
import torch

from liger_ops_ascend import hardware, rms_norm
from liger_ops_ascend.launch import check

HIDDEN = [
    64, 100, 127, 128, 576, 896, 1000, 1024, 1536, 2048, 2304, 2560, 3072, 3584, 4096, 5120, 6144,
    7168, 8192, 11008, 12288, 14336, 16384, 18432, 20000, 28672, 32768, 49152, 53248, 65535, 65536,
]  # fmt: skip
ROWS = [1, 3, 47, 48, 100, 1000, 4096, 8191, 16384, 65536]
DTYPES = [  # (x, weight)
    (torch.float32, torch.float32),
    (torch.bfloat16, torch.bfloat16),
    (torch.float16, torch.float16),
    (torch.bfloat16, torch.float32),
    (torch.float16, torch.float32),
    (torch.float32, None),
    (torch.bfloat16, None),
    (torch.float16, None),
]


@pytest.mark.parametrize("soc", list(hardware.SOC_TABLE))
def test_every_plan_fits_grid_and_ub(soc):
    hw = hardware.for_soc(soc)
    checked = 0
    for (x_dtype, w_dtype), hidden, rows, mode, direction in itertools.product(
        DTYPES, HIDDEN, ROWS, ("llama", "gemma"), ("forward", "backward")
    ):
        p = rms_norm.plan_tiles(direction, rows, hidden, x_dtype, w_dtype, mode, hw)
        for kernel in p.kernels:
            check(kernel, hw)  # grid < 65536 and live tiles within the UB budget
            assert kernel.grid == (p.programs,)
            checked += 1
        what = f"{soc} {direction} {rows}x{hidden} {x_dtype}/{w_dtype}: {p}"
        # The tiles cover the problem, with no program-wide idle iteration.
        assert p.block_n * p.n_chunks >= hidden and p.block_n * (p.n_chunks - 1) < hidden, what
        assert p.programs * p.n_iters * p.block_m >= rows, what
        assert (p.n_iters - 1) * p.programs * p.block_m < rows, what
        assert 1 <= p.programs <= hw.vector_cores, what
        # Powers of two (tl.arange) and a tail of at least one 32-byte block.
        assert p.block_m & (p.block_m - 1) == 0 and p.block_n & (p.block_n - 1) == 0, what
        assert p.block_n * x_dtype.itemsize >= hardware.ALIGN_BYTES, what
        # Short rows share a tile; wide rows are chunked one or two rows at a time.
        if hidden <= 128 and rows >= 16 * hw.vector_cores:
            assert p.block_m >= 8 and not p.chunked, what
        if hidden >= 16384:
            assert p.chunked, what
    assert checked > 10000


def test_bigger_ub_gives_bigger_tiles():
    # LLaMA-7B rows in bf16: chunked on a 192 KiB UB, one tile per row on the 950's 256 KiB.
    a2, a5 = (
        rms_norm.plan_tiles("forward", 4096, 4096, torch.bfloat16, torch.bfloat16, "llama", hardware.for_soc(soc))
        for soc in ("Ascend910B2", "Ascend950")
    )
    assert a2.chunked and not a5.chunked and a5.block_n == 4096


# -- the 1.1 norm family ---------------------------------------------------------------------

NORM_DTYPES = [torch.float32, torch.bfloat16, torch.float16]
NORM_HIDDEN = [64, 127, 896, 4096, 8192, 14336, 20000, 32768, 65535, 65536]
NORM_ROWS = [1, 47, 1000, 16384, 65536]


def _check_row_plan(p, hw, rows, hidden, what):
    for kernel in p.kernels:
        check(kernel, hw)
        assert kernel.grid == (p.programs,), what
    assert 1 <= p.programs <= hw.vector_cores, what
    assert p.block_n * p.n_chunks >= hidden and p.programs * p.n_iters * p.block_m >= rows, what
    assert p.block_m & (p.block_m - 1) == 0 and p.block_n & (p.block_n - 1) == 0, what


@pytest.mark.parametrize("soc", ["Ascend910B4", "Ascend950"])
def test_norm_family_plans_fit_grid_and_ub(soc):
    from liger_ops_ascend import dyt, layer_norm, poly_norm

    hw = hardware.for_soc(soc)
    for dtype, hidden, rows, direction in itertools.product(
        NORM_DTYPES, NORM_HIDDEN, NORM_ROWS, ("forward", "backward")
    ):
        what = f"{soc} {direction} {rows}x{hidden} {dtype}"
        for p in (
            rms_norm.plan_tiles(direction, rows, hidden, dtype, torch.float32, "llama", hw, torch.float32),
            rms_norm.plan_tiles(direction, rows, hidden, dtype, dtype, "gemma", hw, dtype),
            layer_norm.plan_tiles(direction, rows, hidden, dtype, torch.float32, torch.float32, hw),
            layer_norm.plan_tiles(direction, rows, hidden, dtype, None, None, hw),
            poly_norm.plan_tiles(direction, rows, hidden, dtype, hw),
            dyt.plan_tiles(direction, rows, hidden, dtype, torch.float32, dtype, hw),
        ):
            _check_row_plan(p, hw, rows, hidden, f"{what}: {p}")
            if hidden <= 128 and rows >= 16 * hw.vector_cores:
                assert p.block_m >= 8, what  # short rows share a tile


@pytest.mark.parametrize("soc", ["Ascend910B4", "Ascend950"])
def test_group_norm_plans_never_launch_a_program_per_group(soc):
    # batch x groups far beyond 65536 (the grid a program-per-group design would launch).
    from liger_ops_ascend import group_norm

    hw = hardware.for_soc(soc)
    for (batch, channels, groups, spatial), dtype in itertools.product(
        [(1, 64, 32, 1), (4096, 256, 32, 1), (65536, 64, 64, 1), (8192, 512, 32, 49), (32, 320, 32, 64 * 64),
         (2, 128, 1, 512 * 512), (1, 4096, 2, 3)],
        NORM_DTYPES,
    ):  # fmt: skip
        p = group_norm.plan_groups(batch, channels, groups, spatial, dtype, torch.float32, torch.float32, hw)
        for kernel in p.kernels:
            check(kernel, hw)
            assert kernel.grid == (p.programs,) and p.programs <= hw.vector_cores
        assert p.programs * p.n_iters >= batch * groups
        assert p.block_c * p.n_c_chunks >= channels // groups and p.block_s * p.n_s_chunks >= spatial


# -- the 1.2 activations ---------------------------------------------------------------------


@pytest.mark.parametrize("soc", ["Ascend910B4", "Ascend950"])
def test_activation_plans_fit_grid_and_ub(soc):
    from liger_ops_ascend import _glu, _rotary, relu_squared, softmax, sparsemax

    hw = hardware.for_soc(soc)
    for dtype in NORM_DTYPES:
        # swiglu/geglu: up to 65536 tokens x 28672 (LLaMA-70B intermediate) elements.
        for n, act, direction in itertools.product(
            [1, 100, 4099, 14336, 4096 * 14336, 65536 * 28672], (_glu.SILU, _glu.GELU_TANH), ("forward", "backward")
        ):
            p = _glu.plan_tiles(act, direction, n, dtype, hw)
            check(p.kernels[0], hw)
            assert p.programs <= hw.vector_cores and p.programs * p.n_iters * p.block >= n
            if act == _glu.SILU:  # relu_squared: the same element counts (Nemotron's up projection)
                p = relu_squared.plan_tiles(direction, n, dtype, hw)
                check(p.kernels[0], hw)
                assert p.programs <= hw.vector_cores and p.programs * p.n_iters * p.block >= n
        for rows, hidden, direction in itertools.product(NORM_ROWS, NORM_HIDDEN + [262144], ("forward", "backward")):
            for mod in (softmax, sparsemax):
                _check_row_plan(mod.plan_tiles(direction, rows, hidden, dtype, hw), hw, rows, hidden, f"{soc} {mod}")
        # rope: up to 65536 tokens x 128 heads of 256.
        for n_pos, heads, dim in itertools.product([1, 4096, 65536 * 8], [1, 8, 32, 128], [2, 64, 128, 256]):
            p = _rotary.plan_rotary("rope_forward", n_pos, heads, dim, (dtype, torch.float32), torch.float32, hw)
            check(p.kernel, hw)
            assert p.programs <= hw.vector_cores and p.block_d >= dim // 2


# -- the 1.3 losses --------------------------------------------------------------------------


@pytest.mark.parametrize("soc", ["Ascend910B4", "Ascend950"])
def test_loss_plans_keep_vocab_chunks_in_the_ub(soc):
    from liger_ops_ascend import _cross_entropy, _divergence

    hw = hardware.for_soc(soc)
    vocabs = [2, 1000, 32000, 32768, 50257, 128256, 151936, 152064, 256000, 262144]
    for dtype, vocab, tokens, direction in itertools.product(
        NORM_DTYPES, vocabs, [1, 47, 4096, 65536], ("forward", "backward")
    ):
        what = f"{soc} cross_entropy {direction} {tokens}x{vocab} {dtype}"
        for w_dtype in (None, torch.float32):
            p = _cross_entropy.plan_tiles(direction, tokens, vocab, dtype, w_dtype, hw)
            _check_row_plan(p, hw, tokens, vocab, what)
            if vocab >= 32768:
                assert p.chunked, what  # a large vocabulary is never one tile
        for kind in (_divergence.KL_DIV, _divergence.JSD, _divergence.TVD):
            p = _divergence.plan_tiles(kind, tokens, vocab, dtype, torch.float32, hw)
            _check_row_plan(p, hw, tokens, vocab, f"{soc} divergence {kind} {tokens}x{vocab}")
