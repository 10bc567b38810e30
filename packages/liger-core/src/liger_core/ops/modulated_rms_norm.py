"""The `modulated_rms_norm` op: RMSNorm followed by an adaptive (AdaLN-style) scale and shift, as
Diffusion-Transformer blocks use it (liger-kernel's ``LigerModulatedRMSNorm``), declared once."""

from __future__ import annotations

import torch

from liger_core.bench import spec as B
from liger_core.op import Checks, Op, bad, sample
from liger_core.ops import _samples as S
from liger_core.ops import rms_norm as R
from liger_core.ops._checks import FLOAT_DTYPES, check_floating, check_rows, check_same_device


def modulated_rms_norm(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    scale: torch.Tensor,
    shift: torch.Tensor | None = None,
    eps: float = 1e-6,
    offset: float = 0.0,
    casting_mode: str = "llama",
    in_place: bool = False,
) -> torch.Tensor:
    """``y = (1 + scale) * rms_norm(x, weight, eps, offset, casting_mode) + shift``.

    Args:
        x: ``(..., hidden)``, float32, bfloat16 or float16; ``N = x.numel() // hidden`` rows.
        weight, eps, offset, casting_mode: exactly as in `liger_core.ops.rms_norm.rms_norm`; its
            result (rounded to ``x.dtype``) is what the modulation scales.
        scale: floating, ``M * hidden`` elements read as ``M`` rows of ``hidden`` (``(hidden,)``,
            ``(1, hidden)``, ``(batch, hidden)`` for x ``(batch, seq, hidden)``, or one row per
            token), with ``M`` dividing ``N``: row ``i`` of x uses scale row ``i // (N // M)``.
        shift: None, or floating with scale's number of elements (broadcast alike).
        in_place: allow the backward pass to write ``grad_x`` over the incoming gradient (the
            caller opts in); x, weight, scale and shift are never modified.

    Returns:
        ``y`` with ``x``'s shape and dtype; the modulation is computed in float32 and rounded once.
        Backward gives ``grad_x``, ``grad_weight``, ``grad_scale`` (scale's shape and dtype: the sum
        over the rows sharing each scale row of ``grad_y * rms_norm(x)``, in float32) and
        ``grad_shift`` (the sum of ``grad_y`` over the same rows).
    """
    check_args(x, weight, scale, shift, eps, offset, casting_mode, in_place)
    return math(x, weight, scale, shift, eps, offset, casting_mode, in_place)


def modulation_rows(x: torch.Tensor, scale: torch.Tensor) -> tuple[int, int]:
    """``(M, rows_per_modulation)``: scale's rows and the x rows that share each."""
    hidden = x.shape[-1]
    m = scale.numel() // hidden if hidden else 1
    n_rows = x.numel() // hidden if hidden else 0
    return m, (n_rows // m if m else 0)


def _modulation_ok(x: torch.Tensor, scale: torch.Tensor, shift: torch.Tensor | None) -> bool:
    hidden = x.shape[-1]
    if scale.dtype not in FLOAT_DTYPES or scale.device != x.device or hidden == 0:
        return False
    m, rem = divmod(scale.numel(), hidden)
    if rem or m == 0 or (x.numel() // hidden) % m:
        return False
    return shift is None or (shift.dtype in FLOAT_DTYPES and shift.device == x.device and shift.numel() == m * hidden)


def check_args(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    scale: torch.Tensor,
    shift: torch.Tensor | None,
    eps: float,
    offset: float,
    casting_mode: str,
    in_place: bool,
) -> None:
    """Raise a clear error for arguments outside the contract (one cheap predicate first)."""
    op = "modulated_rms_norm"
    try:
        if (
            x.dtype in FLOAT_DTYPES
            and x.ndim > 0
            and R.norm_options_ok(x, weight, eps, offset, casting_mode)
            and _modulation_ok(x, scale, shift)
        ):
            return
    except (AttributeError, TypeError):
        pass
    check_rows(op, x)
    R.check_norm_options(op, x, weight, eps, offset, casting_mode)
    check_floating("modulated_rms_norm", "scale", scale)
    check_same_device(op, x=x, scale=scale)
    hidden, n_rows = x.shape[-1], x.numel() // max(x.shape[-1], 1)
    if hidden == 0:
        raise ValueError(f"{op}: x must have a non-empty last dimension; got x.shape={tuple(x.shape)}")
    m, rem = divmod(scale.numel(), hidden)
    if rem or m == 0 or n_rows % m:
        raise ValueError(
            f"{op}: scale must hold M rows of hidden={hidden} elements with M dividing x's {n_rows} rows; "
            f"got scale.shape={tuple(scale.shape)}"
        )
    if shift is not None:
        check_floating("modulated_rms_norm", "shift", shift)
        check_same_device(op, x=x, shift=shift)
        if shift.numel() != scale.numel():
            raise ValueError(
                f"{op}: shift must have scale's {scale.numel()} elements (the same rows); "
                f"got shift.shape={tuple(shift.shape)}"
            )


def math(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    scale: torch.Tensor,
    shift: torch.Tensor | None,
    eps: float,
    offset: float,
    casting_mode: str,
    in_place: bool,
) -> torch.Tensor:
    """The formula, differentiable by autograd, for any floating dtype (float64 for the oracle)."""
    hidden = x.shape[-1]
    m, per = modulation_rows(x, scale)
    compute = torch.float64 if x.dtype == torch.float64 else torch.float32
    normed = R.math(x, weight, eps, offset, casting_mode, False).to(compute).reshape(m, per, hidden)
    y = normed * (1 + scale.to(compute).reshape(m, 1, hidden))
    if shift is not None:
        y = y + shift.to(compute).reshape(m, 1, hidden)
    return y.reshape(x.shape).to(x.dtype)


# -- declaration ---------------------------------------------------------------------------------


def args(
    device,
    shape=(4, 16),
    dtype=torch.float32,
    modulation_rows=1,
    scale_shape=None,
    has_shift=True,
    weight=True,
    mod_dtype=None,
    strided=False,
    **options,
):
    """rms_norm's x and weight (`liger_core.ops.rms_norm.args`) with ``modulation_rows`` rows of
    scale and shift (around 0, ``mod_dtype`` or x's), ``scale_shape`` to lay them out otherwise."""
    a = R.args(device, shape=shape, dtype=dtype, weight=weight, strided=strided, **options)
    g = S.gen(7)
    hidden = shape[-1]
    mshape = scale_shape or (modulation_rows, hidden)
    a["scale"] = S.to(device, mod_dtype or dtype, S.normal(mshape, g, 0.5))
    a["shift"] = S.to(device, mod_dtype or dtype, S.normal(mshape, g, 0.5)) if has_shift else None
    # The contract's parameter order.
    return {k: a[k] for k in ("x", "weight", "scale", "shift")} | {
        k: v for k, v in a.items() if k not in ("x", "weight")
    }


def samples():
    # One row, odd widths, several rows per modulation row, wider than one block, chunked widths, empty.
    for dtype in S.DTYPES:
        yield sample(args, dtype=dtype, shape=(1, 1))
        yield sample(args, dtype=dtype, shape=(3, 5), modulation_rows=3)
        yield sample(args, dtype=dtype, shape=(2, 7, 33), scale_shape=(2, 33))
        yield sample(args, dtype=dtype, shape=(130, 64), modulation_rows=5)
        yield sample(args, dtype=dtype, shape=(4, 1000), scale_shape=(1000,))
        yield sample(args, dtype=dtype, shape=(3, 20000), modulation_rows=3)
        yield sample(args, dtype=dtype, shape=(0, 48), modulation_rows=1)
    # The RMSNorm options, with and without shift, per-token and shared modulation.
    yield from S.grid(
        args,
        dict(
            dtype=S.OPTION_DTYPES,
            casting_mode=R.CASTING_MODES,
            offset=(0.0, 1.0),
            weight=(True, False),
            has_shift=(True, False),
            in_place=(False, True),
        ),
        shape=(2, 37, 96),
        scale_shape=(2, 96),
        eps=1e-5,
    )
    yield from S.grid(args, dict(modulation_rows=(1, 37)), shape=(37, 96), dtype=torch.bfloat16)
    # float32 weight and modulation with bf16 activations; a strided x.
    yield from S.grid(
        args,
        dict(casting_mode=R.CASTING_MODES),
        shape=(9, 130),
        dtype=torch.bfloat16,
        weight_dtype=torch.float32,
        mod_dtype=torch.float32,
        modulation_rows=3,
        offset=1.0,
    )
    yield sample(args, shape=(33, 40), strided=True, modulation_rows=11)


def _scales(a, upstream):
    m, per = modulation_rows(a["x"], a["scale"])
    dy = upstream["output"]
    hidden = a["x"].shape[-1]
    g = (dy.reshape(m, per, hidden) * (1 + a["scale"].reshape(m, 1, hidden))).reshape(dy.shape)
    rows = max(per, 1)
    scales = {"grad_x": S.peak(R.rms_grad_scale(a["x"], a["weight"], a["eps"], a["offset"], g))}
    # The modulation gradients sum ``per`` rows: their size is the sum of the terms' sizes.
    scales["grad_scale"] = S.peak(dy.abs()) * rows * 4
    scales["grad_shift"] = S.peak(dy.abs()) * rows
    return scales


def _bench_modulation(s, dt, dev, gen):
    # One modulation row per sequence (DiT's per-sample AdaLN), sequences of 512 tokens.
    rows = s.tokens // 512 if s.tokens % 512 == 0 else 1
    return B.normal((rows, s.hidden), dt, dev, gen, scale=0.1)


def _torch_modulated_rms_norm(x, weight, scale, shift=None, eps=1e-6, offset=0.0, casting_mode="llama", **_):
    # The models' eager form: LlamaRMSNorm, then the modulation broadcast over each sequence.
    h = x.float()
    h = ((offset + weight) * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)).view(
        scale.shape[0], -1, x.shape[-1]
    )
    return (h * (1 + scale[:, None]) + shift[:, None]).view(x.shape)


OP = Op(
    modulated_rms_norm,
    since=(1, 7),
    math=math,
    grads=("x", "weight", "scale", "shift"),
    samples=samples,
    smoke=(sample(args, shape=(3, 5), modulation_rows=3), sample(args, shape=(2, 7, 1000), scale_shape=(2, 1000))),
    error_sample=sample(args, shape=(4, 16)),
    errors=(
        S.elsewhere("weight"),
        S.too_short("weight", r"\(hidden,\) = \(16,\)"),
        S.X_INT,
        S.X_FLOAT64,
        bad("casting_mode", ValueError, r"casting_mode must be one of .*'llama'.*got 'bogus'", casting_mode="bogus"),
        S.NEGATIVE_EPS,
        S.X_SCALAR,
        bad(
            "int_scale",
            TypeError,
            r"scale must have dtype float32, bfloat16, float16; got int64",
            scale=lambda t: t.long(),
        ),
        bad(
            "scale_rows",
            ValueError,
            r"scale must hold M rows of hidden=16 elements with M dividing x's 4 rows; got scale.shape=\(3, 16\)",
            scale=lambda t: t.new_zeros(3, 16),
        ),
        bad(
            "scale_width",
            ValueError,
            r"scale must hold M rows of hidden=16.*got scale.shape=\(1, 15\)",
            scale=lambda t: t[:, :15],
        ),
        bad(
            "shift_shape",
            ValueError,
            r"shift must have scale's 16 elements.*got shift.shape=\(2, 16\)",
            shift=lambda t: t.new_zeros(2, 16),
        ),
        S.elsewhere("scale", "scale_elsewhere"),
    ),
    checks=Checks(
        atol_scales=_scales,
        overwritable=lambda a: ("grad_output",) if a["in_place"] else (),
    ),
    bench=B.norm(
        dict(weight=B.norm_weight, scale=_bench_modulation, shift=_bench_modulation),
        _torch_modulated_rms_norm,
        # Forward reads x, weight, scale, shift, writes y and rstd; backward reads dy, x and the
        # parameters, writes grad_x and the parameters' gradients.
        lambda s, e: (
            2 * s.tokens * s.hidden * e + s.hidden * e + 4 * s.tokens,
            3 * s.tokens * s.hidden * e + 2 * s.hidden * e + 4 * s.tokens,
        ),
        {
            # liger-kernel's LigerModulatedRMSNorm defaults: in_place=True.
            B.LIGER_KERNEL: B.liger_kernel(
                "liger_modulated_rms_norm",
                "x",
                "weight",
                "scale",
                "shift",
                "eps",
                "offset",
                "casting_mode",
                B.const(True),
            ),
        },
    ),
)
