"""Rotary position embeddings for Ascend NPUs: RoPE (rotate-half, transformers' LLaMA form),
Qwen2-VL's multimodal M-RoPE (each column of a head taking cos/sin from its section's table:
temporal, height, width) and Llama 4's complex form (interleaved pairs times ``freqs_cis``): one
kernel for all three, its tile plan, launch and the kernel adapter of `liger_core.drivers.rotary`.

Work is flattened over the ``batch * seq`` positions: one program per vector core walks
the positions ``pid, pid + programs, ...``. At each position it loads the cos/sin row once
(both halves; for M-RoPE each column selected from its section's table) and rotates
every head of q and of k with it, ``BLOCK_H`` heads x ``head_dim / 2`` columns (the two halves) at a time,
``BLOCK_H`` sized to the UB budget. Any strides of q/k (LLaMA's transposed views) and both
layouts are addressed directly, without copies.

With ``x1, x2`` the halves of a head and ``c1, c2, s1, s2`` those of cos and sin:
forward ``o1 = x1 c1 - x2 s1``, ``o2 = x2 c2 + x1 s2``; the backward is the transpose,
``g1 = d1 c1 + d2 s2``, ``g2 = d2 c2 - d1 s1``: the same kernel with the sine terms swapped.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import triton
import triton.language as tl
from liger_core.backend import implements
from liger_core.drivers import rotary as rotary_driver

from liger_ops_ascend import hardware
from liger_ops_ascend._jit import flat_indices
from liger_ops_ascend._tiling import dma, elem_bytes, mask, once, work
from liger_ops_ascend.launch import AscendLaunchError, KernelPlan, Tile, launch


@triton.jit
def _rotate_heads(
    X,
    XO,
    in_base,
    out_base,
    sh,
    osh,
    n_heads,
    c1,
    c2,
    sa,
    sb,
    cols,
    col_mask,
    BLOCK_H: tl.constexpr,
    half,
    INTERLEAVED: tl.constexpr,
):
    """o1 = x1 * c1 + x2 * sa, o2 = x2 * c2 + x1 * sb for every head at one position.

    The head blocks are walked with 64-bit pointers advanced by ``BLOCK_H`` heads; inside a block
    the head offsets ``h_idx * stride`` stay below ``BLOCK_H * stride``, which the plan keeps
    in int32 (a head index times the stride would not be bounded)."""
    # Pair j of a head: (x[j], x[j + half]) rotate-half, (x[2j], x[2j + 1]) interleaved (Llama 4).
    if INTERLEAVED:
        # Stride-2 halves, not CUDA/XPU's partner load (cols ^ 1): the adapter scalarises that gather.
        x_col = cols * 2
        pair = 1
    else:
        x_col = cols
        pair = half
    h_idx = tl.arange(0, BLOCK_H)
    x_blk = X + in_base
    o_blk = XO + out_base
    for h0 in range(0, n_heads, BLOCK_H):
        mask = (h0 + h_idx < n_heads)[:, None] & col_mask[None, :]
        x_ptr = x_blk + h_idx[:, None] * sh + x_col[None, :]
        # Elementwise: padded lanes only reach masked-off stores, so no load fills them.
        x1 = tl.load(x_ptr, mask=mask, care_padding=False).to(tl.float32)
        x2 = tl.load(x_ptr + pair, mask=mask, care_padding=False).to(tl.float32)
        o1 = x1 * c1[None, :] + x2 * sa[None, :]
        o2 = x2 * c2[None, :] + x1 * sb[None, :]
        o_ptr = o_blk + h_idx[:, None] * osh + x_col[None, :]
        tl.store(o_ptr, o1.to(XO.dtype.element_ty), mask=mask)
        tl.store(o_ptr + pair, o2.to(XO.dtype.element_ty), mask=mask)
        x_blk += BLOCK_H * sh
        o_blk += BLOCK_H * osh


@triton.jit
def _table_half(base, st, cols, col_mask, in_t, in_h, MROPE: tl.constexpr):
    """One half row of cos or sin in fp32. M-RoPE: each column from its section's table
    (temporal, height, width): the three tables' rows loaded whole and selected per column by
    fp32 compares made once per program. The offsets stay affine in ``cols`` (an offset computed
    from a compare makes the compiler scalarise the load) and the masks are plain upper bounds
    (masks with lower bounds crash triton-ascend 3.2.0's DiscreteMaskAccessConversion pass here,
    tests/test_compiled_access.py); the extra reads are two half rows of a small table."""
    if MROPE:
        t = tl.load(base + cols, mask=col_mask, care_padding=False)
        h = tl.load(base + st + cols, mask=col_mask, care_padding=False)
        w = tl.load(base + st + st + cols, mask=col_mask, care_padding=False)
        return tl.where(in_t, t, tl.where(in_h, h, w)).to(tl.float32)
    else:
        return tl.load(base + cols, mask=col_mask, care_padding=False).to(tl.float32)


@triton.jit
def _rotary_kernel(
    Q,
    K,
    QO,
    KO,
    COS,
    SIN,
    q_sb,
    q_ss,
    q_sh,
    k_sb,
    k_ss,
    k_sh,
    qo_sb,
    qo_ss,
    qo_sh,
    ko_sb,
    ko_ss,
    ko_sh,
    c_st,
    c_sb,
    c_ss,
    s_st,
    s_sb,
    s_ss,
    seq,
    n_pos,
    n_qh,
    n_kh,
    half,
    sec0,
    sec1,
    MROPE: tl.constexpr,
    INTERLEAVED: tl.constexpr,
    BACKWARD: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    pid, num_programs, cols = flat_indices(BLOCK_D)
    col_mask = cols < half
    # M-RoPE's section of each column, compared in fp32 once (unused without M-RoPE).
    cols_f = cols.to(tl.float32)
    in_t = cols_f < sec0
    in_h = cols_f < sec0 + sec1
    for pos_i in range(pid, n_pos, num_programs):
        pos = (pid * 0 + pos_i).to(tl.int64)
        b = pos // seq
        s = pos % seq
        c_base = COS + b * c_sb + s * c_ss
        s_base = SIN + b * s_sb + s * s_ss
        c1 = _table_half(c_base, c_st, cols, col_mask, in_t, in_h, MROPE)
        s1 = _table_half(s_base, s_st, cols, col_mask, in_t, in_h, MROPE)
        if INTERLEAVED:
            # Llama 4: cos/sin are the real and imaginary parts of freqs_cis, one value per pair.
            c2 = c1
            s2 = s1
        else:
            c2 = _table_half(c_base + half, c_st, cols, col_mask, in_t, in_h, MROPE)
            s2 = _table_half(s_base + half, s_st, cols, col_mask, in_t, in_h, MROPE)
        if BACKWARD:
            sa = s2
            sb = -s1
        else:
            sa = -s1
            sb = s2
        _rotate_heads(
            Q, QO, b * q_sb + s * q_ss, b * qo_sb + s * qo_ss, q_sh, qo_sh, n_qh, c1, c2, sa, sb, cols, col_mask,
            BLOCK_H, half, INTERLEAVED,
        )  # fmt: skip
        _rotate_heads(
            K, KO, b * k_sb + s * k_ss, b * ko_sb + s * ko_ss, k_sh, ko_sh, n_kh, c1, c2, sa, sb, cols, col_mask,
            BLOCK_H, half, INTERLEAVED,
        )  # fmt: skip


def rotary_tiles(
    block_h: int, block_d: int, xb: int, cb: int, mrope: bool = False, interleaved: bool = False
) -> tuple[Tile, ...]:
    """In the terms of the UB model (ub_model.md): one head block of q or k (the larger dtype),
    its two halves in and out, and the cos/sin half rows of the position (three tables each with
    M-RoPE; one half row each when interleaved). Interleaved halves are stride-2 accesses,
    counted at the width of the span they cover (2 x block_d) so the plan holds even where the
    access is staged whole."""
    span = 2 * block_d if interleaved else block_d
    tiles = [t for name in ("x1", "x2", "o1", "o2") for t in dma(name, block_h, span, xb)]
    # Peak: both halves in fp32 and two products.
    tiles += work("f32_", block_h, block_d, 4)
    for name in ("c1", "s1") if interleaved else ("c1", "c2", "s1", "s2"):
        for table in ("t", "h", "w") if mrope else ("",):
            tiles += dma(f"{name}{table}", 1, block_d, cb)
    tiles += work("table_f32_", 1, block_d, 6)
    tiles += once("in_t", 1, block_d, 1) + once("in_h", 1, block_d, 1) if mrope else []
    return tuple(tiles + mask(block_h, block_d))


@dataclass(frozen=True)
class RotaryPlan:
    block_h: int
    block_d: int
    programs: int
    kernel: KernelPlan


@functools.lru_cache(maxsize=1024)
def _plan_rotary(
    op: str,
    n_pos: int,
    heads: int,
    half: int,
    xb: int,
    cb: int,
    mrope: bool,
    pitches: tuple[int, ...],
    max_stride: int,
    hw: hardware.Hardware,
    max_block_h: int,
    interleaved: bool = False,
) -> RotaryPlan:
    min_d = max(hardware.min_block(xb), hardware.min_block(cb))
    block_d = max(min_d, triton.next_power_of_2(max(half, 1)))

    def need(block_h: int) -> int:
        return sum(t.nbytes for t in rotary_tiles(block_h, block_d, xb, cb, mrope, interleaved))

    if need(1) > hw.ub_budget:
        raise AscendLaunchError(
            f"liger-ops-ascend {op}: head_dim {2 * half} too wide for one tile; {hw.describe_budget()}"
        )
    block_h = 1
    cap = min(max_block_h, triton.next_power_of_2(max(heads, 1)))
    # Several heads per tile only over 32-byte aligned head strides, with int32 in-tile offsets.
    aligned = not any(p % hardware.ALIGN_BYTES for p in pitches)
    while (
        aligned
        and block_h * 2 <= cap
        and 2 * block_h * max_stride + 2 * block_d <= hardware.INT32_MAX
        and need(block_h * 2) <= hw.ub_budget
    ):
        block_h *= 2
    programs = min(hw.vector_cores, max(n_pos, 1))
    extent = block_h * max_stride + 2 * block_d
    tiles = rotary_tiles(block_h, block_d, xb, cb, mrope, interleaved)
    return RotaryPlan(block_h, block_d, programs, KernelPlan(op, (programs,), tiles, block_h, pitches, extent))


def plan_rotary(
    op: str,
    n_pos: int,
    heads: int,
    head_dim: int,
    x_dtypes: Sequence[torch.dtype],
    cos_dtype: torch.dtype,
    hw: hardware.Hardware,
    head_strides: Sequence[int] = (),
    mrope: bool = False,
    interleaved: bool = False,
) -> RotaryPlan:
    """Tile plan for ``n_pos`` positions of up to ``heads`` heads of ``head_dim``; ``head_strides``:
    the head strides (elements) of q, k and their outputs (default: contiguous heads);
    ``interleaved``: Llama 4's pairs (x[2j], x[2j + 1])."""
    xb = max(elem_bytes(d) for d in x_dtypes)
    strides = tuple(head_strides) or (head_dim,)
    pitches = tuple(sorted({st * elem_bytes(d) for st in strides for d in x_dtypes}))
    return _plan_rotary(
        op, n_pos, heads, head_dim // 2, xb, elem_bytes(cos_dtype), mrope, pitches, max(strides), hw,
        hardware.MAX_BLOCK_M, interleaved,
    )  # fmt: skip


# -- host side -------------------------------------------------------------------------------


def _head_strides(t: torch.Tensor, unsqueeze_dim: int) -> tuple[torch.Tensor, int, int, int, int]:
    """``(t, stride_batch, stride_seq, stride_head, heads)``; t copied if head_dim is strided."""
    if t.stride(3) != 1:
        t = t.contiguous()
    h_ax, s_ax = (1, 2) if unsqueeze_dim == 1 else (2, 1)
    return t, t.stride(0), t.stride(s_ax), t.stride(h_ax), t.shape[h_ax]


def rotary(
    q: torch.Tensor,
    k: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    unsqueeze_dim: int,
    mrope_section: Sequence[int] | None,
    backward: bool,
    hw: hardware.Hardware,
    interleaved: bool = False,
    q_out: torch.Tensor | None = None,
    k_out: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotate q and k (forward) or their gradients (backward) into ``q_out``/``k_out`` (any row
    strides, unit-stride head_dim; default: new tensors laid out like q and k); cos/sin 3-D, or
    4-D for M-RoPE. ``interleaved``: pairs (x[2j], x[2j + 1]) and one cos/sin value per pair
    (Llama 4's complex form, cos/sin ``(batch or 1, seq, head_dim / 2)``)."""
    q, q_sb, q_ss, q_sh, n_qh = _head_strides(q, unsqueeze_dim)
    k, k_sb, k_ss, k_sh, n_kh = _head_strides(k, unsqueeze_dim)
    qo = torch.empty_like(q) if q_out is None else q_out
    ko = torch.empty_like(k) if k_out is None else k_out
    for name, out in (("q_out", qo), ("k_out", ko)):
        if out.stride(3) != 1:
            raise ValueError(f"rotary: {name} must have a unit-stride head_dim; got strides {out.stride()}")
    _, qo_sb, qo_ss, qo_sh, _ = _head_strides(qo, unsqueeze_dim)
    _, ko_sb, ko_ss, ko_sh, _ = _head_strides(ko, unsqueeze_dim)
    batch, seq, dim = q.shape[0], q.shape[3 - unsqueeze_dim], q.shape[3]
    n_pos = batch * seq
    if n_pos == 0 or dim == 0 or (q.numel() == 0 and k.numel() == 0):
        return qo, ko
    if cos.stride(-1) != 1:
        cos = cos.contiguous()
    if sin.stride(-1) != 1:
        sin = sin.contiguous()
    mrope = mrope_section is not None
    # Tables shared by the batch (leading size 1) are read with batch stride 0.
    c_st, s_st = (cos.stride(0), sin.stride(0)) if mrope else (0, 0)
    c_sb = cos.stride(-3) if cos.shape[-3] > 1 else 0
    s_sb = sin.stride(-3) if sin.shape[-3] > 1 else 0
    sections = tuple(mrope_section) if mrope else (0, 0, 0)
    op = ("qwen2vl_mrope" if mrope else "llama4_rope" if interleaved else "rope") + (
        "_backward" if backward else "_forward"
    )
    heads = max(n_qh, n_kh)
    p = plan_rotary(
        op, n_pos, heads, dim, (q.dtype, k.dtype), cos.dtype, hw, (q_sh, k_sh, qo_sh, ko_sh), mrope, interleaved
    )
    launch(
        _rotary_kernel,
        p.kernel,
        hw,
        q,
        k,
        qo,
        ko,
        cos,
        sin,
        q_sb,
        q_ss,
        q_sh,
        k_sb,
        k_ss,
        k_sh,
        qo_sb,
        qo_ss,
        qo_sh,
        ko_sb,
        ko_ss,
        ko_sh,
        c_st,
        c_sb,
        cos.stride(-2),
        s_st,
        s_sb,
        sin.stride(-2),
        seq,
        n_pos,
        n_qh,
        n_kh,
        dim // 2,
        sections[0],
        sections[1],
        MROPE=mrope,
        INTERLEAVED=interleaved,
        BACKWARD=backward,
        BLOCK_H=p.block_h,
        BLOCK_D=p.block_d,
    )
    return qo, ko


class RotaryKernels:
    """`liger_core.drivers.rotary.RotaryKernels` on this module's kernel (the tile plan from the
    hardware facts of q's device, `hardware.current`)."""

    protocol = rotary_driver.PROTOCOL

    @staticmethod
    def rotate(q, k, cos, sin, q_out, k_out, unsqueeze_dim, mrope_section, interleaved, backward) -> None:
        hw = hardware.current(q.device)
        rotary(q, k, cos, sin, unsqueeze_dim, mrope_section, backward, hw, interleaved, q_out, k_out)


FUNCTIONS = rotary_driver.autograd_functions(RotaryKernels(), __name__)
LigerRotaryFunction = FUNCTIONS["rotary"]
LigerRopeFunction = implements("rope")(FUNCTIONS["rope"])
LigerQwen2VLMRopeFunction = implements("qwen2vl_mrope")(FUNCTIONS["qwen2vl_mrope"])
LigerLlama4RopeFunction = implements("llama4_rope")(FUNCTIONS["llama4_rope"])
