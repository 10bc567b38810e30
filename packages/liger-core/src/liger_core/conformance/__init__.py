"""The conformance suite every backend runs: each catalogue op, output and every gradient,
against the float64 reference, at the tolerances below. The cases are generated from the ops'
declarations (`liger_core.conformance.cases`); the check itself is `liger_core.conformance.check`.

A vendor package uses it from its tests:

    # tests/conftest.py
    os.environ.setdefault("LIGER_EXTRA_BACKENDS", "liger_ops_cuda")  # the source tree's backend
    os.environ.setdefault("LIGER_CONFORMANCE_BACKEND", "cuda")
    pytest_plugins = ["liger_core.conformance.plugin"]

    # tests/test_conformance.py
    from liger_core.conformance.cases import *  # noqa: F403
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Tolerance:
    """An element passes when |actual - expected| <= atol * scale + rtol * |expected|, where
    scale = max(max|expected|, 1e-3): cases use O(1) inputs, so a result far below 1e-3
    (the grad_x of a one-column RMSNorm, say) is cancellation noise around zero."""

    rtol: float
    atol: float


# Stated per output dtype. bf16 keeps 8 mantissa bits (2^-8 = 0.4% per rounding) and kernels
# round an output up to twice on the way (LLaMA casting); fp16 keeps 11.
TOLERANCES: dict[torch.dtype, Tolerance] = {
    torch.float32: Tolerance(rtol=1e-4, atol=1e-5),
    torch.float16: Tolerance(rtol=5e-3, atol=5e-3),
    torch.bfloat16: Tolerance(rtol=2e-2, atol=2e-2),
}

DTYPES = tuple(TOLERANCES)


def loosest(*dtypes: torch.dtype | None) -> torch.dtype:
    """The least precise of the dtypes that took part: a result is as exact as its worst input."""
    return max((d for d in dtypes if d is not None), key=lambda d: TOLERANCES[d].rtol)


def assert_close(
    actual: torch.Tensor,
    expected: torch.Tensor,
    dtype: torch.dtype,
    what: str,
    scale: float | None = None,
) -> None:
    """Compare a kernel result with the float64 oracle at ``dtype``'s stated tolerance.

    ``scale`` overrides the default magnitude for atol where the op's math cancels large
    terms (give the magnitude of the terms before they cancel).
    """
    if actual.shape != expected.shape:
        raise AssertionError(f"{what}: shape {tuple(actual.shape)}, expected {tuple(expected.shape)}")
    if actual.numel() == 0:
        return
    tol = TOLERANCES[dtype]
    a = actual.detach().to("cpu", torch.float64)
    e = expected.detach().to("cpu", torch.float64)
    if not torch.isfinite(a).all():
        raise AssertionError(f"{what}: {int((~torch.isfinite(a)).sum())} non-finite values")
    scale = e.abs().max().clamp_min(1e-3) if scale is None else torch.tensor(max(scale, 1e-3))
    err = (a - e).abs()
    bound = tol.atol * scale + tol.rtol * e.abs()
    bad = err > bound
    if bad.any():
        worst = int((err - bound).argmax())
        raise AssertionError(
            f"{what} ({str(dtype).removeprefix('torch.')}): {int(bad.sum())} of {a.numel()} elements "
            f"outside rtol={tol.rtol}, atol={tol.atol}*scale (scale={float(scale):.4g}); worst at flat "
            f"index {worst}: got {float(a.flatten()[worst]):.6g}, expected {float(e.flatten()[worst]):.6g}"
        )


def require_op(backend, op: str):
    """The backend's implementation of ``op``; skips the case (saying why) when the backend
    declares an older interface that predates the op, so a vendor package can run a newer
    liger-core's suite. A backend whose interface includes the op but lacks it never gets
    here: it fails validation at load."""
    fn = backend.op(op) if hasattr(backend, "op") else backend.ops.get(op)
    if fn is None:
        import pytest

        from liger_core.interface import CATALOGUE, format_version

        since = format_version(CATALOGUE[op].since)
        pytest.skip(f"backend {backend.name!r} implements interface {backend.interface_version}; {op} needs {since}")
    return fn
