"""Multi-token attention (``mask_0(conv2d(softmax(mask_-inf(scores))))``) for NVIDIA GPUs: the
causal fill kernel, the direct convolution kernels, their launch and the kernel
adapter of `liger_core.drivers.multi_token_attention`.

The row work is softmax's and sparsemax's own kernels (their modules' launchers and tile plans):
a flat kernel first fills each query row's future with -inf, which both activations turn into
probability 0 (and, backward, gradient 0: softmax's ``y * (dy - dot)`` has y = 0 there, and
sparsemax's support excludes -inf).

The convolution is direct, not cuDNN's: the planes are few channels of (seq, seq) with a small
kernel, where cuDNN spent ~90% of the step in layout transposes and implicit-GEMM kernels built
for wide channel counts (H100 profile: 0.30 of 0.36 ms). Each program owns a tile of one plane's
positions and a block of channels and walks the taps (input channels x kernel rows x kernel
columns), each a shifted load of the tile; the output's future is zeroed as it is stored, tiles
wholly in the future skip their taps, and the backward reads the incoming gradient with its future
masked on load. The weight and bias gradients are per-program partial sums (no atomics), added by
`_tiling.sum_partials`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from liger_core.backend import implements
from liger_core.drivers import multi_token_attention as mta_driver
from liger_ops_cuda import hardware
from liger_ops_cuda._tiling import launch_flat, plan_softmax_rows, sum_partials
from liger_ops_cuda.softmax import softmax_backward, softmax_forward
from liger_ops_cuda.sparsemax import sparsemax_backward, sparsemax_forward

# The lanes' positions inside a (seq, seq) plane are int32: a plane plus one block must stay
# below 2**31.
INT32_LIMIT = 2**31


@triton.jit
def _causal_fill_kernel(X, Y, n_queries, n_keys, fill, n_elements, BLOCK: tl.constexpr):
    start = tl.program_id(0).to(tl.int64) * BLOCK
    idx = tl.arange(0, BLOCK)
    mask = idx < n_elements - start
    # Element [.., query, key] of contiguous (..., n_queries, n_keys) planes: the block's first
    # position in its plane once (int64), the lanes' in int32 (int64 division is slow).
    plane = n_queries * n_keys
    pos = ((start % plane).to(tl.int32) + idx) % plane
    key = pos % n_keys
    query = pos // n_keys
    x = tl.load(X + start + idx, mask=mask, other=0.0).to(tl.float32)
    tl.store(Y + start + idx, tl.where(key > query, fill, x).to(Y.dtype.element_ty), mask=mask)


def _check_plane(rows: int, cols: int, block: int) -> None:
    if rows * cols + block >= INT32_LIMIT:
        raise ValueError(
            f"multi_token_attention: a ({rows}, {cols}) plane plus a block of {block} must hold "
            f"fewer than 2**31 elements (int32 lane positions); got {rows * cols + block}"
        )


def causal_fill(x: torch.Tensor, fill: float, out: torch.Tensor | None = None) -> torch.Tensor:
    """Contiguous ``x`` with every entry ``[..., i, j]``, ``j > i``, set to ``fill``, written to
    ``out`` (a new tensor by default; ``x`` itself for in place)."""
    out = torch.empty_like(x) if out is None else out
    n_queries, n_keys = x.shape[-2:]
    _check_plane(n_queries, n_keys, hardware.GLU_BLOCK)
    launch_flat(_causal_fill_kernel, x.numel(), x, out, n_queries, n_keys, fill)
    return out


# -- the direct convolution -------------------------------------------------------------------


@triton.jit
def _tile_positions(tile, n_tiles_w, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """Row and column of each lane of a flattened BLOCK_M x BLOCK_N tile of a plane, and whether
    the tile lies wholly in its rows' future (its first column past its last row)."""
    idx = tl.arange(0, BLOCK_M * BLOCK_N)
    row0 = (tile // n_tiles_w) * BLOCK_M
    col0 = (tile % n_tiles_w) * BLOCK_N
    return row0 + idx // BLOCK_N, col0 + idx % BLOCK_N, col0 - (row0 + BLOCK_M - 1)


@triton.jit
def _program_work(n_tiles, n_channel_blocks, n_groups):
    """(tile, batch, group, channel block) of this program: the 1-D grid is
    ``((batch * n_groups + group) * n_channel_blocks + block) * n_tiles + tile`` (one axis, so no
    count of planes or tiles meets the 65535 cap of the grid's other axes)."""
    pid = tl.program_id(0)
    plane = pid // n_tiles
    batch_group = plane // n_channel_blocks
    return pid % n_tiles, batch_group // n_groups, batch_group % n_groups, plane % n_channel_blocks


@triton.jit
def _masked_grad_tile(DY, batch, out_channel, out_channels, out_h, out_w, rows, cols, channel_mask):
    """The incoming gradient at output channels ``out_channel`` (a vector) and positions
    (rows, cols), fp32, zero in each row's future and outside the plane."""
    keep = (rows < out_h) & (cols < out_w) & (cols <= rows)
    planes = (batch * out_channels + out_channel).to(tl.int64) * out_h * out_w
    offs = planes[:, None] + (rows * out_w + cols)[None, :]
    return tl.load(DY + offs, mask=channel_mask[:, None] & keep[None, :], other=0.0).to(tl.float32)


@triton.jit
def _mta_conv_forward_kernel(
    P,
    W,
    BIAS,
    OUT,
    seq,
    out_h,
    out_w,
    n_tiles_w,
    n_tiles,
    in_channels,
    out_channels,
    ci_per_group,
    co_per_group,
    n_co_blocks,
    kernel_h,
    kernel_w,
    stride,
    padding,
    dilation,
    HAS_BIAS: tl.constexpr,
    BLOCK_C: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    # OUT[b, co, r, c] = bias[co] + sum over the group's input channels and the taps of
    # W[co, ci, i, j] * P[b, ci, r * stride + i * dilation - padding, c * stride + j * dilation - padding],
    # zero where c > r. One program per tile of the output plane and (batch, group, output-channel block).
    tile, batch, group, co_block = _program_work(n_tiles, n_co_blocks, in_channels // ci_per_group)
    rows, cols, past_rows = _tile_positions(tile, n_tiles_w, BLOCK_M, BLOCK_N)
    co_local = co_block * BLOCK_C + tl.arange(0, BLOCK_C)
    co_mask = co_local < co_per_group
    out_channel = group * co_per_group + co_local
    acc = tl.zeros((BLOCK_C, BLOCK_M * BLOCK_N), dtype=tl.float32)
    # A tile wholly in the future is zero: it walks no taps.
    for ci in range(tl.where(past_rows > 0, 0, ci_per_group)):
        plane = P + (batch * in_channels + group * ci_per_group + ci).to(tl.int64) * seq * seq
        for i in range(kernel_h):
            in_rows = rows * stride + i * dilation - padding
            rows_in = (in_rows >= 0) & (in_rows < seq)
            for j in range(kernel_w):
                in_cols = cols * stride + j * dilation - padding
                mask = rows_in & (in_cols >= 0) & (in_cols < seq)
                x = tl.load(plane + in_rows * seq + in_cols, mask=mask, other=0.0).to(tl.float32)
                taps = ((out_channel * ci_per_group + ci) * kernel_h + i) * kernel_w + j
                w = tl.load(W + taps, mask=co_mask, other=0.0).to(tl.float32)
                acc += w[:, None] * x[None, :]
    if HAS_BIAS:
        acc += tl.load(BIAS + out_channel, mask=co_mask, other=0.0).to(tl.float32)[:, None]
    keep = (rows < out_h) & (cols < out_w)
    acc = tl.where((cols <= rows)[None, :], acc, 0.0)
    offs = (batch * out_channels + out_channel).to(tl.int64)[:, None] * out_h * out_w + (rows * out_w + cols)[None, :]
    tl.store(OUT + offs, acc.to(OUT.dtype.element_ty), mask=co_mask[:, None] & keep[None, :])


@triton.jit
def _mta_conv_input_grad_kernel(
    DY,
    W,
    DP,
    seq,
    out_h,
    out_w,
    n_tiles_w,
    n_tiles,
    in_channels,
    out_channels,
    ci_per_group,
    co_per_group,
    n_ci_blocks,
    kernel_h,
    kernel_w,
    stride,
    padding,
    dilation,
    BLOCK_C: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    # DP[b, ci, y, x] = sum over the group's output channels and the taps of W[co, ci, i, j] *
    # DY[b, co, r, c] for the (r, c) with r * stride = y + padding - i * dilation (and likewise c),
    # c <= r. One program per tile of the input plane and (batch, group, input-channel block).
    tile, batch, group, ci_block = _program_work(n_tiles, n_ci_blocks, in_channels // ci_per_group)
    rows, cols, past_rows = _tile_positions(tile, n_tiles_w, BLOCK_M, BLOCK_N)
    ci_local = ci_block * BLOCK_C + tl.arange(0, BLOCK_C)
    ci_mask = ci_local < ci_per_group
    acc = tl.zeros((BLOCK_C, BLOCK_M * BLOCK_N), dtype=tl.float32)
    # Input (y, x) feeds outputs with c <= r only where x - y <= (j - i) * dilation: a tile past
    # every such band has no gradient.
    for co in range(tl.where(past_rows > (kernel_w - 1) * dilation, 0, co_per_group)):
        out_channel = group * co_per_group + co
        plane = DY + (batch * out_channels + out_channel).to(tl.int64) * out_h * out_w
        for i in range(kernel_h):
            up_rows = rows + padding - i * dilation
            out_rows = up_rows // stride
            rows_in = (up_rows >= 0) & (up_rows % stride == 0) & (out_rows < out_h)
            for j in range(kernel_w):
                up_cols = cols + padding - j * dilation
                out_cols = up_cols // stride
                mask = rows_in & (up_cols >= 0) & (up_cols % stride == 0) & (out_cols < out_w)
                mask = mask & (out_cols <= out_rows)
                dy = tl.load(plane + out_rows * out_w + out_cols, mask=mask, other=0.0).to(tl.float32)
                taps = ((out_channel * ci_per_group + ci_local) * kernel_h + i) * kernel_w + j
                w = tl.load(W + taps, mask=ci_mask, other=0.0).to(tl.float32)
                acc += w[:, None] * dy[None, :]
    keep = (rows < seq) & (cols < seq)
    in_channel = group * ci_per_group + ci_local
    offs = (batch * in_channels + in_channel).to(tl.int64)[:, None] * seq * seq + (rows * seq + cols)[None, :]
    tl.store(DP + offs, acc.to(DP.dtype.element_ty), mask=ci_mask[:, None] & keep[None, :])


@triton.jit
def _mta_conv_weight_grad_kernel(
    DY,
    P,
    PARTIAL,
    seq,
    out_h,
    out_w,
    n_tiles_w,
    n_tiles,
    n_items,
    in_channels,
    out_channels,
    ci_per_group,
    co_per_group,
    n_co_blocks,
    kernel_h,
    kernel_w,
    stride,
    padding,
    dilation,
    partial_width,
    BLOCK_C: tl.constexpr,
    BLOCK_TAPS: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    # Row pid of PARTIAL gets this program's share of the weight gradient (column co * taps + tap,
    # tap = (ci * kernel_h + i) * kernel_w + j: the weight's own layout) and of the bias gradient
    # (column out_channels * taps + co), summed over the (batch, tile) items pid, pid + programs, ...
    # Grid: (programs, groups x output-channel blocks); each writes its channels' columns.
    pid = tl.program_id(0)
    group = tl.program_id(1) // n_co_blocks
    co_local = (tl.program_id(1) % n_co_blocks) * BLOCK_C + tl.arange(0, BLOCK_C)
    co_mask = co_local < co_per_group
    out_channel = group * co_per_group + co_local
    n_taps = ci_per_group * kernel_h * kernel_w
    tap_ids = tl.arange(0, BLOCK_TAPS)
    acc_w = tl.zeros((BLOCK_C, BLOCK_TAPS), dtype=tl.float32)
    acc_b = tl.zeros((BLOCK_C,), dtype=tl.float32)
    for item in range(pid, n_items, tl.num_programs(0)):
        batch = item // n_tiles
        rows, cols, past_rows = _tile_positions(item % n_tiles, n_tiles_w, BLOCK_M, BLOCK_N)
        dy = _masked_grad_tile(DY, batch, out_channel, out_channels, out_h, out_w, rows, cols, co_mask)
        acc_b += tl.sum(dy, axis=1)
        # A tile wholly in the future has no gradient: it walks no taps.
        for tap in range(tl.where(past_rows > 0, 0, n_taps)):
            ci = tap // (kernel_h * kernel_w)
            i = (tap // kernel_w) % kernel_h
            j = tap % kernel_w
            in_rows = rows * stride + i * dilation - padding
            in_cols = cols * stride + j * dilation - padding
            mask = (in_rows >= 0) & (in_rows < seq) & (in_cols >= 0) & (in_cols < seq)
            plane = P + (batch * in_channels + group * ci_per_group + ci).to(tl.int64) * seq * seq
            x = tl.load(plane + in_rows * seq + in_cols, mask=mask, other=0.0).to(tl.float32)
            acc_w += tl.where(tap_ids[None, :] == tap, tl.sum(dy * x[None, :], axis=1)[:, None], 0.0)
    row = PARTIAL + pid.to(tl.int64) * partial_width
    cols_w = out_channel[:, None] * n_taps + tap_ids[None, :]
    tl.store(row + cols_w, acc_w, mask=co_mask[:, None] & (tap_ids < n_taps)[None, :])
    tl.store(row + out_channels * n_taps + out_channel, acc_b, mask=co_mask)


@dataclass(frozen=True)
class ConvGeometry:
    """The convolution's sizes and arguments: square (seq, seq) input planes, the output plane."""

    batch: int
    seq: int
    out_h: int
    out_w: int
    in_channels: int
    out_channels: int
    groups: int
    kernel_h: int
    kernel_w: int
    stride: int
    padding: int
    dilation: int

    @staticmethod
    def of(scores_shape: torch.Size, weight_shape: torch.Size, stride: int, padding: int, dilation: int, groups: int):
        batch, in_channels, seq, _ = scores_shape
        out_channels, _, kernel_h, kernel_w = weight_shape
        out_h = (seq + 2 * padding - dilation * (kernel_h - 1) - 1) // stride + 1
        out_w = (seq + 2 * padding - dilation * (kernel_w - 1) - 1) // stride + 1
        return ConvGeometry(
            batch, seq, out_h, out_w, in_channels, out_channels, groups, kernel_h, kernel_w, stride, padding, dilation
        )

    def args(self) -> tuple[int, ...]:
        return (self.kernel_h, self.kernel_w, self.stride, self.padding, self.dilation)


@dataclass(frozen=True)
class ConvTiles:
    """A plane's tiles (BLOCK_M x BLOCK_N positions) and the channel block each program holds."""

    block_c: int
    block_m: int
    block_n: int
    n_tiles_h: int
    n_tiles_w: int

    @property
    def n_tiles(self) -> int:
        return self.n_tiles_h * self.n_tiles_w


def plan_conv_tiles(rows: int, cols: int, channels: int) -> ConvTiles:
    """Tiles of a (rows, cols) plane for programs holding ``channels`` (a group's, capped at
    MTA_CONV_MAX_BLOCK_C) fp32 accumulators per position, MTA_CONV_TILE_ELEMENTS in all."""
    block_c = min(triton.next_power_of_2(max(channels, 1)), hardware.MTA_CONV_MAX_BLOCK_C)
    positions = max(1, hardware.MTA_CONV_TILE_ELEMENTS // block_c)
    block_n = min(triton.next_power_of_2(max(cols, 1)), hardware.MTA_CONV_BLOCK_N, positions)
    block_m = min(triton.next_power_of_2(max(rows, 1)), max(1, positions // block_n))
    return ConvTiles(block_c, block_m, block_n, triton.cdiv(rows, block_m), triton.cdiv(cols, block_n))


def _launch(kernel, grid, tiles: ConvTiles, *args, **constexprs) -> None:
    kernel[grid](
        *args,
        BLOCK_C=tiles.block_c,
        BLOCK_M=tiles.block_m,
        BLOCK_N=tiles.block_n,
        num_warps=hardware.MTA_CONV_NUM_WARPS,
        **constexprs,
    )


def conv_forward(
    probs: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, geo: ConvGeometry
) -> torch.Tensor:
    """The convolution of contiguous ``probs`` with its output's future zeroed, in probs' dtype."""
    out = probs.new_empty((geo.batch, geo.out_channels, geo.out_h, geo.out_w))
    if out.numel() == 0:
        return out
    co_per_group = geo.out_channels // geo.groups
    tiles = plan_conv_tiles(geo.out_h, geo.out_w, co_per_group)
    _check_plane(geo.out_h, geo.out_w, tiles.block_m * tiles.block_n)
    n_blocks = triton.cdiv(co_per_group, tiles.block_c)
    _launch(
        _mta_conv_forward_kernel,
        (tiles.n_tiles * geo.batch * geo.groups * n_blocks,),
        tiles,
        probs,
        weight,
        bias if bias is not None else weight,
        out,
        geo.seq,
        geo.out_h,
        geo.out_w,
        tiles.n_tiles_w,
        tiles.n_tiles,
        geo.in_channels,
        geo.out_channels,
        geo.in_channels // geo.groups,
        co_per_group,
        n_blocks,
        *geo.args(),
        HAS_BIAS=bias is not None,
    )
    return out


def conv_input_grad(
    grad_out: torch.Tensor, weight: torch.Tensor, geo: ConvGeometry, dtype: torch.dtype
) -> torch.Tensor:
    """The gradient of the convolution's input for contiguous ``grad_out`` (its future masked
    on load), in ``dtype``."""
    grad_probs = grad_out.new_empty((geo.batch, geo.in_channels, geo.seq, geo.seq), dtype=dtype)
    if grad_probs.numel() == 0:
        return grad_probs
    ci_per_group = geo.in_channels // geo.groups
    tiles = plan_conv_tiles(geo.seq, geo.seq, ci_per_group)
    n_blocks = triton.cdiv(ci_per_group, tiles.block_c)
    _launch(
        _mta_conv_input_grad_kernel,
        (tiles.n_tiles * geo.batch * geo.groups * n_blocks,),
        tiles,
        grad_out,
        weight,
        grad_probs,
        geo.seq,
        geo.out_h,
        geo.out_w,
        tiles.n_tiles_w,
        tiles.n_tiles,
        geo.in_channels,
        geo.out_channels,
        ci_per_group,
        geo.out_channels // geo.groups,
        n_blocks,
        *geo.args(),
    )
    return grad_probs


def conv_weight_grad(
    grad_out: torch.Tensor,
    probs: torch.Tensor,
    geo: ConvGeometry,
    grad_weight: torch.Tensor | None,
    grad_bias: torch.Tensor | None,
) -> None:
    """Write the weight's and the bias's gradients (either may be None) for contiguous
    ``grad_out`` (its future masked on load) and the saved ``probs``."""
    co_per_group = geo.out_channels // geo.groups
    n_taps = geo.in_channels // geo.groups * geo.kernel_h * geo.kernel_w
    tiles = plan_conv_tiles(geo.out_h, geo.out_w, co_per_group)
    n_items = geo.batch * tiles.n_tiles
    if n_items == 0:  # no tokens: sums over nothing
        for g in (grad_weight, grad_bias):
            if g is not None:
                g.zero_()
        return
    n_blocks = triton.cdiv(co_per_group, tiles.block_c)
    programs = max(1, min(n_items, hardware.sm_count() * hardware.MTA_CONV_WGRAD_PROGRAMS_PER_SM))
    width = geo.out_channels * (n_taps + 1)
    partial = torch.empty((programs, width), dtype=torch.float32, device=grad_out.device)
    _launch(
        _mta_conv_weight_grad_kernel,
        (programs, geo.groups * n_blocks),
        tiles,
        grad_out,
        probs,
        partial,
        geo.seq,
        geo.out_h,
        geo.out_w,
        tiles.n_tiles_w,
        tiles.n_tiles,
        n_items,
        geo.in_channels,
        geo.out_channels,
        geo.in_channels // geo.groups,
        co_per_group,
        n_blocks,
        *geo.args(),
        width,
        BLOCK_TAPS=triton.next_power_of_2(n_taps),
    )
    sum_partials(
        partial,
        programs,
        None if grad_weight is None else grad_weight.view(-1),
        grad_bias,
        geo.out_channels * n_taps,
    )


class MultiTokenAttentionKernels:
    """`liger_core.drivers.multi_token_attention.MultiTokenAttentionKernels` on this module's kernels."""

    protocol = mta_driver.PROTOCOL

    @staticmethod
    def probs_forward(scores, sparse):
        seq = scores.shape[-1]
        plan = plan_softmax_rows(seq)
        masked = causal_fill(scores, float("-inf"))
        if sparse:
            probs, tau = sparsemax_forward(masked.view(-1, seq), plan)
            return probs.view(scores.shape), (masked, tau)
        probs = softmax_forward(masked.view(-1, seq), plan)
        return probs.view(scores.shape), ()

    @staticmethod
    def probs_backward(grad_probs, probs, saved, sparse):
        seq = probs.shape[-1]
        plan = plan_softmax_rows(seq)
        grad_rows = grad_probs.view(-1, seq)
        if sparse:
            masked, tau = saved
            return sparsemax_backward(grad_rows, masked.view(-1, seq), tau, plan).view(probs.shape)
        return softmax_backward(grad_rows, probs.view(-1, seq), plan).view(probs.shape)

    @staticmethod
    def conv_forward(probs, weight, bias, stride, padding, dilation, groups):
        geo = ConvGeometry.of(probs.shape, weight.shape, stride, padding, dilation, groups)
        return conv_forward(probs, weight, bias, geo)

    @staticmethod
    def conv_backward(grad_out, probs, weight, stride, padding, dilation, groups, need_probs, need_weight, need_bias):
        geo = ConvGeometry.of(probs.shape, weight.shape, stride, padding, dilation, groups)
        grad_probs = conv_input_grad(grad_out, weight, geo, probs.dtype) if need_probs else None
        grad_weight = torch.empty_like(weight) if need_weight else None
        grad_bias = torch.empty(geo.out_channels, dtype=weight.dtype, device=weight.device) if need_bias else None
        if need_weight or need_bias:
            conv_weight_grad(grad_out, probs, geo, grad_weight, grad_bias)
        return grad_probs, grad_weight, grad_bias


LigerMultiTokenAttentionFunction = implements("multi_token_attention")(
    mta_driver.autograd_function(MultiTokenAttentionKernels(), __name__)
)
