"""Quick per-op checks for ``liger check``: one entry per catalogue op.

Each entry names a couple of shapes and a function ``run(backend, device, dtype, shape)``
that runs the backend's op forward and backward on fresh inputs and compares the output
and every gradient with the float64 reference through the conformance helpers; it raises
(AssertionError or whatever the kernel raised) on a mismatch. A new op adds one entry here
(a test checks that every catalogue op has one). The full suite stays in ``cases.py``.

The checks come from the pytest-free ``*_check`` modules, so ``liger check`` needs no pytest.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from liger_core.backend import Backend

SmokeFn = Callable[[Backend, str, torch.dtype, tuple[int, ...]], None]


@dataclass(frozen=True)
class Smoke:
    """How ``liger check`` exercises one op: shapes to try and the check to run per shape and dtype."""

    shapes: tuple[tuple[int, ...], ...]
    run: SmokeFn


def _rms_norm(backend: Backend, device: str, dtype: torch.dtype, shape: tuple[int, ...]) -> None:
    from liger_core.conformance.rms_norm_check import check_rms_norm, make_inputs

    x, w, dy = make_inputs(shape, dtype, device)
    check_rms_norm(backend, x, w, dy)


def _fused_add_rms_norm(backend: Backend, device: str, dtype: torch.dtype, shape: tuple[int, ...]) -> None:
    from liger_core.conformance.fused_add_rms_norm_check import check_fused_add_rms_norm, make_inputs

    x, r, w, dy, ds = make_inputs(shape, dtype, device)
    check_fused_add_rms_norm(backend, x, r, w, dy, ds)


def _layer_norm(backend: Backend, device: str, dtype: torch.dtype, shape: tuple[int, ...]) -> None:
    from liger_core.conformance.layer_norm_check import check_layer_norm, make_inputs

    x, w, b, dy = make_inputs(shape, dtype, device)
    check_layer_norm(backend, x, w, b, dy)


def _group_norm(backend: Backend, device: str, dtype: torch.dtype, shape: tuple[int, ...]) -> None:
    from liger_core.conformance.group_norm_check import check_group_norm, make_inputs

    # Shapes are (batch, channels, *spatial) with channels divisible by 2: two groups.
    x, w, b, dy = make_inputs(shape, dtype, device)
    check_group_norm(backend, x, w, b, dy, num_groups=2)


def _poly_norm(backend: Backend, device: str, dtype: torch.dtype, shape: tuple[int, ...]) -> None:
    from liger_core.conformance.poly_norm_check import check_poly_norm, make_inputs

    x, w, b, dy = make_inputs(shape, dtype, device)
    check_poly_norm(backend, x, w, b, dy)


def _dyt(backend: Backend, device: str, dtype: torch.dtype, shape: tuple[int, ...]) -> None:
    from liger_core.conformance.dyt_check import check_dyt, make_inputs

    x, alpha, gamma, beta, dy = make_inputs(shape, dtype, device)
    check_dyt(backend, x, alpha, gamma, beta, dy)


def _swiglu(backend: Backend, device: str, dtype: torch.dtype, shape: tuple[int, ...]) -> None:
    from liger_core.conformance.swiglu_check import check_swiglu, make_inputs

    check_swiglu(backend, *make_inputs(shape, dtype, device))


def _geglu(backend: Backend, device: str, dtype: torch.dtype, shape: tuple[int, ...]) -> None:
    from liger_core.conformance.geglu_check import check_geglu, make_inputs

    check_geglu(backend, *make_inputs(shape, dtype, device))


def _rope(backend: Backend, device: str, dtype: torch.dtype, shape: tuple[int, ...]) -> None:
    # shape = (batch, q_heads, k_heads, seq, head_dim); q/k stored as LLaMA's transposed views.
    from liger_core.conformance.rope_check import check_rope, make_inputs

    check_rope(backend, *make_inputs(*shape, dtype, device, transposed_storage=True))


def _qwen2vl_mrope(backend: Backend, device: str, dtype: torch.dtype, shape: tuple[int, ...]) -> None:
    # shape = (batch, q_heads, k_heads, seq, head_dim)
    from liger_core.conformance.qwen2vl_mrope_check import check_qwen2vl_mrope, default_section, make_inputs

    q, k, cos, sin, dq, dk = make_inputs(*shape, dtype, device, transposed_storage=True)
    check_qwen2vl_mrope(backend, q, k, cos, sin, dq, dk, default_section(shape[-1]))


def _softmax(backend: Backend, device: str, dtype: torch.dtype, shape: tuple[int, ...]) -> None:
    from liger_core.conformance.softmax_check import check_softmax, make_inputs

    check_softmax(backend, *make_inputs(shape, dtype, device))


def _sparsemax(backend: Backend, device: str, dtype: torch.dtype, shape: tuple[int, ...]) -> None:
    from liger_core.conformance.sparsemax_check import check_sparsemax, make_inputs

    check_sparsemax(backend, *make_inputs(shape, dtype, device))


def _cross_entropy(backend: Backend, device: str, dtype: torch.dtype, shape: tuple[int, ...]) -> None:
    from liger_core.conformance.cross_entropy_check import check_cross_entropy, make_inputs

    logits, target, weight = make_inputs(*shape, dtype, device, weighted=True)
    check_cross_entropy(backend, logits, target, weight, lse_square_scale=1e-3, label_smoothing=0.1)


def _fused_linear_cross_entropy(backend: Backend, device: str, dtype: torch.dtype, shape: tuple[int, ...]) -> None:
    from liger_core.conformance.fused_linear_cross_entropy_check import check_fused_linear_cross_entropy, make_inputs

    check_fused_linear_cross_entropy(backend, *make_inputs(*shape, dtype, device, bias=True))


def _kl_div(backend: Backend, device: str, dtype: torch.dtype, shape: tuple[int, ...]) -> None:
    from liger_core.conformance.kl_div_check import check_kl_div, make_inputs

    check_kl_div(backend, *make_inputs(*shape, dtype, device))


def _jsd(backend: Backend, device: str, dtype: torch.dtype, shape: tuple[int, ...]) -> None:
    from liger_core.conformance.jsd_check import check_jsd, make_inputs

    check_jsd(backend, *make_inputs(*shape, dtype, device))


def _fused_linear_jsd(backend: Backend, device: str, dtype: torch.dtype, shape: tuple[int, ...]) -> None:
    from liger_core.conformance.fused_linear_jsd_check import check_fused_linear_jsd, make_inputs

    check_fused_linear_jsd(backend, *make_inputs(*shape, dtype, device))


def _tvd(backend: Backend, device: str, dtype: torch.dtype, shape: tuple[int, ...]) -> None:
    from liger_core.conformance.tvd_check import check_tvd, make_inputs

    check_tvd(backend, *make_inputs(*shape, dtype, device))


# Small odd rows, and 3-D input with rows wider than one 512/1024 tile; small enough for
# the Triton interpreter on CPU.
SMOKE: dict[str, Smoke] = {
    "rms_norm": Smoke(shapes=((3, 5), (2, 7, 1000)), run=_rms_norm),
    "fused_add_rms_norm": Smoke(shapes=((3, 5), (2, 7, 1000)), run=_fused_add_rms_norm),
    "layer_norm": Smoke(shapes=((3, 5), (2, 7, 1000)), run=_layer_norm),
    "group_norm": Smoke(shapes=((3, 4, 5), (2, 8, 700)), run=_group_norm),
    "poly_norm": Smoke(shapes=((3, 5), (2, 7, 1000)), run=_poly_norm),
    "dyt": Smoke(shapes=((3, 5), (2, 7, 1000)), run=_dyt),
    "swiglu": Smoke(shapes=((3, 5), (2, 7, 1000)), run=_swiglu),
    "geglu": Smoke(shapes=((3, 5), (2, 7, 1000)), run=_geglu),
    "rope": Smoke(shapes=((1, 2, 1, 3, 8), (2, 8, 2, 5, 64)), run=_rope),
    "qwen2vl_mrope": Smoke(shapes=((1, 2, 1, 3, 8), (2, 8, 2, 5, 64)), run=_qwen2vl_mrope),
    "softmax": Smoke(shapes=((3, 5), (2, 7, 1000)), run=_softmax),
    "sparsemax": Smoke(shapes=((3, 5), (2, 7, 1000)), run=_sparsemax),
    # losses: (tokens, vocab), or (tokens, hidden, vocab) / (tokens, hidden, teacher_hidden, vocab).
    "cross_entropy": Smoke(shapes=((3, 5), (6, 3000)), run=_cross_entropy),
    "fused_linear_cross_entropy": Smoke(shapes=((3, 8, 5), (20, 16, 700)), run=_fused_linear_cross_entropy),
    "kl_div": Smoke(shapes=((3, 5), (6, 3000)), run=_kl_div),
    "jsd": Smoke(shapes=((3, 5), (6, 3000)), run=_jsd),
    "fused_linear_jsd": Smoke(shapes=((3, 8, 8, 5), (20, 16, 12, 700)), run=_fused_linear_jsd),
    "tvd": Smoke(shapes=((3, 5), (6, 3000)), run=_tvd),
}
