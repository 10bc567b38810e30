"""GroupNorm for Intel GPUs: Triton kernels, launch plans and the kernel adapter of
`liger_core.drivers.group_norm`.

x is viewed as (batch, channels, spatial). The channels of one group are contiguous, so a
(sample, group) pair is one contiguous run of ``channels_per_group * spatial`` elements: one
program per pair walks it in [BLOCK_C channels x BLOCK_S positions] tiles (N_C_CHUNKS x
N_S_CHUNKS of them). Mean and variance come from sums shifted by the mean of the first tile
(no cancellation when the mean is large against the spread).

grad_weight / grad_bias: each program sums its channels over the spatial positions and writes
them to its own slot of a (batch, channels) fp32 buffer; the batch axis is summed once at the
end. Every slot has exactly one writer: no atomics, deterministic.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl
from liger_core.backend import implements
from liger_core.drivers import group_norm as group_norm_driver

from liger_ops_xpu import hardware
from liger_ops_xpu._tiling import num_warps_for, sum_partials, zeros_or_none


@triton.jit
def _group_run(pid, n_groups, channels_per_group, n_spatial):
    """Program ``pid``'s (sample, group) pair: ``(first_channel, base, size)``, the group's first
    channel, the offset of its run of channels x positions (contiguous) and the run's length."""
    first_channel = (pid % n_groups) * channels_per_group
    base = pid.to(tl.int64) * channels_per_group * n_spatial
    return first_channel, base, channels_per_group * n_spatial


@triton.jit
def _channel_block(block, channels_per_group, BLOCK_C: tl.constexpr):
    """The group's channels of block ``block`` (BLOCK_C of them) and their mask."""
    c = block * BLOCK_C + tl.arange(0, BLOCK_C)
    return c, c < channels_per_group


@triton.jit
def _group_tile(base, c, c_mask, block, n_spatial, BLOCK_S: tl.constexpr):
    """Positions block ``block`` (BLOCK_S of them) of channels ``c`` in the run from ``base``:
    ``(offs, mask)``, the elements' offsets and which are in range."""
    s = block * BLOCK_S + tl.arange(0, BLOCK_S)
    return base + c[:, None] * n_spatial + s[None, :], c_mask[:, None] & (s < n_spatial)[None, :]


@triton.jit
def _group_norm_forward_kernel(
    X,
    W,
    B,
    Y,
    MEAN,
    RSTD,
    n_channels,
    channels_per_group,
    n_spatial,
    n_groups,
    eps,
    HAS_WEIGHT: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    BLOCK_C: tl.constexpr,
    BLOCK_S: tl.constexpr,
    N_C_CHUNKS: tl.constexpr,
    N_S_CHUNKS: tl.constexpr,
):
    pid = tl.program_id(0)  # = sample * n_groups + group
    first_channel, base, group_size = _group_run(pid, n_groups, channels_per_group, n_spatial)

    # Shift: the mean of the first tile.
    c, c_mask = _channel_block(0, channels_per_group, BLOCK_C)
    offs, mask0 = _group_tile(base, c, c_mask, 0, n_spatial, BLOCK_S)
    first = tl.load(X + offs, mask=mask0, other=0.0).to(tl.float32)
    shift = tl.sum(tl.sum(first, axis=1), axis=0) / tl.sum(tl.sum(mask0.to(tl.float32), axis=1), axis=0)
    s1 = tl.zeros((BLOCK_C, BLOCK_S), dtype=tl.float32)
    s2 = tl.zeros((BLOCK_C, BLOCK_S), dtype=tl.float32)
    for cc in range(N_C_CHUNKS):
        c, c_mask = _channel_block(cc, channels_per_group, BLOCK_C)
        for sc in range(N_S_CHUNKS):
            offs, mask = _group_tile(base, c, c_mask, sc, n_spatial, BLOCK_S)
            xf = tl.load(X + offs, mask=mask, other=0.0).to(tl.float32)
            d = tl.where(mask, xf - shift, 0.0)
            s1 += d
            s2 += d * d
    d_mean = tl.sum(tl.sum(s1, axis=1), axis=0) / group_size
    mean = shift + d_mean
    var = tl.maximum(tl.sum(tl.sum(s2, axis=1), axis=0) / group_size - d_mean * d_mean, 0.0)
    rstd = tl.math.rsqrt(var + eps)
    tl.store(MEAN + pid, mean)
    tl.store(RSTD + pid, rstd)

    for cc in range(N_C_CHUNKS):
        c, c_mask = _channel_block(cc, channels_per_group, BLOCK_C)
        scale = tl.zeros((BLOCK_C,), dtype=tl.float32) + rstd
        shift_out = -mean * scale
        if HAS_WEIGHT:
            w = tl.load(W + first_channel + c, mask=c_mask, other=0.0).to(tl.float32)
            scale = scale * w
            shift_out = shift_out * w
        if HAS_BIAS:
            shift_out += tl.load(B + first_channel + c, mask=c_mask, other=0.0).to(tl.float32)
        for sc in range(N_S_CHUNKS):
            offs, mask = _group_tile(base, c, c_mask, sc, n_spatial, BLOCK_S)
            xf = tl.load(X + offs, mask=mask, other=0.0).to(tl.float32)
            # (x - mean) * rstd * w + b as one multiply-add per element.
            y = xf * scale[:, None] + shift_out[:, None]
            tl.store(Y + offs, y.to(Y.dtype.element_ty), mask=mask)


@triton.jit
def _group_norm_backward_kernel(
    DY,
    X,
    W,
    MEAN,
    RSTD,
    DX,
    DW_PARTIAL,
    DB_PARTIAL,
    n_channels,
    channels_per_group,
    n_spatial,
    n_groups,
    HAS_WEIGHT: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    BLOCK_C: tl.constexpr,
    BLOCK_S: tl.constexpr,
    N_C_CHUNKS: tl.constexpr,
    N_S_CHUNKS: tl.constexpr,
):
    # grad_x = rstd * (g - mean(g) - x_hat * mean(g * x_hat)) over the group, g = dy * w[channel];
    # grad_w[c] = sum over samples and positions of dy * x_hat; grad_b[c] = sum of dy.
    pid = tl.program_id(0)  # = sample * n_groups + group
    first_channel, base, group_size = _group_run(pid, n_groups, channels_per_group, n_spatial)
    partial_base = (pid // n_groups).to(tl.int64) * n_channels + first_channel  # this sample's slot
    mean = tl.load(MEAN + pid)
    rstd = tl.load(RSTD + pid)

    sum_g = tl.zeros((BLOCK_C, BLOCK_S), dtype=tl.float32)
    sum_gx = tl.zeros((BLOCK_C, BLOCK_S), dtype=tl.float32)
    for cc in range(N_C_CHUNKS):
        c, c_mask = _channel_block(cc, channels_per_group, BLOCK_C)
        if HAS_WEIGHT:
            w = tl.load(W + first_channel + c, mask=c_mask, other=0.0).to(tl.float32)
        dw_acc = tl.zeros((BLOCK_C, BLOCK_S), dtype=tl.float32)
        db_acc = tl.zeros((BLOCK_C, BLOCK_S), dtype=tl.float32)
        for sc in range(N_S_CHUNKS):
            offs, mask = _group_tile(base, c, c_mask, sc, n_spatial, BLOCK_S)
            xf = tl.load(X + offs, mask=mask, other=0.0).to(tl.float32)
            dy = tl.load(DY + offs, mask=mask, other=0.0).to(tl.float32)
            x_hat = tl.where(mask, (xf - mean) * rstd, 0.0)
            dw_acc += dy * x_hat
            db_acc += dy
            g = dy
            if HAS_WEIGHT:
                g = dy * w[:, None]
            sum_g += g
            sum_gx += g * x_hat
        if HAS_WEIGHT:
            tl.store(DW_PARTIAL + partial_base + c, tl.sum(dw_acc, axis=1), mask=c_mask)
        if HAS_BIAS:
            tl.store(DB_PARTIAL + partial_base + c, tl.sum(db_acc, axis=1), mask=c_mask)
    mean_g = tl.sum(tl.sum(sum_g, axis=1), axis=0) / group_size
    mean_gx = tl.sum(tl.sum(sum_gx, axis=1), axis=0) / group_size

    for cc in range(N_C_CHUNKS):
        c, c_mask = _channel_block(cc, channels_per_group, BLOCK_C)
        if HAS_WEIGHT:
            w = tl.load(W + first_channel + c, mask=c_mask, other=0.0).to(tl.float32)
        for sc in range(N_S_CHUNKS):
            offs, mask = _group_tile(base, c, c_mask, sc, n_spatial, BLOCK_S)
            xf = tl.load(X + offs, mask=mask, other=0.0).to(tl.float32)
            dy = tl.load(DY + offs, mask=mask, other=0.0).to(tl.float32)
            x_hat = (xf - mean) * rstd
            g = dy
            if HAS_WEIGHT:
                g = dy * w[:, None]
            dx = rstd * (g - mean_g - x_hat * mean_gx)
            tl.store(DX + offs, dx.to(DX.dtype.element_ty), mask=mask)


@dataclass(frozen=True)
class GroupPlan:
    """Tiles of BLOCK_C channels x BLOCK_S positions over one group's run."""

    block_c: int
    block_s: int
    n_c_chunks: int
    n_s_chunks: int
    num_warps: int


def plan_groups(channels_per_group: int, n_spatial: int) -> GroupPlan:
    """Spatial positions first (contiguous), up to ``CHUNK_BLOCK``; channels fill the tile up
    to ``TARGET_TILE_ELEMENTS``."""
    block_s = min(triton.next_power_of_2(max(n_spatial, 1)), hardware.CHUNK_BLOCK)
    block_c = min(triton.next_power_of_2(max(channels_per_group, 1)), max(1, hardware.TARGET_TILE_ELEMENTS // block_s))
    return GroupPlan(
        block_c,
        block_s,
        triton.cdiv(max(channels_per_group, 1), block_c),
        triton.cdiv(max(n_spatial, 1), block_s),
        num_warps_for(block_c * block_s),
    )


def _launch_groups(kernel, x3: torch.Tensor, num_groups: int, plan: GroupPlan, pointers: tuple, *scalars, **constexprs):
    """One program per (sample, group) of ``x3`` with ``plan``'s tiles and the large register
    file; the kernel's arguments: ``pointers``, the sizes (channels, channels per group,
    positions, groups), ``scalars``."""
    batch, n_channels, n_spatial = x3.shape
    kernel[(batch * num_groups,)](
        *pointers,
        n_channels,
        n_channels // num_groups,
        n_spatial,
        num_groups,
        *scalars,
        BLOCK_C=plan.block_c,
        BLOCK_S=plan.block_s,
        N_C_CHUNKS=plan.n_c_chunks,
        N_S_CHUNKS=plan.n_s_chunks,
        **constexprs,
        **hardware.launch_kwargs(kernel, x3.device, plan.num_warps),
    )


def group_norm_forward(x3, weight, bias, num_groups: int, eps: float, plan: GroupPlan):
    """Launch the forward kernel on ``x3`` (batch, channels, spatial), contiguous; returns
    ``(y, mean, rstd)``, the statistics one fp32 value per (sample, group)."""
    y = torch.empty_like(x3)
    mean = torch.empty(x3.shape[0] * num_groups, dtype=torch.float32, device=x3.device)
    rstd = torch.empty_like(mean)
    if x3.numel() == 0:
        return y, mean, rstd
    w_ptr = weight if weight is not None else x3  # never read without HAS_WEIGHT
    b_ptr = bias if bias is not None else x3  # never read without HAS_BIAS
    _launch_groups(
        _group_norm_forward_kernel,
        x3,
        num_groups,
        plan,
        (x3, w_ptr, b_ptr, y, mean, rstd),
        eps,
        HAS_WEIGHT=weight is not None,
        HAS_BIAS=bias is not None,
    )
    return y, mean, rstd


def group_norm_backward(dy3, x3, weight, bias, num_groups: int, mean, rstd, dx, plan: GroupPlan):
    """Launch the backward kernel: grad_x into ``dx``; returns ``(grad_weight, grad_bias)``."""
    batch, n_channels, _ = x3.shape
    has_weight, has_bias = weight is not None, bias is not None
    if x3.numel() == 0:
        return zeros_or_none(weight), zeros_or_none(bias)
    # One fp32 row of channels per sample and parameter (every slot written once).
    partial = lambda on: torch.empty((batch, n_channels), dtype=torch.float32, device=x3.device) if on else mean
    dw_partial, db_partial = partial(has_weight), partial(has_bias)
    w_ptr = weight if has_weight else x3  # never read without HAS_WEIGHT
    _launch_groups(
        _group_norm_backward_kernel,
        x3,
        num_groups,
        plan,
        (dy3, x3, w_ptr, mean, rstd, dx, dw_partial, db_partial),
        HAS_WEIGHT=has_weight,
        HAS_BIAS=has_bias,
    )
    return sum_partials(dw_partial, weight), sum_partials(db_partial, bias)


class GroupNormKernels:
    """`liger_core.drivers.group_norm.GroupNormKernels` on this module's kernels; the forward's
    group plan is the backward's ``state``."""

    protocol = group_norm_driver.PROTOCOL

    @staticmethod
    def forward(x3, weight, bias, num_groups, eps):
        _, channels, spatial = x3.shape
        plan = plan_groups(channels // num_groups, spatial)
        y, mean, rstd = group_norm_forward(x3, weight, bias, num_groups, eps, plan)
        return y, mean, rstd, plan

    @staticmethod
    def backward(dy3, x3, weight, bias, num_groups, mean, rstd, dx, need_dw, need_db, state):
        return group_norm_backward(dy3, x3, weight, bias, num_groups, mean, rstd, dx, state)


LigerGroupNormFunction = implements("group_norm")(group_norm_driver.autograd_function(GroupNormKernels(), __name__))
