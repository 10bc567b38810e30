"""The `group_norm` op: group normalisation over (batch, channels, ...), declared once."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from liger_core.bench import spec as B
from liger_core.bench.configs import ModelShape
from liger_core.op import Checks, Op, bad, sample
from liger_core.ops import _samples as S
from liger_core.ops._checks import FLOAT_DTYPES, check_eps, check_floating, check_param, param_ok
from liger_core.ops.layer_norm import centred_grad_scale


def group_norm(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    num_channels: int,
    num_groups: int,
    eps: float = 1e-5,
) -> torch.Tensor:
    """Group normalisation (``torch.nn.functional.group_norm``).

    The channels are split into ``num_groups`` consecutive groups; each (sample, group)
    is normalised over its channels and all spatial positions with its own mean and
    biased variance, then each channel is scaled and shifted:
    ``y[b, c, ...] = (x[b, c, ...] - mean[b, g]) / sqrt(var[b, g] + eps) * weight[c] + bias[c]``
    with ``g = c // (num_channels // num_groups)``. Computed in float32, cast to ``x.dtype``.

    Args:
        x: ``(batch, channels, *spatial)`` (at least 2-D), float32, bfloat16 or float16,
            any layout.
        weight: ``(channels,)`` per-channel scale, or None (no scale).
        bias: ``(channels,)`` per-channel shift, or None (no shift).
        num_channels: must equal ``x.shape[1]``.
        num_groups: ``> 0``, must divide ``num_channels``.
        eps: ``>= 0``, added to the variance.

    Returns:
        ``y`` with ``x``'s shape and dtype. Backward gives ``grad_x`` (``x.dtype``),
        ``grad_weight`` (``weight.dtype``) and ``grad_bias`` (``bias.dtype``).
    """
    check_args(x, weight, bias, num_channels, num_groups, eps)
    return math(x, weight, bias, num_channels, num_groups, eps)


def check_args(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    num_channels: int,
    num_groups: int,
    eps: float,
) -> None:
    """Raise a clear error for arguments outside the contract (one cheap predicate first)."""
    try:
        if (
            x.dtype in FLOAT_DTYPES
            and x.ndim >= 2
            and type(num_channels) is int
            and type(num_groups) is int
            and x.shape[1] == num_channels
            and num_groups > 0
            and num_channels % num_groups == 0
            and eps >= 0
            and param_ok(weight, x, 1)
            and param_ok(bias, x, 1)
        ):
            return
    except (AttributeError, TypeError):
        pass
    op = "group_norm"
    check_floating("group_norm", "x", x)
    if x.dim() < 2:
        raise ValueError(f"{op}: x must be (batch, channels, *spatial), at least 2-D; got {x.dim()}-D")
    for name, v in (("num_channels", num_channels), ("num_groups", num_groups)):
        if not isinstance(v, int) or isinstance(v, bool):
            raise TypeError(f"{op}: {name} must be an int; got {type(v).__name__}")
    if num_channels != x.shape[1]:
        raise ValueError(f"{op}: num_channels={num_channels} must equal x.shape[1]; got x.shape[1]={x.shape[1]}")
    if num_groups <= 0 or num_channels % num_groups != 0:
        raise ValueError(
            f"{op}: num_groups must be > 0 and divide num_channels={num_channels}; got num_groups={num_groups}"
        )
    check_param(op, "weight", weight, x, axis=1, what="channels")
    check_param(op, "bias", bias, x, axis=1, what="channels")
    check_eps(op, eps)


def math(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    num_channels: int,
    num_groups: int,
    eps: float,
) -> torch.Tensor:
    """The formula, differentiable by autograd, for any floating dtype (float64 for the oracle)."""
    compute = x if x.dtype == torch.float64 else x.float()
    # Explicit group size: a -1 cannot be inferred for an empty batch.
    group_size = x[0].numel() // num_groups if x.shape[0] else 0
    grouped = compute.reshape(x.shape[0], num_groups, group_size)
    centered = grouped - grouped.mean(-1, keepdim=True)
    y = (centered * torch.rsqrt(centered.pow(2).mean(-1, keepdim=True) + eps)).reshape(x.shape)
    per_channel = (num_channels,) + (1,) * (x.dim() - 2)
    if weight is not None:
        y = y * weight.to(compute.dtype).reshape(per_channel)
    if bias is not None:
        y = y + bias.to(compute.dtype).reshape(per_channel)
    return y.to(x.dtype)


# -- declaration ---------------------------------------------------------------------------------


def args(
    device, shape=(2, 6, 5), groups=3, dtype=torch.float32, weight=True, bias=True, param_dtype=None, mean=1.5, **opts
):
    """x of ``(batch, channels, *spatial)`` with a mean offset, per-channel weight and bias."""
    g = S.gen(0)
    x = S.to(device, dtype, S.normal(shape, g, 2, mean))
    w = S.to(device, param_dtype or dtype, S.normal(shape[1], g, 0.5, 1)) if weight else None
    b = S.to(device, param_dtype or dtype, S.normal(shape[1], g, 0.5)) if bias else None
    return dict(x=x, weight=w, bias=b, num_channels=shape[1], num_groups=groups, **opts)


def channels_last_args(device):
    """x of (2, 6, 8, 9) stored channels last (a permuted view)."""
    g = S.gen(0)
    x = S.to(device, torch.float32, S.normal((2, 9, 8, 6), g, 2, 1.5)).permute(0, 3, 2, 1)
    w, b = S.to(device, torch.float32, S.normal(6, g, 0.5, 1)), S.to(device, torch.float32, S.normal(6, g, 0.5))
    return dict(x=x, weight=w, bias=b, num_channels=6, num_groups=3)


def samples():
    # 2-D input, one channel per group, odd spatial sizes, 2-D spatial, a group larger than any
    # single tile (several programs per group), an empty batch.
    shapes = (((1, 1), 1), ((3, 6), 2), ((2, 6, 5), 3), ((3, 8, 7), 8), ((2, 12, 3, 5), 4), ((2, 8, 2500), 2))
    for dtype in S.DTYPES:
        for shape, groups in (*shapes, ((0, 4, 3), 2)):
            yield sample(args, shape=shape, groups=groups, dtype=dtype)
    yield from S.grid(
        args,
        dict(dtype=S.OPTION_DTYPES, weight=(True, False), bias=(True, False)),
        shape=(3, 12, 40),
        groups=4,
        eps=1e-6,
    )
    yield sample(args, shape=(2, 8, 33), groups=4, dtype=torch.bfloat16, param_dtype=torch.float32)
    # A mean far above the spread: a one-pass E[x^2] - E[x]^2 variance would cancel.
    yield sample(args, shape=(2, 6, 100), groups=3, mean=101.5)
    yield sample(channels_last_args)


def _scales(a, upstream):
    x, groups = a["x"], a["num_groups"]
    if not x.numel():
        return {}
    per_channel = (a["num_channels"],) + (1,) * (x.dim() - 2)
    g = upstream["output"] * (a["weight"].reshape(per_channel) if a["weight"] is not None else 1.0)
    grouped = x.reshape(x.shape[0], groups, -1)
    return {"grad_x": S.peak(centred_grad_scale(grouped, a["eps"], g.reshape(grouped.shape)))}


def bench_dims(s: ModelShape) -> tuple[int, int, int, int]:
    """(batch, channels, groups, spatial): the (tokens, hidden) elements as a conv-style tensor
    with GroupNorm(32, 128) as in diffusion U-Nets (4 channels a group). ``--batch 32 --tokens
    8192`` at hidden 4096 gives the issue's 32 x 128 x 8192, 32 groups."""
    channels = min(128, s.hidden)
    groups = max(1, min(32, channels // 4))
    spatial = max(1, s.tokens * s.hidden // (s.batch * channels))
    return s.batch, channels, groups, spatial


def _bench_args(s, dt, dev, gen):
    b, c, groups, n = bench_dims(s)
    return dict(
        x=B.normal((b, c, n), dt, dev, gen),
        weight=B.normal((c,), dt, dev, gen, scale=0.1, shift=1.0),
        bias=B.normal((c,), dt, dev, gen, scale=0.1),
        num_channels=c,
        num_groups=groups,
    )


def _traffic(s, e):
    b, c, groups, n = bench_dims(s)
    return 2 * b * c * n * e + 2 * c * e + 8 * b * groups, 3 * b * c * n * e + 4 * c * e + 8 * b * groups


def _describe(s):
    b, c, groups, n = bench_dims(s)
    return B.dims(("batch", b), ("channels", c), ("groups", groups), ("spatial", n))


OP = Op(
    group_norm,
    since=(1, 1),
    math=math,
    grads=("x", "weight", "bias"),
    samples=samples,
    # (batch, channels, *spatial), two groups.
    smoke=(sample(args, shape=(3, 4, 5), groups=2), sample(args, shape=(2, 8, 700), groups=2)),
    error_sample=sample(args),
    errors=(
        S.elsewhere("weight"),
        bad(
            "weight_shape", ValueError, r"weight must have shape \(channels,\) = \(6,\).*\(5,\)", weight=lambda w: w[:5]
        ),
        bad(
            "bias_shape",
            ValueError,
            r"bias must have shape \(channels,\) = \(6,\).*\(7,\)",
            bias=lambda b: torch.cat([b, b[:1]]),
        ),
        bad("channels", ValueError, r"num_channels=4 must equal x.shape\[1\]; got x.shape\[1\]=6", num_channels=4),
        bad(
            "groups_divide",
            ValueError,
            r"num_groups must be > 0 and divide num_channels=6; got num_groups=4",
            num_groups=4,
        ),
        bad("groups_zero", ValueError, r"num_groups must be > 0 .*got num_groups=0", num_groups=0),
        bad("groups_type", TypeError, r"num_groups must be an int; got float", num_groups=3.0),
        S.X_INT,
        bad("weight_dtype", TypeError, r"weight must have dtype .*got float64", weight=lambda w: w.double()),
        S.NEGATIVE_EPS,
        bad("one_dim", ValueError, r"at least 2-D; got 1-D", x=lambda x: x[0, 0]),
    ),
    checks=Checks(atol_scales=_scales),
    bench=B.BenchSpec(
        group="norms",
        axes=("tokens", "hidden", "batch"),
        layouts={"channels": _bench_args},
        torch_fn=lambda x, weight, bias, num_channels, num_groups, eps=1e-5: F.group_norm(
            x, num_groups, weight, bias, eps
        ),
        traffic=_traffic,
        describe=_describe,
        peers={
            B.LIGER_KERNEL: B.liger_kernel(
                "liger_group_norm", "x", "weight", "bias", "num_channels", "num_groups", "eps"
            )
        },
    ),
)
