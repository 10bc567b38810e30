"""Rotary position embeddings for Intel GPUs: rope (rotate-half, transformers' LLaMA form),
qwen2vl_mrope (Qwen2-VL's multimodal RoPE) and llama4_rope (Llama 4's complex form: interleaved
pairs times ``freqs_cis``): one Triton kernel for all three, its launch and the kernel adapter
of `liger_core.drivers.rotary`.

One program per (batch, position) rotates every q head and every k head of that position:
its cos/sin row is loaded once and reused across heads (GQA included), and each head is
read as two halves so rotate_half is a swap of registers, not a gather. Tiles of
[HEADS_BLOCK heads x HALF_BLOCK columns] are walked in N_Q_CHUNKS / N_K_CHUNKS head chunks.
Interleaved (Llama 4) tiles span the whole head (2 HALF_BLOCK columns): each element's pair
partner (column d ^ 1) is a second load of the same cache lines, not two stride-2 loads.

Forward, with halves (x1, x2), (c1, c2), (s1, s2):  o1 = x1 c1 - x2 s1,  o2 = x2 c2 + x1 s2.
Backward (the transpose):                         g1 = d1 c1 + d2 s2,  g2 = d2 c2 - d1 s1.

Multimodal RoPE (MROPE): cos/sin hold three tables; column j of each half reads table 0, 1 or
2 by which of the sections (s0, s1, s2) it falls in, merged on the fly in the kernel (no merged
table is materialised).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl
from liger_core.backend import implements
from liger_core.drivers import rotary as rotary_driver

from liger_ops_xpu import hardware
from liger_ops_xpu._tiling import num_warps_for, unit_col


@triton.jit
def _pair_half(w, shift: tl.constexpr, dtype: tl.constexpr, PAIR_BITS: tl.constexpr):
    """fp32 value of the element in bits [shift, shift + PAIR_BITS / 2) of pair words ``w``."""
    # (if/else, not an early return: the compiler would also build the code after it.)
    if PAIR_BITS == 32:
        value = ((w >> shift) & 0xFFFF).to(tl.uint16).to(dtype, bitcast=True).to(tl.float32)
    else:
        value = ((w >> shift) & 0xFFFFFFFF).to(tl.uint32).to(tl.float32, bitcast=True)
    return value


@triton.jit
def _pair_word(low, high, dtype: tl.constexpr, PAIR_BITS: tl.constexpr):
    """Pair words holding fp32 ``low`` and ``high`` rounded to ``dtype`` (low at the lower address)."""
    if PAIR_BITS == 32:
        lo = low.to(dtype).to(tl.uint16, bitcast=True).to(tl.int32)
        hi = high.to(dtype).to(tl.uint16, bitcast=True).to(tl.int32)
        word = lo | (hi << 16)
    else:
        lo = low.to(tl.uint32, bitcast=True).to(tl.int64)
        hi = high.to(tl.uint32, bitcast=True).to(tl.int64)
        word = lo | (hi << 32)
    return word


@triton.jit
def _rotate_heads(
    X,
    XO,
    b,
    s,
    sb,
    sh,
    ss,
    osb,
    osh,
    oss,
    n_heads,
    half,
    c1,
    c2,
    s1,
    s2,
    cols,
    col_mask,
    HEADS_BLOCK: tl.constexpr,
    N_CHUNKS: tl.constexpr,
    INTERLEAVED: tl.constexpr,
    PAIR_BITS: tl.constexpr,
):
    # Pair j of a head: (x[j], x[j + half]) rotate-half, (x[2j], x[2j + 1]) interleaved (Llama 4).
    x_base = X + b.to(tl.int64) * sb + s.to(tl.int64) * ss
    o_base = XO + b.to(tl.int64) * osb + s.to(tl.int64) * oss
    for chunk in range(N_CHUNKS):
        heads = chunk * HEADS_BLOCK + tl.arange(0, HEADS_BLOCK)
        mask = (heads < n_heads)[:, None] & col_mask[None, :]
        x_ptrs = x_base + heads.to(tl.int64)[:, None] * sh + cols[None, :]
        o_ptrs = o_base + heads.to(tl.int64)[:, None] * osh + cols[None, :]
        if PAIR_BITS > 0:
            # Interleaved pairs read and written as one word each (`pair_bits`): cols are the
            # pairs, the offsets (even, checked on the host) halve into words, every access is
            # contiguous.
            word = tl.int32 if PAIR_BITS == 32 else tl.int64
            x_off = (b.to(tl.int64) * sb + s.to(tl.int64) * ss + heads.to(tl.int64)[:, None] * sh) // 2
            w = tl.load(X.to(tl.pointer_type(word)) + x_off + cols[None, :], mask=mask, other=0)
            x_even = _pair_half(w, 0, X.dtype.element_ty, PAIR_BITS)
            x_odd = _pair_half(w, PAIR_BITS // 2, X.dtype.element_ty, PAIR_BITS)
            # out[2j] = x[2j] c - x[2j+1] s, out[2j+1] = x[2j+1] c + x[2j] s (s negated backward).
            o_even = x_even * c1[None, :] - x_odd * s1[None, :]
            o_odd = x_odd * c1[None, :] + x_even * s1[None, :]
            o_off = (b.to(tl.int64) * osb + s.to(tl.int64) * oss + heads.to(tl.int64)[:, None] * osh) // 2
            o_word = _pair_word(o_even, o_odd, XO.dtype.element_ty, PAIR_BITS)
            tl.store(XO.to(tl.pointer_type(word)) + o_off + cols[None, :], o_word, mask=mask)
        elif INTERLEAVED:
            # cols spans the whole head; each element's partner (2j <-> 2j + 1) is a second load of
            # the same cache lines, so memory traffic stays one read and one write per element.
            x = tl.load(x_ptrs, mask=mask, other=0.0).to(tl.float32)
            partner = tl.load(x_ptrs + ((cols ^ 1) - cols)[None, :], mask=mask, other=0.0).to(tl.float32)
            tl.store(o_ptrs, (x * c1[None, :] + partner * s1[None, :]).to(XO.dtype.element_ty), mask=mask)
        else:
            x1 = tl.load(x_ptrs, mask=mask, other=0.0).to(tl.float32)
            x2 = tl.load(x_ptrs + half, mask=mask, other=0.0).to(tl.float32)
            # [x1, x2] * [c1, c2] + [-x2, x1] * [s1, s2]
            o1 = x1 * c1[None, :] - x2 * s1[None, :]
            o2 = x2 * c2[None, :] + x1 * s2[None, :]
            tl.store(o_ptrs, o1.to(XO.dtype.element_ty), mask=mask)
            tl.store(o_ptrs + half, o2.to(XO.dtype.element_ty), mask=mask)


@triton.jit
def _load_table_half(T, base, c_saxis, cols, offset, col_mask, sec0, sec1, MROPE: tl.constexpr):
    """One half of a cos/sin row (columns ``offset + cols``); MROPE picks each column's table."""
    if MROPE:
        table = (cols >= sec0).to(tl.int64) + (cols >= sec0 + sec1).to(tl.int64)
        ptrs = T + base + table * c_saxis + offset + cols
    else:
        ptrs = T + base + offset + cols
    return tl.load(ptrs, mask=col_mask, other=0.0).to(tl.float32)


@triton.jit
def _rotary_kernel(
    Q,
    K,
    QO,
    KO,
    COS,
    SIN,
    q_sb,
    q_sh,
    q_ss,
    k_sb,
    k_sh,
    k_ss,
    qo_sb,
    qo_sh,
    qo_ss,
    ko_sb,
    ko_sh,
    ko_ss,
    c_saxis,
    c_sb,
    c_ss,
    seq,
    n_qh,
    n_kh,
    half,
    sec0,
    sec1,
    MROPE: tl.constexpr,
    INTERLEAVED: tl.constexpr,
    PAIR_BITS: tl.constexpr,
    BACKWARD: tl.constexpr,
    HEADS_BLOCK: tl.constexpr,
    HALF_BLOCK: tl.constexpr,
    N_Q_CHUNKS: tl.constexpr,
    N_K_CHUNKS: tl.constexpr,
):
    pid = tl.program_id(0)
    b = pid // seq
    s = pid % seq
    if PAIR_BITS > 0:
        # One word per pair: cols are the pairs, each with its own cos/sin.
        cols = tl.arange(0, HALF_BLOCK)
        col_mask = cols < half
        table_cols = cols
    elif INTERLEAVED:
        # Every element of the head; element d takes pair d // 2's cos/sin.
        cols = tl.arange(0, 2 * HALF_BLOCK)
        col_mask = cols < 2 * half
        table_cols = cols // 2
    else:
        cols = tl.arange(0, HALF_BLOCK)
        col_mask = cols < half
        table_cols = cols
    # cos/sin of this position, both halves (c_sb is 0 when one table serves every batch row).
    base = b.to(tl.int64) * c_sb + s.to(tl.int64) * c_ss
    c1 = _load_table_half(COS, base, c_saxis, table_cols, 0, col_mask, sec0, sec1, MROPE)
    s1 = _load_table_half(SIN, base, c_saxis, table_cols, 0, col_mask, sec0, sec1, MROPE)
    if PAIR_BITS > 0:
        # (The sign of sin goes with each pair's element in `_rotate_heads`.)
        c2 = c1
        s2 = s1
    elif INTERLEAVED:
        # Llama 4: cos/sin are the real and imaginary parts of freqs_cis, one value per pair;
        # out[2j] = x[2j] c - x[2j+1] s, out[2j+1] = x[2j+1] c + x[2j] s: the sign goes with d's parity.
        s1 = tl.where(cols % 2 == 0, -s1, s1)
        c2 = c1
        s2 = s1
    else:
        c2 = _load_table_half(COS, base, c_saxis, table_cols, half, col_mask, sec0, sec1, MROPE)
        s2 = _load_table_half(SIN, base, c_saxis, table_cols, half, col_mask, sec0, sec1, MROPE)
    if BACKWARD:
        # The rotation's transpose: [g1, g2] -> [g1 c1 + g2 s2, g2 c2 - g1 s1].
        s1, s2 = -s2, -s1
    _rotate_heads(
        Q, QO, b, s, q_sb, q_sh, q_ss, qo_sb, qo_sh, qo_ss, n_qh, half, c1, c2, s1, s2,
        cols, col_mask, HEADS_BLOCK, N_Q_CHUNKS, INTERLEAVED, PAIR_BITS,
    )  # fmt: skip
    _rotate_heads(
        K, KO, b, s, k_sb, k_sh, k_ss, ko_sb, ko_sh, ko_ss, n_kh, half, c1, c2, s1, s2,
        cols, col_mask, HEADS_BLOCK, N_K_CHUNKS, INTERLEAVED, PAIR_BITS,
    )  # fmt: skip


def _bhs_strides(t: torch.Tensor, unsqueeze_dim: int) -> tuple[int, int, int]:
    """(batch, head, seq) strides of a 4-D q/k in either layout."""
    if unsqueeze_dim == 1:  # (b, heads, seq, d)
        return t.stride(0), t.stride(1), t.stride(2)
    return t.stride(0), t.stride(2), t.stride(1)  # (b, seq, heads, d)


@dataclass(frozen=True)
class RotaryPlan:
    """[HEADS_BLOCK heads x HALF_BLOCK columns] tiles, N_Q_CHUNKS / N_K_CHUNKS of them per position."""

    heads_block: int
    half_block: int
    n_q_chunks: int
    n_k_chunks: int
    num_warps: int


def plan_rotary(n_qh: int, n_kh: int, head_dim: int) -> RotaryPlan:
    """Head tiles of about ``ROPE_TILE_ELEMENTS`` elements per half."""
    half_block = triton.next_power_of_2(head_dim // 2)
    heads_block = min(triton.next_power_of_2(max(n_qh, n_kh)), max(1, hardware.ROPE_TILE_ELEMENTS // half_block))
    return RotaryPlan(
        heads_block,
        half_block,
        triton.cdiv(n_qh, heads_block),
        triton.cdiv(n_kh, heads_block),
        num_warps_for(2 * heads_block * half_block),
    )


def pair_bits(*tensors: torch.Tensor) -> int:
    """The word size (bits) in which the interleaved kernel reads and writes one pair of each of
    ``tensors`` (q, k and their outputs): 32 for 16-bit, 64 for 32-bit elements, when every one
    has unit element stride, even other strides and a pair-aligned start; else 0 (one load per
    element and one per its partner)."""
    sizes = {t.element_size() for t in tensors}
    if len(sizes) != 1 or (size := sizes.pop()) not in (2, 4):
        return 0
    for t in tensors:
        if t.stride(-1) != 1 or any(st % 2 for st in t.stride()[:-1]) or t.data_ptr() % (2 * size):
            return 0
    return 16 * size


def rotary(
    q,
    k,
    cos,
    sin,
    unsqueeze_dim: int,
    mrope_section: tuple[int, int, int] | None,
    backward: bool = False,
    interleaved: bool = False,
    q_out: torch.Tensor | None = None,
    k_out: torch.Tensor | None = None,
):
    """Rotate q and k (or, with ``backward``, apply the transpose to their gradients) into
    ``q_out``/``k_out`` (any row strides, unit-stride head_dim; default: new contiguous tensors);
    ``mrope_section`` None is plain RoPE. ``interleaved``: pairs (x[2j], x[2j + 1]) and one
    cos/sin value per pair (Llama 4's complex form, cos/sin ``(batch or 1, seq, head_dim / 2)``).
    Inputs whose head_dim is strided are copied (the kernel reads columns at unit stride)."""
    q, k = unit_col(q), unit_col(k)
    cos, sin = unit_col(cos), unit_col(sin)
    if cos.stride() != sin.stride():
        cos, sin = cos.contiguous(), sin.contiguous()
    q_out = torch.empty(q.shape, dtype=q.dtype, device=q.device) if q_out is None else q_out
    k_out = torch.empty(k.shape, dtype=k.dtype, device=k.device) if k_out is None else k_out
    for name, out in (("q_out", q_out), ("k_out", k_out)):
        if out.stride(-1) != 1:
            raise ValueError(f"rotary: {name} must have a unit-stride head_dim; got strides {out.stride()}")
    seq_axis = 3 - unsqueeze_dim
    batch, seq, dim = q.shape[0], q.shape[seq_axis], q.shape[3]
    n_qh, n_kh = q.shape[unsqueeze_dim], k.shape[unsqueeze_dim]
    if q.numel() == 0 and k.numel() == 0:
        return q_out, k_out
    plan = plan_rotary(n_qh, n_kh, dim)
    mrope = mrope_section is not None
    c_sb = cos.stride(-3) if cos.shape[-3] == batch and batch > 1 else 0
    words = pair_bits(q, k, q_out, k_out) if interleaved and dim % 2 == 0 else 0
    kernel = _rotary_kernel
    kernel[(batch * seq,)](
        q,
        k,
        q_out,
        k_out,
        cos,
        sin,
        *_bhs_strides(q, unsqueeze_dim),
        *_bhs_strides(k, unsqueeze_dim),
        *_bhs_strides(q_out, unsqueeze_dim),
        *_bhs_strides(k_out, unsqueeze_dim),
        cos.stride(0) if mrope else 0,
        c_sb,
        cos.stride(-2),
        seq,
        n_qh,
        n_kh,
        dim // 2,
        mrope_section[0] if mrope else 0,
        mrope_section[1] if mrope else 0,
        MROPE=mrope,
        INTERLEAVED=interleaved,
        PAIR_BITS=words,
        BACKWARD=backward,
        HEADS_BLOCK=plan.heads_block,
        HALF_BLOCK=plan.half_block,
        N_Q_CHUNKS=plan.n_q_chunks,
        N_K_CHUNKS=plan.n_k_chunks,
        **hardware.launch_kwargs(kernel, q.device, plan.num_warps, register_heavy=False),
    )
    return q_out, k_out


class RotaryKernels:
    """`liger_core.drivers.rotary.RotaryKernels` on this module's kernel."""

    protocol = rotary_driver.PROTOCOL

    @staticmethod
    def rotate(q, k, cos, sin, q_out, k_out, unsqueeze_dim, mrope_section, interleaved, backward) -> None:
        rotary(q, k, cos, sin, unsqueeze_dim, mrope_section, backward, interleaved, q_out, k_out)


FUNCTIONS = rotary_driver.autograd_functions(RotaryKernels(), __name__)
LigerRotaryFunction = FUNCTIONS["rotary"]
LigerRopeFunction = implements("rope")(FUNCTIONS["rope"])
LigerQwen2VLMRopeFunction = implements("qwen2vl_mrope")(FUNCTIONS["qwen2vl_mrope"])
LigerLlama4RopeFunction = implements("llama4_rope")(FUNCTIONS["llama4_rope"])
