"""Rotary embeddings for NVIDIA GPUs: RoPE (rotate-half, transformers' LLaMA form), Qwen2-VL's
multimodal M-RoPE and Llama 4's complex form (interleaved pairs times ``freqs_cis``): one Triton
kernel for all three, its launch and the kernel adapter of `liger_core.drivers.rotary`.

Memory-bound: forward reads q and k and writes their rotations, backward does the same with
the incoming gradients (the rotation's transpose). A program takes BLOCK_P whole positions:
every head of q and of k at those positions, as ``(positions, heads, head_dim / 2)`` tiles of
each half of the head, so cos/sin are read once per position and reused by every q and k
head, and q and k share one launch. Any strides: both transformers layouts and LLaMA's
transposed views are read in place and the outputs written in whatever layout they have (no
copies; the driver allocates them in the inputs' layout).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from liger_core.backend import implements
from liger_core.drivers import rotary as rotary_driver
from liger_ops_cuda import hardware


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
    in_base,
    out_base,
    sh,
    sd,
    osh,
    osd,
    n_heads,
    half,
    c1,
    c2,
    s1,
    s2,
    pos_mask,
    cols,
    col_mask,
    HEADS: tl.constexpr,
    INTERLEAVED: tl.constexpr,
    PAIR_BITS: tl.constexpr,
):
    # Pair j of a head: (x[j], x[j + half]) rotate-half, (x[2j], x[2j + 1]) interleaved (Llama 4).
    heads = tl.arange(0, HEADS)
    mask = pos_mask[:, None, None] & (heads < n_heads)[None, :, None] & col_mask[None, None, :]
    if PAIR_BITS > 0:
        # Interleaved pairs read and written as one word each (`pair_bits`): cols are the pairs,
        # the offsets (even, checked on the host) halve into words, every access is contiguous.
        word = tl.int32 if PAIR_BITS == 32 else tl.int64
        x_off = (in_base[:, None, None] + heads[None, :, None] * sh) // 2 + cols[None, None, :]
        w = tl.load(X.to(tl.pointer_type(word)) + x_off, mask=mask, other=0)
        x_even = _pair_half(w, 0, X.dtype.element_ty, PAIR_BITS)
        x_odd = _pair_half(w, PAIR_BITS // 2, X.dtype.element_ty, PAIR_BITS)
        # out[2j] = x[2j] c - x[2j+1] s, out[2j+1] = x[2j+1] c + x[2j] s (s negated backward).
        o_even = x_even * c1[:, None, :] - x_odd * s1[:, None, :]
        o_odd = x_odd * c1[:, None, :] + x_even * s1[:, None, :]
        o_word = _pair_word(o_even, o_odd, XO.dtype.element_ty, PAIR_BITS)
        o_off = (out_base[:, None, None] + heads[None, :, None] * osh) // 2 + cols[None, None, :]
        tl.store(XO.to(tl.pointer_type(word)) + o_off, o_word, mask=mask)
    elif INTERLEAVED:
        # cols spans the whole head; each element's partner (2j <-> 2j + 1) is a second load of
        # the same cache lines, so DRAM traffic stays one read and one write per element.
        x_off = in_base[:, None, None] + heads[None, :, None] * sh + cols[None, None, :] * sd
        x = tl.load(X + x_off, mask=mask, other=0.0).to(tl.float32)
        partner = tl.load(X + x_off + ((cols ^ 1) - cols)[None, None, :] * sd, mask=mask, other=0.0).to(tl.float32)
        o_off = out_base[:, None, None] + heads[None, :, None] * osh + cols[None, None, :] * osd
        tl.store(XO + o_off, (x * c1[:, None, :] + partner * s1[:, None, :]).to(XO.dtype.element_ty), mask=mask)
    else:
        x_col, x_pair, o_col, o_pair = sd, half * sd, osd, half * osd
        x_off = in_base[:, None, None] + heads[None, :, None] * sh + cols[None, None, :] * x_col
        x1 = tl.load(X + x_off, mask=mask, other=0.0).to(tl.float32)
        x2 = tl.load(X + x_off + x_pair, mask=mask, other=0.0).to(tl.float32)
        # [x1, x2] * [c1, c2] + [-x2, x1] * [s1, s2]
        o1 = x1 * c1[:, None, :] - x2 * s1[:, None, :]
        o2 = x2 * c2[:, None, :] + x1 * s2[:, None, :]
        o_off = out_base[:, None, None] + heads[None, :, None] * osh + cols[None, None, :] * o_col
        tl.store(XO + o_off, o1.to(XO.dtype.element_ty), mask=mask)
        tl.store(XO + o_off + o_pair, o2.to(XO.dtype.element_ty), mask=mask)


@triton.jit
def _rotary_kernel(
    Q,
    K,
    QO,
    KO,
    COS,
    SIN,
    n_pos,
    seq,
    q_sb,
    q_ss,
    q_sh,
    q_sd,
    k_sb,
    k_ss,
    k_sh,
    k_sd,
    qo_sb,
    qo_ss,
    qo_sh,
    qo_sd,
    ko_sb,
    ko_ss,
    ko_sh,
    ko_sd,
    c_sb,
    c_ss,
    c_sd,
    c_saxis,
    n_qh,
    n_kh,
    half,
    sec0,
    sec01,
    MROPE: tl.constexpr,
    INTERLEAVED: tl.constexpr,
    PAIR_BITS: tl.constexpr,
    BACKWARD: tl.constexpr,
    BLOCK_P: tl.constexpr,
    QH: tl.constexpr,
    KH: tl.constexpr,
    HALF: tl.constexpr,
):
    pos = tl.program_id(0) * BLOCK_P + tl.arange(0, BLOCK_P)
    pos_mask = pos < n_pos
    b = (pos // seq).to(tl.int64)
    s = (pos % seq).to(tl.int64)
    if PAIR_BITS > 0:
        # One word per pair: cols are the pairs, each with its own cos/sin.
        cols = tl.arange(0, HALF)
        col_mask = cols < half
        table_cols = cols
    elif INTERLEAVED:
        # Every element of the head; element d takes pair d // 2's cos/sin.
        cols = tl.arange(0, 2 * HALF)
        col_mask = cols < 2 * half
        table_cols = cols // 2
    else:
        cols = tl.arange(0, HALF)
        col_mask = cols < half
        table_cols = cols
    m2 = pos_mask[:, None] & col_mask[None, :]

    # cos/sin of these positions, both halves (c_sb is 0 when one table serves every batch).
    c_off = (b * c_sb + s * c_ss)[:, None] + (table_cols * c_sd)[None, :]
    if MROPE:
        # Column j of each half takes table 0, 1 or 2 (temporal, height, width) by section.
        section = (cols >= sec0).to(tl.int64) + (cols >= sec01).to(tl.int64)
        c_off += (section * c_saxis)[None, :]
    c1 = tl.load(COS + c_off, mask=m2, other=0.0).to(tl.float32)
    s1 = tl.load(SIN + c_off, mask=m2, other=0.0).to(tl.float32)
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
        c2 = tl.load(COS + c_off + half * c_sd, mask=m2, other=0.0).to(tl.float32)
        s2 = tl.load(SIN + c_off + half * c_sd, mask=m2, other=0.0).to(tl.float32)
    if BACKWARD:
        # The rotation's transpose: [g1, g2] -> [g1 c1 + g2 s2, g2 c2 - g1 s1].
        s1, s2 = -s2, -s1

    _rotate_heads(
        Q, QO, b * q_sb + s * q_ss, b * qo_sb + s * qo_ss, q_sh, q_sd, qo_sh, qo_sd,
        n_qh, half, c1, c2, s1, s2, pos_mask, cols, col_mask, QH, INTERLEAVED, PAIR_BITS,
    )  # fmt: skip
    _rotate_heads(
        K, KO, b * k_sb + s * k_ss, b * ko_sb + s * ko_ss, k_sh, k_sd, ko_sh, ko_sd,
        n_kh, half, c1, c2, s1, s2, pos_mask, cols, col_mask, KH, INTERLEAVED, PAIR_BITS,
    )  # fmt: skip


@dataclass(frozen=True)
class RotaryPlan:
    block_p: int
    q_heads: int
    k_heads: int
    half: int
    num_warps: int


def _prev_power_of_2(n: int) -> int:
    return 1 << (max(n, 1).bit_length() - 1)


@functools.lru_cache(maxsize=256)
def _plan(n_qh, n_kh, half, n_pos, tile_elements, per_warp) -> RotaryPlan:
    # At least one lane of heads: k may have none (q rotated alone); its loads are then all masked.
    qh, kh = max(1, triton.next_power_of_2(n_qh)), max(1, triton.next_power_of_2(n_kh))
    hp = triton.next_power_of_2(half)
    per_position = (qh + kh) * hp * 2
    block_p = max(1, min(_prev_power_of_2(tile_elements // per_position), triton.next_power_of_2(max(n_pos, 1))))
    warps = min(16, max(1, _prev_power_of_2(block_p * per_position // per_warp)))
    return RotaryPlan(block_p, qh, kh, hp, warps)


def plan_rotary(n_qh: int, n_kh: int, head_dim: int, n_pos: int) -> RotaryPlan:
    """Positions per program and warps for q/k of these head counts (hardware.ROPE_* sizes)."""
    return _plan(n_qh, n_kh, head_dim // 2, n_pos, hardware.ROPE_TILE_ELEMENTS, hardware.ROPE_ELEMENTS_PER_WARP)


def _bshd_strides(t: torch.Tensor, unsqueeze_dim: int) -> tuple[int, int, int, int]:
    """(batch, seq, head, dim) strides of a q/k tensor in either transformers layout."""
    sb, s1, s2, sd = t.stride()
    return (sb, s2, s1, sd) if unsqueeze_dim == 1 else (sb, s1, s2, sd)


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
    q: torch.Tensor,
    k: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    unsqueeze_dim: int,
    mrope_section: tuple[int, ...] | None = None,
    backward: bool = False,
    q_out: torch.Tensor | None = None,
    k_out: torch.Tensor | None = None,
    plan: RotaryPlan | None = None,
    interleaved: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotate ``q`` and ``k`` (or, with ``backward``, apply the transpose to their gradients)
    into new tensors laid out like ``q_out``/``k_out`` (default: like the inputs).
    ``interleaved``: pairs (x[2j], x[2j + 1]) and one cos/sin value per pair (Llama 4's
    complex form, cos/sin ``(batch or 1, seq, head_dim / 2)``)."""
    q_out = torch.empty_like(q) if q_out is None else q_out
    k_out = torch.empty_like(k) if k_out is None else k_out
    batch, dim = q.shape[0], q.shape[3]
    seq = q.shape[3 - unsqueeze_dim]
    n_qh, n_kh = q.shape[unsqueeze_dim], k.shape[unsqueeze_dim]
    n_pos = batch * seq
    if n_pos == 0 or dim == 0:
        return q_out, k_out
    if cos.stride() != sin.stride():
        cos, sin = cos.contiguous(), sin.contiguous()
    c_sb, c_ss, c_sd = cos.stride()[-3:]
    if cos.shape[-3] == 1:
        c_sb = 0  # one table for every batch row
    c_saxis = cos.stride(0) if mrope_section is not None else 0
    sec0, sec01 = (mrope_section[0], mrope_section[0] + mrope_section[1]) if mrope_section is not None else (0, 0)
    plan = plan or plan_rotary(n_qh, n_kh, dim, n_pos)
    words = pair_bits(q, k, q_out, k_out) if interleaved and dim % 2 == 0 else 0
    _rotary_kernel[(triton.cdiv(n_pos, plan.block_p),)](
        q, k, q_out, k_out, cos, sin, n_pos, seq,
        *_bshd_strides(q, unsqueeze_dim), *_bshd_strides(k, unsqueeze_dim),
        *_bshd_strides(q_out, unsqueeze_dim), *_bshd_strides(k_out, unsqueeze_dim),
        c_sb, c_ss, c_sd, c_saxis, n_qh, n_kh, dim // 2, sec0, sec01,
        MROPE=mrope_section is not None, INTERLEAVED=interleaved, PAIR_BITS=words, BACKWARD=backward,
        BLOCK_P=plan.block_p, QH=plan.q_heads, KH=plan.k_heads, HALF=plan.half,
        num_warps=plan.num_warps,
    )  # fmt: skip
    return q_out, k_out


class RotaryKernels:
    """`liger_core.drivers.rotary.RotaryKernels` on this module's kernel (every stride read in place)."""

    protocol = rotary_driver.PROTOCOL

    @staticmethod
    def rotate(q, k, cos, sin, q_out, k_out, unsqueeze_dim, mrope_section, interleaved, backward) -> None:
        rotary(q, k, cos, sin, unsqueeze_dim, mrope_section, backward, q_out, k_out, interleaved=interleaved)


FUNCTIONS = rotary_driver.autograd_functions(RotaryKernels(), __name__)
LigerRotaryFunction = FUNCTIONS["rotary"]
LigerRopeFunction = implements("rope")(FUNCTIONS["rope"])
LigerQwen2VLMRopeFunction = implements("qwen2vl_mrope")(FUNCTIONS["qwen2vl_mrope"])
LigerLlama4RopeFunction = implements("llama4_rope")(FUNCTIONS["llama4_rope"])
