"""Every tile plan for real model shapes passes the launch guard on every SoC of the table.

The interpreter checks neither the grid limit nor the UB, so this sweep is what shows that
no shape a model produces overflows an Ascend core (by the UB model, ub_model.md): hidden
sizes 64..65536 (those of LLaMA, Qwen, Mistral, Gemma, Phi, DeepSeek, and odd ones),
1..65536 rows, every dtype pair, with and without weight, forward and backward. It also pins
what the model promises: tile shapes that never depend on the row count, one row per tile over
unaligned rows, and one pass per row for the norms at hidden 4096 in bf16.
"""

from __future__ import annotations

import itertools

import pytest
import torch
import triton

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
    shapes = {}
    for (x_dtype, w_dtype), hidden, rows, mode, direction in itertools.product(
        DTYPES, HIDDEN, ROWS, ("llama", "gemma"), ("forward", "backward")
    ):
        p = rms_norm.plan_tiles(direction, rows, hidden, x_dtype, w_dtype, mode, hw)
        for kernel in p.kernels:
            check(kernel, hw)  # grid < 65536, live tiles within the UB budget, aligned rows, int32 offsets
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
        # Short aligned rows share a tile; unaligned rows never do; wide rows are chunked.
        aligned = hidden * x_dtype.itemsize % hardware.ALIGN_BYTES == 0
        if hidden <= 128 and aligned:
            assert p.block_m >= 8 and not p.chunked, what
        if not aligned:
            assert p.block_m == 1, what
        if hidden >= 16384:
            assert p.chunked, what
        # The tile shape (what the kernel is compiled for) is the same for every row count.
        key = (x_dtype, w_dtype, hidden, mode, direction)
        assert shapes.setdefault(key, (p.block_m, p.block_n)) == (p.block_m, p.block_n), what
    assert checked > 10000


@pytest.mark.parametrize("soc", list(hardware.SOC_TABLE))
def test_llama_hidden_4096_bf16_norms_plan_one_pass_per_row(soc):
    from liger_ops_ascend import layer_norm

    hw = hardware.for_soc(soc)
    bf16 = torch.bfloat16
    for direction, rows in itertools.product(("forward", "backward"), ROWS):
        for p in (
            rms_norm.plan_tiles(direction, rows, 4096, bf16, bf16, "llama", hw),
            rms_norm.plan_tiles(direction, rows, 4096, bf16, bf16, "llama", hw, bf16),  # fused_add_rms_norm
            layer_norm.plan_tiles(direction, rows, 4096, bf16, bf16, bf16, hw),
        ):
            assert not p.chunked and p.block_n == 4096 and len(p.kernels) == 1, (soc, direction, rows, p)


@pytest.mark.parametrize("soc", list(hardware.SOC_TABLE))
def test_flat_activation_blocks_are_the_largest_the_ub_allows(soc):
    import functools

    from liger_ops_ascend import glu, relu_squared

    hw = hardware.for_soc(soc)
    # (name, plan of (direction, n, dtype), tiles of (direction, block, element bytes))
    ops = [
        (
            glu._NAMES[act],
            functools.partial(glu.plan_tiles, act),
            lambda direction, block, xb, act=act: getattr(glu, f"{direction}_tiles")(block, xb, act),
        )
        for act in (glu.SILU, glu.GELU_TANH)
    ]
    ops.append(
        (
            "relu_squared",
            relu_squared.plan_tiles,
            lambda direction, block, xb: getattr(relu_squared, f"{direction}_tiles")(block, xb),
        )
    )
    for (name, plan, tiles), dtype, direction in itertools.product(
        ops, (torch.bfloat16, torch.float32), ("forward", "backward")
    ):
        what = (soc, name, dtype, direction)
        p = plan(direction, 4096 * 14336, dtype, hw)
        assert p.kernels[0].ub_bytes <= hw.ub_budget, what
        assert p.kernels[0].tiles == tuple(tiles(direction, p.block, dtype.itemsize)), what
        twice = sum(t.nbytes for t in tiles(direction, 2 * p.block, dtype.itemsize))
        assert twice > hw.ub_budget or 2 * p.block > hardware.MAX_BLOCK_N, (*what, p.block)
        # The block does not depend on the element count (no recompile per batch size).
        assert plan(direction, 1000, dtype, hw).block == p.block, what


def test_bigger_ub_gives_bigger_tiles():
    # LLaMA-3-70B rows (8192) in bf16: chunked on a 192 KiB UB, one tile per row on the 950's 256 KiB.
    a2, a5 = (
        rms_norm.plan_tiles("forward", 4096, 8192, torch.bfloat16, torch.bfloat16, "llama", hardware.for_soc(soc))
        for soc in ("Ascend910B2", "Ascend950")
    )
    assert a2.chunked and not a5.chunked and a5.block_n == 8192


def test_row_strides_set_alignment_and_int32_caps():
    hw = hardware.for_soc("Ascend910B2")
    bf16 = torch.bfloat16
    dense = rms_norm.plan_tiles("forward", 4096, 64, bf16, bf16, "llama", hw)
    assert dense.block_m > 1
    # A view with a 100-element row stride (200 bytes): one row per tile.
    view = rms_norm.plan_tiles("forward", 4096, 64, bf16, bf16, "llama", hw, row_strides=[(100, 2), (64, 2)])
    assert view.block_m == 1 and view.kernels[0].row_pitches == (128, 200)
    # A huge (aligned) row stride: no more rows per tile than keep in-tile offsets in int32.
    far = rms_norm.plan_tiles("forward", 4096, 64, bf16, bf16, "llama", hw, row_strides=[(2**28, 2), (64, 2)])
    assert far.block_m == 8 and far.kernels[0].int32_extent == 7 * 2**28 + 64  # 16 rows: past int32
    for p in (dense, view, far):
        check(p.kernels[0], hw)


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
    from liger_ops_ascend import attn_res, dyt, layer_norm, poly_norm

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
            # attn_res at liger-kernel's benchmark depth and at 17 blocks (a 32-lane score tile).
            attn_res.plan_tiles(direction, rows, hidden, 8, dtype, dtype, dtype, hw),
            attn_res.plan_tiles(direction, rows, hidden, 17, dtype, torch.float32, torch.float32, hw),
        ):
            _check_row_plan(p, hw, rows, hidden, f"{what}: {p}")
            if hidden <= 128 and hidden * dtype.itemsize % hardware.ALIGN_BYTES == 0:
                assert p.block_m >= 8, what  # short aligned rows share a tile
            if hidden * dtype.itemsize % hardware.ALIGN_BYTES:
                assert p.block_m == 1, what  # unaligned rows never do


@pytest.mark.parametrize("soc", ["Ascend910B4", "Ascend950"])
def test_group_norm_plans_never_launch_a_program_per_group(soc):
    # batch x groups far beyond 65536 (the grid a program-per-group design would launch).
    from liger_ops_ascend import group_norm

    hw = hardware.for_soc(soc)
    for (batch, channels, groups, spatial), dtype in itertools.product(
        [(1, 64, 32, 1), (4096, 256, 32, 1), (65536, 64, 64, 1), (8192, 512, 32, 49), (32, 320, 32, 64 * 64),
         (2, 128, 1, 512 * 512), (1, 4096, 2, 3), (16384, 4096, 64, 1)],
        NORM_DTYPES,
    ):  # fmt: skip
        p = group_norm.plan_groups(batch, channels, groups, spatial, dtype, torch.float32, torch.float32, hw)
        for kernel in p.kernels:
            check(kernel, hw)
            assert kernel.grid == (p.programs,) and p.programs <= hw.vector_cores
        assert p.programs * p.n_iters >= p.n_blocks
        cpg = channels // groups
        if p.group_rows:
            # Several whole groups per tile: no program walks one tiny group at a time.
            assert spatial == 1 and p.block_c > 1 and p.block_s >= cpg and p.n_gblocks * p.block_c >= groups
            assert p.n_blocks == batch * p.n_gblocks
        else:
            assert p.n_blocks == batch * groups
            assert p.block_c * p.n_c_chunks >= cpg and p.block_s * p.n_s_chunks >= spatial
        # A per-token norm over head groups (64 of 64 channels, aligned rows) tiles several groups.
        if (channels // groups, spatial) == (8, 1) and dtype == torch.float32:
            assert p.group_rows


# -- the 1.2 activations ---------------------------------------------------------------------


@pytest.mark.parametrize("soc", ["Ascend910B4", "Ascend950"])
def test_activation_plans_fit_grid_and_ub(soc):
    from liger_ops_ascend import glu, relu_squared, rotary, softmax, sparsemax

    hw = hardware.for_soc(soc)
    for dtype in NORM_DTYPES:
        # swiglu/geglu: up to 65536 tokens x 28672 (LLaMA-70B intermediate) elements.
        for n, act, direction in itertools.product(
            [1, 100, 4099, 14336, 4096 * 14336, 65536 * 28672], (glu.SILU, glu.GELU_TANH), ("forward", "backward")
        ):
            p = glu.plan_tiles(act, direction, n, dtype, hw)
            check(p.kernels[0], hw)
            assert p.programs <= hw.vector_cores and p.programs * p.n_iters * p.block >= n
            if act == glu.SILU:  # relu_squared: the same element counts (Nemotron's up projection)
                p = relu_squared.plan_tiles(direction, n, dtype, hw)
                check(p.kernels[0], hw)
                assert p.programs <= hw.vector_cores and p.programs * p.n_iters * p.block >= n
        # fused_gate_up_swiglu: up to 65536 tokens x halves of 28672, odd halves; one row per block.
        for rows, half, direction in itertools.product(
            [1, 3, 4096, 65536], [1, 100, 4099, 14336, 28672], ("forward", "backward")
        ):
            p = glu.plan_gate_up(direction, rows, half, dtype, hw)
            check(p.flat.kernels[0], hw)
            assert p.flat.programs <= hw.vector_cores and p.flat.programs * p.flat.n_iters >= rows * p.n_col_blocks
            assert p.n_col_blocks * p.flat.block >= half > (p.n_col_blocks - 1) * p.flat.block
            assert p.flat.block <= glu.plan_tiles(glu.SILU, direction, rows * half, dtype, hw).block
        for rows, hidden, direction in itertools.product(NORM_ROWS, NORM_HIDDEN + [262144], ("forward", "backward")):
            for mod in (softmax, sparsemax):
                _check_row_plan(mod.plan_tiles(direction, rows, hidden, dtype, hw), hw, rows, hidden, f"{soc} {mod}")
        # rope: up to 65536 tokens x 128 heads of 256.
        for n_pos, heads, dim in itertools.product([1, 4096, 65536 * 8], [1, 8, 32, 128], [2, 64, 128, 256]):
            p = rotary.plan_rotary("rope_forward", n_pos, heads, dim, (dtype, torch.float32), torch.float32, hw)
            check(p.kernel, hw)
            assert p.programs <= hw.vector_cores and p.block_d >= dim // 2
            # llama4_rope: the same kernel on interleaved pairs (stride-2 halves, one table value a pair).
            p = rotary.plan_rotary(
                "llama4_rope_forward", n_pos, heads, dim, (dtype,), torch.float32, hw, interleaved=True
            )
            check(p.kernel, hw)
            assert p.programs <= hw.vector_cores and p.block_d >= dim // 2


# -- the 1.3 losses --------------------------------------------------------------------------


@pytest.mark.parametrize("soc", ["Ascend910B4", "Ascend950"])
def test_loss_plans_keep_vocab_chunks_in_the_ub(soc):
    from liger_ops_ascend import _cross_entropy, divergence, fused_linear_scaled_cross_entropy

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
        for kind in (divergence.KL_DIV, divergence.JSD, divergence.TVD):
            p = divergence.plan_tiles(kind, tokens, vocab, dtype, torch.float32, hw)
            _check_row_plan(p, hw, tokens, vocab, f"{soc} divergence {kind} {tokens}x{vocab}")
        p = divergence.plan_fused_ce_tvd(direction, tokens, vocab, dtype, torch.float32, hw)
        _check_row_plan(p, hw, tokens, vocab, f"{soc} fused_ce_tvd {direction} {tokens}x{vocab} {dtype}")
        p = fused_linear_scaled_cross_entropy.plan_fused_linear_scaled_cross_entropy(
            direction, tokens, vocab, dtype, hw
        )
        what = f"{soc} fused_linear_scaled_cross_entropy {direction} {tokens}x{vocab} {dtype}"
        _check_row_plan(p, hw, tokens, vocab, what)


# -- the 1.7 ops -----------------------------------------------------------------------------


@pytest.mark.parametrize("soc", ["Ascend910B4", "Ascend950"])
def test_embedding_plans_fit_grid_and_ub(soc):
    from liger_ops_ascend import embedding

    hw = hardware.for_soc(soc)
    # Up to 65536 tokens (forward; the backward's segment sums) or a 262144-row vocabulary (the
    # backward's zero fill) of rows up to 16384 wide.
    for dtype, n_rows, n_cols, direction in itertools.product(
        NORM_DTYPES, [1, 4096, 65536, 262144], [1, 33, 4096, 8192, 16384], ("forward", "backward")
    ):
        p = embedding.plan_embedding(direction, n_rows, n_cols, dtype, dtype, hw, n_positions=65536)
        for kernel in (p.kernel, p.segments) if direction == "backward" else (p.kernel,):
            check(kernel, hw)
            assert kernel.programs <= hw.vector_cores
        assert p.block_n * p.n_col_blocks >= n_cols


@pytest.mark.parametrize("soc", ["Ascend910B4", "Ascend950"])
def test_modulated_rms_norm_plans_fit_grid_and_ub(soc):
    from liger_ops_ascend import modulated_rms_norm

    hw = hardware.for_soc(soc)
    # The modulation pass over up to 65536 rows of up to 65536 columns, fp32 modulation included.
    for dtype, mod_dtype, n_rows, n_cols, direction in itertools.product(
        NORM_DTYPES, (torch.float32, torch.bfloat16), [1, 4096, 65536], [1, 33, 4096, 16384, 65536],
        ("forward", "backward"),
    ):  # fmt: skip
        p = modulated_rms_norm.plan_modulation(direction, n_rows, n_cols, dtype, mod_dtype, hw)
        check(p.kernel, hw)
        assert p.kernel.programs <= hw.vector_cores and p.block_n * p.n_col_blocks >= n_cols


# -- 1.7: attention -----------------------------------------------------------------------------


@pytest.mark.parametrize("soc", ["Ascend910B4", "Ascend950"])
def test_multi_token_attention_fill_plans_fit_grid_and_ub(soc):
    # The causal fill over (batch, channels, seq, seq): one 32-token plane up to liger-kernel's
    # benchmark (2 x 4 x 512^2) and 8 x 32 heads at 8192 tokens; the row plans are softmax's and
    # sparsemax's (swept above) at seq columns.
    from liger_ops_ascend import multi_token_attention

    hw = hardware.for_soc(soc)
    for dtype, n in itertools.product(NORM_DTYPES, [1, 32 * 32, 2 * 4 * 512 * 512, 8 * 32 * 8192 * 8192]):
        p = multi_token_attention.plan_tiles(n, dtype, hw)
        check(p.kernels[0], hw)
        assert p.programs <= hw.vector_cores and p.programs * p.n_iters * p.block >= n


# -- 1.8: neighborhood attention ----------------------------------------------------------------


@pytest.mark.parametrize("soc", ["Ascend910B4", "Ascend950"])
def test_fused_neighborhood_attention_plans_fit_grid_and_ub(soc):
    # Every kernel's tiles at the models' head dims (64 to 256) in every dtype, over batch 8 x 32
    # heads x 65536 tokens (the persistent grid never passes the AI cores).
    from liger_ops_ascend import fused_neighborhood_attention as nat

    hw = hardware.for_soc(soc)
    for dtype, head_dim in itertools.product(NORM_DTYPES, [64, 80, 96, 128, 256]):
        plan = nat.plan_fused_neighborhood_attention(head_dim, dtype, hw)
        items = 8 * 32 * triton.cdiv(65536, plan.block)
        pitch = 32 * head_dim * dtype.itemsize  # (batch, seq, heads, head_dim) projections viewed per head
        for name in nat.UB_TILES:
            check(plan.kernel(name, items, (pitch,), plan.block * 32 * head_dim + plan.block_d), hw)
            assert plan.kernel(name, items, (pitch,), 0).programs <= hw.ai_cores
