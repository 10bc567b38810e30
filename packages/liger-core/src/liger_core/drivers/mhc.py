"""mHC's drivers (`liger_core.ops.mhc_coeffs`, `mhc_pre`, `mhc_post_res`): the three autograd
Functions over a vendor's kernels.

mhc_coeffs: the projection ``mix = (v @ phi) * rstd`` (v: x's tokens flattened to HC * C values)
and the per-token part (two sigmoid maps, Sinkhorn-Knopp over the HC x HC residual matrix) are the
vendor's; the driver forms the alphas, the upstream gradients (a zero one for an unused output),
the sums over the tokens that b and the alphas take, and the projection's per-token ``d_proj`` and
``coef``. v is saved in x's dtype (a view of x where x is contiguous): a vendor that computes in
float32 upcasts inside its methods (Ascend used to save a float32 copy of v; the upcast moved to
its backward, which gives the same values and keeps less memory).

mhc_pre and mhc_post_res: the tokens flattened (tokens, HC, C), dense; a vendor's forward also
returns the stream tensors as its backward wants them back (x itself, or a copy laid out for its
hardware: Ascend's 32-byte row pitch), which the driver saves.
"""

from __future__ import annotations

from typing import Protocol

import torch

from liger_core.drivers import check_protocol
from liger_core.ops._losses import autograd_function as build_function
from liger_core.ops.mhc_coeffs import check_args as check_coeffs_args
from liger_core.ops.mhc_post_res import check_args as check_post_res_args
from liger_core.ops.mhc_pre import check_args as check_pre_args

PROTOCOL = 1


class MHCKernels(Protocol):
    """What a vendor provides. Every tensor handed over is contiguous and token-major (the leading
    dimensions flattened into one token axis)."""

    protocol: int

    def projection_forward(
        self, v: torch.Tensor, phi: torch.Tensor, rms_eps: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(mix (tokens, M), rstd (tokens,)), both float32, from v (tokens, K) in x's dtype and phi
        (K, M): ``rstd = rsqrt(mean(v^2) + rms_eps)``, ``mix = (v @ phi) * rstd`` in float32."""

    def projection_backward(
        self, v: torch.Tensor, phi: torch.Tensor, d_proj: torch.Tensor, coef: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(grad_v (tokens, K) in v's dtype, grad_phi (K, M) float32): ``d_v = d_proj @ phi^T - v *
        coef[:, None]``, ``d_phi = v^T @ d_proj``; d_proj (tokens, M) and coef (tokens,) float32."""

    def sinkhorn_forward(
        self,
        mix: torch.Tensor,
        b: torch.Tensor,
        alphas: torch.Tensor,
        hc: int,
        tmax: int,
        pre_eps: float,
        sinkhorn_eps: float,
        post_mult: float,
        store_hist: bool,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """(h_pre (tokens, HC), h_post (tokens, HC), h_res (tokens, HC, HC), history) float32 from
        mix (tokens, HC^2 + 2 HC) float32, b (HC^2 + 2 HC,) and alphas (3,) float32. ``history``:
        whatever `sinkhorn_backward` needs of the iterations (None when not ``store_hist``)."""

    def sinkhorn_backward(
        self,
        mix: torch.Tensor,
        b: torch.Tensor,
        alphas: torch.Tensor,
        hist: torch.Tensor | None,
        d_pre: torch.Tensor,
        d_post: torch.Tensor,
        d_res: torch.Tensor,
        hc: int,
        tmax: int,
        sinkhorn_eps: float,
        post_mult: float,
    ) -> torch.Tensor:
        """The gradient of every logit (tokens, HC^2 + 2 HC) float32; d_pre, d_post, d_res float32."""

    def pre_forward(self, x: torch.Tensor, h_pre: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(x_in (tokens, C) in x's dtype, contiguous; x as `pre_backward` takes it back) from x
        (tokens, HC, C) and h_pre (tokens, HC)."""

    def pre_backward(
        self, x_saved: torch.Tensor, h_pre: torch.Tensor, d_out: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(grad_x (tokens, HC, C) in x's dtype, contiguous; grad_h_pre (tokens, HC) float32) from
        `pre_forward`'s x, h_pre and d_out (tokens, C)."""

    def post_res_forward(
        self, x: torch.Tensor, f_out: torch.Tensor, h_post: torch.Tensor, h_res: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(x_out (tokens, HC, C) in x's dtype, contiguous; x and f_out as `post_res_backward`
        takes them back) from x (tokens, HC, C), f_out (tokens, C), h_post (tokens, HC) and h_res
        (tokens, HC, HC)."""

    def post_res_backward(
        self,
        x_saved: torch.Tensor,
        f_saved: torch.Tensor,
        h_post: torch.Tensor,
        h_res: torch.Tensor,
        d_out: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """(grad_x (tokens, HC, C), grad_f_out (tokens, C)) contiguous in their inputs' dtypes and
        (grad_h_post, grad_h_res) float32, from `post_res_forward`'s tensors and d_out (tokens, HC, C)."""


def _tokens(t: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
    # The kernels index dense token-major tensors: flatten the leading dims, copy only if strided.
    return t.reshape(shape).contiguous()


def _upstream(grad: torch.Tensor | None, shape: tuple[int, ...], device: torch.device) -> torch.Tensor:
    # An output the loss never used has no gradient: a zero one stands in (float32, contiguous).
    if grad is None:
        return torch.zeros(shape, dtype=torch.float32, device=device)
    return grad.reshape(shape).to(torch.float32).contiguous()


def autograd_functions(kernels: MHCKernels, module: str) -> dict[str, type[torch.autograd.Function]]:
    """``{"mhc_coeffs": LigerMHCCoeffsFunction, "mhc_pre": LigerMHCPreFunction, "mhc_post_res":
    LigerMHCPostResFunction}`` over ``kernels``, defined in the vendor's ``module``."""
    check_protocol(kernels, "mhc", PROTOCOL)

    def coeffs_forward(
        ctx, x, phi, b, alpha_pre, alpha_post, alpha_res, tmax, rms_eps, pre_eps, sinkhorn_eps, post_mult
    ):
        check_coeffs_args(x, phi, b, alpha_pre, alpha_post, alpha_res, tmax, rms_eps, pre_eps, sinkhorn_eps, post_mult)
        hc, c = x.shape[-2], x.shape[-1]
        lead = x.shape[:-2]
        # The projection in float32 (no rounding of the logits), from x in its own dtype.
        v = x.reshape(-1, hc * c).contiguous()
        mix, rstd = kernels.projection_forward(v, phi.contiguous(), rms_eps)
        alphas = torch.stack((alpha_pre, alpha_post, alpha_res)).float()
        h_pre, h_post, h_res, hist = kernels.sinkhorn_forward(
            mix, b, alphas, hc, tmax, pre_eps, sinkhorn_eps, post_mult, store_hist=any(ctx.needs_input_grad)
        )
        ctx.save_for_backward(v, phi, b, mix, rstd, alphas, hist)
        ctx.meta = (x.shape, tmax, sinkhorn_eps, post_mult)
        ctx.dtypes = (alpha_pre.dtype, alpha_post.dtype, alpha_res.dtype)
        return h_pre.view(*lead, hc), h_post.view(*lead, hc), h_res.view(*lead, hc, hc)

    def coeffs_backward(ctx, d_pre, d_post, d_res):
        v, phi, b, mix, rstd, alphas, hist = ctx.saved_tensors
        x_shape, tmax, sinkhorn_eps, post_mult = ctx.meta
        hc = x_shape[-2]
        n_tokens = mix.shape[0]
        d_pre = _upstream(d_pre, (n_tokens, hc), mix.device)
        d_post = _upstream(d_post, (n_tokens, hc), mix.device)
        d_res = _upstream(d_res, (n_tokens, hc, hc), mix.device)
        d_logits = kernels.sinkhorn_backward(
            mix, b, alphas, hist, d_pre, d_post, d_res, hc, tmax, sinkhorn_eps, post_mult
        )
        # logits = alpha * mix + b per segment: b and the alphas take the sums over the tokens.
        segments = (slice(0, hc), slice(hc, 2 * hc), slice(2 * hc, None))
        d_alphas = [(d_logits[:, s] * mix[:, s]).sum().to(dt) for s, dt in zip(segments, ctx.dtypes)]
        alpha_cols = torch.cat([alphas[i].expand(n) for i, n in enumerate((hc, hc, hc * hc))])
        d_mix = d_logits * alpha_cols
        # mix = (v @ phi) * rstd, rstd = rsqrt(mean(v^2) + eps): d rstd / dv = -rstd^3 v / K.
        d_proj = (d_mix * rstd[:, None]).contiguous()
        coef = ((d_mix * mix).sum(-1) * rstd.square() / v.shape[1]).contiguous()
        d_v, d_phi = kernels.projection_backward(v, phi.contiguous(), d_proj, coef)
        d_x = d_v.view(x_shape)
        return d_x, d_phi.to(phi.dtype), d_logits.sum(0).to(b.dtype), *d_alphas, None, None, None, None, None

    def pre_forward(ctx, x, h_pre):
        check_pre_args(x, h_pre)
        hc, n_channels = x.shape[-2], x.shape[-1]
        h_flat = _tokens(h_pre, (-1, hc))
        out, x_saved = kernels.pre_forward(_tokens(x, (-1, hc, n_channels)), h_flat)
        ctx.save_for_backward(x_saved, h_flat)
        ctx.meta = (x.shape, h_pre.dtype)
        return out.view(*x.shape[:-2], n_channels)

    def pre_backward(ctx, d_out):
        x_saved, h_flat = ctx.saved_tensors
        x_shape, h_dtype = ctx.meta
        d_x, d_h_pre = kernels.pre_backward(x_saved, h_flat, _tokens(d_out, (-1, x_shape[-1])))
        return d_x.view(x_shape), d_h_pre.to(h_dtype).view(x_shape[:-1])

    def post_res_forward(ctx, x, f_out, h_post, h_res):
        check_post_res_args(x, f_out, h_post, h_res)
        hc, n_channels = x.shape[-2], x.shape[-1]
        h_post_flat = _tokens(h_post, (-1, hc))
        h_res_flat = _tokens(h_res, (-1, hc, hc))
        out, x_saved, f_saved = kernels.post_res_forward(
            _tokens(x, (-1, hc, n_channels)), _tokens(f_out, (-1, n_channels)), h_post_flat, h_res_flat
        )
        ctx.save_for_backward(x_saved, f_saved, h_post_flat, h_res_flat)
        ctx.meta = (x.shape, h_post.dtype, h_res.dtype)
        return out.view(x.shape)

    def post_res_backward(ctx, d_out):
        x_saved, f_saved, h_post_flat, h_res_flat = ctx.saved_tensors
        x_shape, h_post_dtype, h_res_dtype = ctx.meta
        hc, n_channels = x_shape[-2], x_shape[-1]
        d_out = _tokens(d_out, (-1, hc, n_channels))
        d_x, d_f_out, d_h_post, d_h_res = kernels.post_res_backward(x_saved, f_saved, h_post_flat, h_res_flat, d_out)
        lead = x_shape[:-2]
        return (
            d_x.view(x_shape),
            d_f_out.view(*lead, n_channels),
            d_h_post.to(h_post_dtype).view(*lead, hc),
            d_h_res.to(h_res_dtype).view(*lead, hc, hc),
        )

    return {
        "mhc_coeffs": build_function("LigerMHCCoeffsFunction", module, coeffs_forward, coeffs_backward),
        "mhc_pre": build_function("LigerMHCPreFunction", module, pre_forward, pre_backward),
        "mhc_post_res": build_function("LigerMHCPostResFunction", module, post_res_forward, post_res_backward),
    }
