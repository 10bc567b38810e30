"""The compiled path without a GPU: build the norm-family kernels (rms_norm with and without
the residual, modulated_rms_norm, layer_norm, poly_norm, dyt, attn_res, group_norm, the partial
sums, embedding) for an H100/H200 (sm_90) down to a cubin.

The interpreter runs kernels as Python and never sees what only the Triton compiler checks
(loop-carried types, constexpr branches). A subprocess without TRITON_INTERPRET compiles
each kernel variant at the launch plans the package picks for model shapes, and reports
registers and stack (spill) bytes; skipped where this Triton cannot compile for CUDA here.
"""

from __future__ import annotations

from compile_sm90 import print_rows, run_variants

_SCRIPT = r"""
from compile_sm90 import report, require_nvidia_backend, skip, variant
try:
    import torch
    import triton
    from liger_ops_cuda import _tiling, attn_res, dyt, group_norm, hardware, layer_norm, poly_norm, rms_norm
    from liger_ops_cuda import embedding, modulated_rms_norm
    from liger_ops_cuda._tiling import plan_backward_tiles, plan_tiles
except Exception as e:
    skip(f"cannot import the compiler: {e!r}")
require_nvidia_backend()

P = lambda t: "*" + t
rows = []
# Row ops: the LLaMA hidden size and a chunked (wide) row in bf16, the whole-row plan in fp32.
for dt, n in (("bf16", 4096), ("bf16", 20000), ("fp32", 4096)):
    fp = plan_tiles(n)
    bp = plan_backward_tiles(n, hardware.LAYER_NORM_BACKWARD_TILE_ELEMENTS)
    tag = f"{dt} n={n}"
    T = dict(X=P(dt), W=P(dt), B=P(dt), Y=P(dt), MEAN=P("fp32"), RSTD=P("fp32"), eps="fp32")
    c = dict(HAS_WEIGHT=True, HAS_BIAS=True, BLOCK_M=fp.block_m, BLOCK_N=fp.block_n, CHUNKED=fp.chunked)
    rows.append(variant(f"layer_norm fwd {tag}", layer_norm._layer_norm_forward_kernel, T, c, fp.num_warps))
    T = dict(DY=P(dt), X=P(dt), W=P(dt), MEAN=P("fp32"), RSTD=P("fp32"), DX=P(dt), PARTIAL=P("fp32"))
    c = dict(HAS_WEIGHT=True, NEED_PARTIAL=True, BLOCK_M=bp.block_m, BLOCK_N=bp.block_n, CHUNKED=bp.chunked)
    rows.append(variant(f"layer_norm bwd {tag}", layer_norm._layer_norm_backward_kernel, T, c, bp.num_warps))
    # rms_norm (its tuned plans) and fused_add_rms_norm (HAS_RESIDUAL / HAS_DRES, its own backward tile).
    T = dict(X=P(dt), R=P(dt), W=P(dt), Y=P(dt), S=P(dt), RSTD=P("fp32"), eps="fp32", offset="fp32")
    c = dict(HAS_WEIGHT=True, ROUND_X_HAT=True, BLOCK_M=fp.block_m, BLOCK_N=fp.block_n, CHUNKED=fp.chunked)
    k = rms_norm._rms_norm_forward_kernel
    c_rms = dict(c, HAS_RESIDUAL=False, UNMASKED=not fp.chunked)
    rows.append(variant(f"rms_norm fwd {tag}", k, T, c_rms, fp.num_warps))
    rows.append(variant(f"fused_add fwd {tag}", k, T, dict(c, HAS_RESIDUAL=True, UNMASKED=False), fp.num_warps))
    T = dict(DY=P(dt), X=P(dt), W=P(dt), RSTD=P("fp32"), DX=P(dt), DW_PARTIAL=P("fp32"), DRES=P(dt), DR_OUT=P("fp32"),
             offset="fp32")
    k = rms_norm._rms_norm_backward_kernel
    rp = plan_tiles(n, backward=True)
    c = dict(HAS_WEIGHT=True, NEED_DW=True, HAS_DRES=False, WRITE_DR=False, ROUND_X_HAT=dt != "fp32",
             BLOCK_M=rp.block_m, BLOCK_N=rp.block_n, CHUNKED=rp.chunked)
    rows.append(variant(f"rms_norm bwd {tag}", k, T, c, rp.num_warps))
    bp = plan_backward_tiles(n, hardware.FUSED_ADD_RMS_NORM_BACKWARD_TILE_ELEMENTS)
    c.update(HAS_DRES=True, WRITE_DR=dt != "fp32", BLOCK_M=bp.block_m, BLOCK_N=bp.block_n, CHUNKED=bp.chunked)
    rows.append(variant(f"fused_add bwd {tag}", k, T, c, bp.num_warps))
    # modulated_rms_norm: rms_norm's forward plan; backward tiles for a sequence per modulation
    # row (fp32 partial slots) and for one modulation row per token (slots in scale's dtype).
    T = dict(X=P(dt), W=P(dt), SCALE=P(dt), SHIFT=P(dt), Y=P(dt), RSTD=P("fp32"), eps="fp32", offset="fp32")
    c = dict(HAS_WEIGHT=True, HAS_SHIFT=True, ROUND_X_HAT=True, BLOCK_M=fp.block_m, BLOCK_N=fp.block_n,
             CHUNKED=fp.chunked)
    rows.append(variant(f"modulated fwd {tag}", modulated_rms_norm._modulated_rms_norm_forward_kernel, T, c,
                        fp.num_warps))
    for per, slot in ((512, "fp32"), (1, dt)):
        mp = modulated_rms_norm.plan_backward_tiles(n, per)
        T = dict(DY=P(dt), X=P(dt), W=P(dt), SCALE=P(dt), RSTD=P("fp32"), DX=P(dt), DW_PARTIAL=P("fp32"),
                 DSCALE=P(slot), DSHIFT=P(slot), offset="fp32")
        c = dict(HAS_WEIGHT=True, NEED_DW=True, HAS_SHIFT=True, ROUND_X_HAT=dt != "fp32", BLOCK_M=mp.block_m,
                 BLOCK_N=mp.block_n, CHUNKED=mp.chunked)
        rows.append(variant(f"modulated bwd per={per} {tag}", modulated_rms_norm._modulated_rms_norm_backward_kernel,
                            T, c, mp.num_warps))
    T = dict(X=P(dt), W=P("fp32"), B=P("fp32"), Y=P(dt), RSTD=P("fp32"), eps="fp32")
    pf = poly_norm.plan_forward(n)
    c = dict(BLOCK_M=pf.block_m, BLOCK_N=pf.block_n, CHUNKED=pf.chunked)
    rows.append(variant(f"poly_norm fwd {tag}", poly_norm._poly_norm_forward_kernel, T, c, pf.num_warps))
    pp = poly_norm.plan_backward(n)
    T = dict(DY=P(dt), X=P(dt), W=P("fp32"), RSTD=P("fp32"), DX=P(dt), PARTIAL=P("fp32"))
    c = dict(BLOCK_M=pp.block_m, BLOCK_N=pp.block_n, CHUNKED=pp.chunked)
    rows.append(variant(f"poly_norm bwd {tag}", poly_norm._poly_norm_backward_kernel, T, c, pp.num_warps))
    bm, bn, w = dyt.plan_dyt(n, hardware.DYT_TILE_ELEMENTS, hardware.DYT_MAX_BLOCK_N)
    T = dict(X=P(dt), ALPHA=P(dt), GAMMA=P(dt), BETA=P(dt), Y=P(dt))
    c = dict(HAS_BETA=True, BLOCK_M=bm, BLOCK_N=bn)
    rows.append(variant(f"dyt fwd {tag}", dyt._dyt_forward_kernel, T, c, w))
    bm, bn, w = dyt.plan_dyt(n, hardware.DYT_BACKWARD_TILE_ELEMENTS, hardware.DYT_MAX_BLOCK_N)
    T = dict(DY=P(dt), X=P(dt), ALPHA=P(dt), GAMMA=P(dt), DX=P(dt), PARTIAL=P("fp32"), ALPHA_PARTIAL=P("fp32"))
    c = dict(NEED_PARTIAL=True, BLOCK_M=bm, BLOCK_N=bn)
    rows.append(variant(f"dyt bwd {tag}", dyt._dyt_backward_kernel, T, c, w))
    # attn_res over liger-kernel's benchmark depth (8 blocks).
    bm, bn, bb, w = attn_res.plan_attn_res(n, 8)
    T = dict(V=P(dt), W_QUERY=P(dt), W_NORM=P(dt), H=P(dt), SCORE=P("fp32"), RSTD=P("fp32"), LSE=P("fp32"), eps="fp32")
    c = dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_B=bb)
    rows.append(variant(f"attn_res fwd {tag}", attn_res._attn_res_forward_kernel, T, c, w))
    T = dict(DH=P(dt), V=P(dt), W_QUERY=P(dt), W_NORM=P(dt), SCORE=P("fp32"), RSTD=P("fp32"), LSE=P("fp32"),
             DV=P(dt), PARTIAL=P("fp32"))
    rows.append(variant(f"attn_res bwd {tag}", attn_res._attn_res_backward_kernel, T, c, w))
# GroupNorm at the issue's 32 x 128 x 8192 (32 groups) and a small-spatial shape, both plans.
for dt in ("bf16", "fp32"):
    for groups, cg, hw in ((1024, 4, 8192), (64, 16, 49)):
        for split in (False, True):
            p = group_norm.plan_groups(groups, cg, hw, torch.device("cpu"), split=split)
            tag = f"{dt} cg={cg} hw={hw}"
            tiles = dict(BLOCK_C=p.block_c, BLOCK_HW=p.block_hw)
            if not split:
                T = dict(X=P(dt), W=P(dt), B=P(dt), Y=P(dt), MEAN=P("fp32"), RSTD=P("fp32"), eps="fp32")
                rows.append(variant(f"gn fused fwd {tag}", group_norm._group_norm_fused_forward_kernel, T,
                                    dict(HAS_WEIGHT=True, HAS_BIAS=True, **tiles), p.num_warps))
                T = dict(X=P(dt), DY=P(dt), W=P(dt), MEAN=P("fp32"), RSTD=P("fp32"), DX=P(dt), PARTIAL=P("fp32"))
                rows.append(variant(f"gn fused bwd {tag}", group_norm._group_norm_fused_backward_kernel, T,
                                    dict(HAS_WEIGHT=True, NEED_PARTIAL=True, **tiles), p.num_warps))
                continue
            cp2 = triton.next_power_of_2(p.n_chunks)
            T = dict(X=P(dt), STATS=P("fp32"))
            rows.append(variant(f"gn split stats {tag}", group_norm._group_norm_split_stats_kernel, T,
                                dict(**tiles, CHUNKS_P2=cp2), p.num_warps))
            T = dict(X=P(dt), W=P(dt), B=P(dt), Y=P(dt), STATS=P("fp32"), MEAN=P("fp32"), RSTD=P("fp32"), eps="fp32")
            rows.append(variant(f"gn split apply {tag}", group_norm._group_norm_split_apply_kernel, T,
                                dict(HAS_WEIGHT=True, HAS_BIAS=False, **tiles, CHUNKS_P2=cp2), p.num_warps))
            T = dict(X=P(dt), DY=P(dt), W=P(dt), MEAN=P("fp32"), RSTD=P("fp32"), GSUMS=P("fp32"), PARTIAL=P("fp32"))
            rows.append(variant(f"gn split grad sums {tag}", group_norm._group_norm_split_grad_sums_kernel, T,
                                dict(HAS_WEIGHT=True, NEED_PARTIAL=True, **tiles, CHUNKS_P2=cp2), p.num_warps))
            T = dict(X=P(dt), DY=P(dt), W=P(dt), MEAN=P("fp32"), RSTD=P("fp32"), GSUMS=P("fp32"), DX=P(dt))
            rows.append(variant(f"gn split grad apply {tag}", group_norm._group_norm_split_grad_apply_kernel, T,
                                dict(HAS_WEIGHT=True, **tiles, CHUNKS_P2=cp2), p.num_warps))
# embedding's gather and its backward's two kernels (the segment sums' `while` over a run whose
# end is loaded) at 4096 wide.
for dt in ("bf16", "fp32"):
    T = dict(W=P(dt), IDX=P("i64"), Y=P(dt))
    c = dict(BLOCK_M=hardware.EMBEDDING_BLOCK_M, BLOCK_N=hardware.EMBEDDING_BLOCK_N)
    rows.append(variant(f"embedding fwd {dt}", embedding._embedding_forward_kernel, T, c, hardware.EMBEDDING_NUM_WARPS))
    bm, bn = embedding.plan_zero_rows(4096)
    T = dict(LOOKED_UP=P("i8"), DW=P(dt))
    rows.append(variant(f"embedding bwd zero rows {dt}", embedding._embedding_zero_unused_rows_kernel, T,
                        dict(BLOCK_M=bm, BLOCK_N=bn), hardware.EMBEDDING_ZERO_NUM_WARPS))
    T = dict(DY=P(dt), SORTED_IDX=P("i32"), ORDER=P("i64"), DW=P(dt))  # int32 keys: drivers.embedding.sorted_positions
    rows.append(variant(f"embedding bwd segment sums {dt}", embedding._embedding_segment_sums_kernel, T,
                        dict(BLOCK_N=embedding.plan_segment_sums(4096)), hardware.EMBEDDING_SEGMENT_NUM_WARPS))
T = dict(PARTIAL=P("fp32"), OUT0=P("bf16"), OUT1=P("fp32"))
rows.append(variant("sum_partials", _tiling._sum_partials_kernel, T,
                    dict(HAS_OUT0=True, HAS_OUT1=True, BLOCK_P=hardware.REDUCE_ROWS, BLOCK=hardware.REDUCE_BLOCK), 4))
report(rows)
"""


def test_norm_kernels_compile_for_sm90():
    rows = run_variants(_SCRIPT, TRITON_DEFAULT_FP_FUSION="1")
    # Report what ptxas made of each plan (stack bytes are register spills).
    print_rows(rows, 40)
