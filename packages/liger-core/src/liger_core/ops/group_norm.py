"""The `group_norm` op: its contract, argument checks and PyTorch reference."""

from __future__ import annotations

import torch

from liger_core.ops._checks import FLOAT_DTYPES, check_floating, check_same_device


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
    raise NotImplementedError("contract only: call liger_core.functional.liger_group_norm")


def _param_ok(p: torch.Tensor | None, x: torch.Tensor) -> bool:
    return p is None or (p.dtype in FLOAT_DTYPES and p.ndim == 1 and p.shape[0] == x.shape[1] and p.device == x.device)


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
            and _param_ok(weight, x)
            and _param_ok(bias, x)
        ):
            return
    except (AttributeError, TypeError):
        pass
    _raise_bad_args(x, weight, bias, num_channels, num_groups, eps)


def _raise_bad_args(x, weight, bias, num_channels, num_groups, eps) -> None:
    check_floating("x", x)
    if x.dim() < 2:
        raise ValueError(f"group_norm: x must be (batch, channels, *spatial), at least 2-D; got {x.dim()}-D")
    for name, v in (("num_channels", num_channels), ("num_groups", num_groups)):
        if not isinstance(v, int) or isinstance(v, bool):
            raise TypeError(f"group_norm: {name} must be an int; got {type(v).__name__}")
    if num_channels != x.shape[1]:
        raise ValueError(f"group_norm: num_channels={num_channels} must equal x.shape[1]; got x.shape[1]={x.shape[1]}")
    if num_groups <= 0 or num_channels % num_groups != 0:
        raise ValueError(
            f"group_norm: num_groups must be > 0 and divide num_channels={num_channels}; got num_groups={num_groups}"
        )
    for name, p in (("weight", weight), ("bias", bias)):
        if p is None:
            continue
        check_floating(name, p)
        check_same_device("group_norm", x=x, **{name: p})
        if p.shape != (num_channels,):
            raise ValueError(
                f"group_norm: {name} must have shape (channels,) = ({num_channels},); got {name}.shape={tuple(p.shape)}"
            )
    if not isinstance(eps, (int, float)) or not eps >= 0:
        raise ValueError(f"group_norm: eps must be a number >= 0; got {eps!r}")


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
    mean = grouped.mean(-1, keepdim=True)
    centered = grouped - mean
    y = (centered * torch.rsqrt(centered.pow(2).mean(-1, keepdim=True) + eps)).reshape(x.shape)
    per_channel = (num_channels,) + (1,) * (x.dim() - 2)
    if weight is not None:
        y = y * weight.to(compute.dtype).reshape(per_channel)
    if bias is not None:
        y = y + bias.to(compute.dtype).reshape(per_channel)
    return y.to(x.dtype)


def reference(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    num_channels: int,
    num_groups: int,
    eps: float = 1e-5,
) -> torch.Tensor:
    check_args(x, weight, bias, num_channels, num_groups, eps)
    return math(x, weight, bias, num_channels, num_groups, eps)
