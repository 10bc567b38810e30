from __future__ import annotations

import warnings

import torch
from torch import nn

from liger_core.functional import liger_mhc_coeffs, liger_mhc_post_res, liger_mhc_pre


class LigerMHC(nn.Module):
    """Manifold-constrained hyper-connections (mHC, arXiv:2512.24880) around ``layer``, as
    liger-kernel 0.8.5's ``LigerMHC``: ``x`` (``(..., HC, C)``, HC residual streams) gives the
    routing coefficients (`liger_mhc_coeffs`), the streams mix into the layer's input
    (`liger_mhc_pre`), and the layer's output and the streams mix back into HC streams
    (`liger_mhc_post_res`). ``layer`` maps ``(..., C)`` to ``(..., C)``; its input is cast to the
    dtype of its first parameter.

    Parameters as liger-kernel's: ``phi`` ``(HC * C, HC * HC + 2 * HC)`` (``phi_dtype``, normal *
    0.02), ``b`` (float32 zeros), ``alpha_pre``, ``alpha_post``, ``alpha_res`` (float32 ones), on
    the layer's device. ``allow_fp32`` is accepted for liger-kernel's signature: float32 streams
    are always accepted here (see `liger_core.ops.mhc_coeffs`)."""

    def __init__(
        self,
        layer: nn.Module,
        *,
        hc: int,
        c: int,
        tmax: int = 20,
        rms_eps: float = 1e-6,
        pre_eps: float = 0.0,
        sinkhorn_eps: float = 1e-6,
        post_mult: float = 2.0,
        phi_dtype: torch.dtype = torch.float16,
        allow_fp32: bool = False,
    ) -> None:
        super().__init__()
        self.layer = layer
        self.hc, self.c = int(hc), int(c)
        if self.hc > 16:
            warnings.warn(f"LigerMHC: hc={hc} is past the recommended range [2, 16]", stacklevel=2)
        self.tmax = int(tmax)
        self.rms_eps, self.pre_eps = float(rms_eps), float(pre_eps)
        self.sinkhorn_eps, self.post_mult = float(sinkhorn_eps), float(post_mult)
        self.allow_fp32 = bool(allow_fp32)
        device = next((p.device for p in layer.parameters()), torch.device("cpu"))
        m, k = self.hc * self.hc + 2 * self.hc, self.hc * self.c
        self.phi = nn.Parameter(torch.randn(k, m, dtype=phi_dtype, device=device) * 0.02)
        self.b = nn.Parameter(torch.zeros(m, dtype=torch.float32, device=device))
        self.alpha_pre = nn.Parameter(torch.ones((), dtype=torch.float32, device=device))
        self.alpha_post = nn.Parameter(torch.ones((), dtype=torch.float32, device=device))
        self.alpha_res = nn.Parameter(torch.ones((), dtype=torch.float32, device=device))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[-2:] != (self.hc, self.c):
            raise ValueError(
                f"LigerMHC: x must have shape (..., hc, c) = (..., {self.hc}, {self.c}); got x.shape={tuple(x.shape)}"
            )
        h_pre, h_post, h_res = liger_mhc_coeffs(
            x, self.phi, self.b, self.alpha_pre, self.alpha_post, self.alpha_res, self.tmax, self.rms_eps,
            self.pre_eps, self.sinkhorn_eps, self.post_mult,
        )  # fmt: skip
        x_in = liger_mhc_pre(x, h_pre)
        layer_dtype = next((p.dtype for p in self.layer.parameters()), x_in.dtype)
        f_out = self.layer(x_in.to(layer_dtype))
        return liger_mhc_post_res(x, f_out, h_post, h_res)

    def extra_repr(self) -> str:
        return f"hc={self.hc}, c={self.c}, tmax={self.tmax}"
