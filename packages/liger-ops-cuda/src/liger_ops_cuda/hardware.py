"""NVIDIA hardware facts used by the kernels' launch plans (one place, no literals in kernels)."""

from __future__ import annotations

import functools
import os

import torch

# Tuned sizes: where each number comes from (measurements, or why it is an untuned starting
# point) is in benchmarks/tuning/cuda.md; retune there, then change it here.

# Largest row tile kept in registers in one piece (backward holds ~5 fp32 copies of the tile:
# beyond this it spills); wider rows are processed in CHUNK_BLOCK-wide chunks.
MAX_FUSED_BLOCK = 16384
CHUNK_BLOCK = 8192
# The memory-bound norms: elements a program holds per tile, and elements per warp.
FORWARD_TILE_ELEMENTS = 4096
FORWARD_ELEMENTS_PER_WARP = 512
BACKWARD_TILE_ELEMENTS = 16384
BACKWARD_ELEMENTS_PER_WARP = 1024
# Backward programs per SM: each keeps an fp32 grad_weight row; more programs hide latency
# at the cost of a larger partial buffer to reduce.
BACKWARD_PROGRAMS_PER_SM = 1
# Summing per-program partial rows (grad_weight): columns per program, partial rows loaded at once.
REDUCE_BLOCK = 64
REDUCE_ROWS = 32
# Elementwise gated activations (swiglu, geglu): elements per program and warps.
GLU_BLOCK = 2048
GLU_NUM_WARPS = 8
# Rotary embeddings: elements of q plus k (both halves of each head) a program holds; whole
# positions (every head of q and k) per program, so cos/sin are read once per position.
ROPE_TILE_ELEMENTS = 8192
ROPE_ELEMENTS_PER_WARP = 1024
# Softmax / sparsemax: rows up to this wide are held in registers whole; wider rows are
# streamed in SOFTMAX_CHUNK_BLOCK pieces (online max and sum).
SOFTMAX_MAX_FUSED_BLOCK = 16384
SOFTMAX_CHUNK_BLOCK = 4096
SOFTMAX_TILE_ELEMENTS = 4096
SOFTMAX_ELEMENTS_PER_WARP = 512
# Sparsemax: bisection steps on the threshold (the interval starts 1 wide; 2^-24 is float32's
# resolution at 1), then exact refinement steps on the support found.
SPARSEMAX_BISECTION_STEPS = 24
SPARSEMAX_REFINE_STEPS = 2
# DyT (elementwise tanh with parameter reductions): elements per forward tile, per backward
# tile, and the widest column block (wider rows are split across column blocks).
DYT_TILE_ELEMENTS = 4096
DYT_BACKWARD_TILE_ELEMENTS = 8192
DYT_MAX_BLOCK_N = 4096
# GroupNorm: a (batch, group) is a (channels-per-group, spatial) array. Elements per tile, and
# the elements of a group above which it is split across several programs (two-phase
# statistics) rather than normalised by one program in two passes (the second from L2);
# groups are split until about GROUP_NORM_SPLIT_PROGRAMS_PER_SM programs per SM run.
GROUP_NORM_TILE_ELEMENTS = 8192
GROUP_NORM_ELEMENTS_PER_WARP = 512
GROUP_NORM_CHUNK_ELEMENTS = 8192
GROUP_NORM_SPLIT_PROGRAMS_PER_SM = 4
# fused_add_rms_norm and layer_norm backward tiles: RMSNorm's as the start (the same shape of
# work with one more input or accumulator), tunable apart from it.
FUSED_ADD_RMS_NORM_BACKWARD_TILE_ELEMENTS = 16384
LAYER_NORM_BACKWARD_TILE_ELEMENTS = 16384
# PolyNorm keeps about nine fp32 copies of its backward tile live (x, dy, three powers and
# their products): smaller tiles than RMSNorm's.
POLY_NORM_FORWARD_TILE_ELEMENTS = 4096
POLY_NORM_FORWARD_ELEMENTS_PER_WARP = 1024
POLY_NORM_BACKWARD_TILE_ELEMENTS = 8192
POLY_NORM_BACKWARD_ELEMENTS_PER_WARP = 1024
# Attention Residuals: positions x columns per tile (rows are walked in BLOCK_N-wide chunks, so
# no row width is too wide); the per-block scores live in registers beside the tile.
ATTN_RES_TILE_ELEMENTS = 4096
ATTN_RES_BLOCK_N = 4096
# Neighborhood attention (flash-style banded kernels): query and key rows per block; heads wider
# than NAT_WIDE_HEAD_DIM take NAT_WIDE_HEAD_BLOCK rows (the fp32 accumulators are rows x
# head_dim); NAT_MIN_BLOCK is tl.dot's smallest tile side. Untuned starting points (flash
# attention's usual 64 x 64 tiles at 4 warps).
NAT_BLOCK = 64
NAT_WIDE_HEAD_DIM = 128
NAT_WIDE_HEAD_BLOCK = 32
NAT_MIN_BLOCK = 16
NAT_NUM_WARPS = 4
NAT_NUM_STAGES = 2
# Multi-token attention's direct convolution over the (query, key) planes: a program's fp32
# accumulator is a block of at most MTA_CONV_MAX_BLOCK_C channels x positions, MTA_CONV_TILE_ELEMENTS
# in all, the positions MTA_CONV_BLOCK_N columns wide; the weight gradient runs
# MTA_CONV_WGRAD_PROGRAMS_PER_SM programs per SM over the tiles (partial sums, no atomics).
MTA_CONV_TILE_ELEMENTS = 8192
MTA_CONV_MAX_BLOCK_C = 16
MTA_CONV_BLOCK_N = 64
MTA_CONV_NUM_WARPS = 4
MTA_CONV_WGRAD_PROGRAMS_PER_SM = 2
# Stand-in SM count where there is no GPU (the Triton interpreter on CPU): small, so that
# tests still run several programs per grid.
INTERPRETER_SM_COUNT = 4


@functools.cache
def sm_count(device_index: int | None = None) -> int:
    """Streaming multiprocessors of the device (env ``LIGER_CUDA_SM_COUNT`` overrides)."""
    override = os.environ.get("LIGER_CUDA_SM_COUNT")
    if override:
        return int(override)
    if not torch.cuda.is_available():
        return INTERPRETER_SM_COUNT
    index = torch.cuda.current_device() if device_index is None else device_index
    return torch.cuda.get_device_properties(index).multi_processor_count


def num_warps_for(block_elements: int, elements_per_warp: int = BACKWARD_ELEMENTS_PER_WARP) -> int:
    """Warps for a tile of this many elements: 4 to 16."""
    return max(4, min(16, block_elements // elements_per_warp))


# Losses (cross_entropy, fused_linear_cross_entropy, kl_div, jsd, tvd, fused_linear_jsd).
# Vocabulary tile per program and its warps: every (row, tile) pair is a program, so every SM
# has loads in flight without a per-row loop.
CE_BLOCK = 4096
CE_NUM_WARPS = 8
# cross_entropy forward with many rows: one program per row streams its vocabulary in
# CE_ROW_BLOCK-wide steps (running max / sum of exp), so the only buffers are the per-row loss
# and lse (no (rows, tiles) partials). A program per row needs rows to balance:
# CE_ROW_PROGRAMS_MIN_ROWS_PER_SM x SMs rows are >= 2 full waves; fewer rows (fused linear
# cross-entropy's chunks) keep the (row, tile) programs, which fill every SM whatever the rows.
CE_ROW_BLOCK = 8192
CE_ROW_NUM_WARPS = 8
CE_ROW_PROGRAMS_MIN_ROWS_PER_SM = 8
# The targets' statistics (mean's scales, bad-target count, sum of class weights): one program
# over the targets in steps of CE_STATS_BLOCK.
CE_STATS_BLOCK = 4096
CE_STATS_NUM_WARPS = 8
# The divergences (kl_div, jsd, tvd): elements per program and warps, as CE_BLOCK.
DIV_BLOCK = 4096
DIV_NUM_WARPS = 8
# fused_ce_tvd's forward over rows of at most CE_TVD_ONE_PASS_MAX_COLS logits loads each row once
# and keeps both in registers (the streaming form reads them twice). H200, 16384 x 4096 bf16:
# 162 us streaming (8192-wide steps, 8 warps), 98 us in one pass with 4 warps, 118 us with 8.
CE_TVD_ONE_PASS_MAX_COLS = 4096
CE_TVD_ONE_PASS_NUM_WARPS = 4
# In-place scaling of a gradient by the incoming gradient (skipped on the device when it is 1).
SCALE_BLOCK = 8192
SCALE_NUM_WARPS = 8
# Fused linear losses: the bytes of chunk buffers a chunk loop may hold at once (the default of
# `liger_core.memory_budget`; a call, a module or LIGER_FLCE_MEMORY_BUDGET overrides it). Chosen by
# issue 38's rule, the largest budget that raises no end-to-end peak: on an H200 (bench_e2e.py,
# LLaMA-3.2-1B, Qwen3-1.7B, Gemma-3-1B, batch 8 x 2048, checkpointing) 512 MiB and 1 GiB gave the
# same peaks (10.66 / 14.16 / 8.85 and 8.84 GiB) and 2 GiB raised Gemma-3's by 0.43 GiB; 1 GiB is
# also the fastest of 128/256/512/1024 MiB at all five frontier shapes (0.3-7% over 512 MiB;
# benchmarks/results/H200/flce-frontier/ and flce-budget/). A step with less headroom sets a
# smaller budget: 128 MiB costs 14-39% more loss time at those shapes (still within liger-kernel's
# memory). fused_linear_cross_entropy holds one (rows, vocab) buffer in the input dtype (the
# gradient overwrites the logits): rows = budget / (vocab x itemsize). Every other fused linear loss
# takes the same budget with its own bytes per logit: JSD and KL 10 (student and teacher fp32
# logits, the gradient in the input dtype), the distillation losses 8, the preference losses and
# GRPO 4 (fp32 logits of whole pairs or sequences per chunk, at least one).
FUSED_LINEAR_MEMORY_BUDGET = 2**30
# Chunk rows are a multiple of this whenever the budget allows: cuBLAS's bf16 sm90 kernels use
# 128x256 and 256x128 output tiles, so 256 rows fill whole tiles of the logits GEMM (M = rows)
# and whole K-steps of the weight-gradient GEMM (K = rows) in every chunk. (The 128 multiple
# before gave 1664-row chunks at a 151936 vocabulary: 6.5 tiles of 256.) Issue 38's first table had
# 1 GiB slower than 512 MiB at 16384 x 4096 x 128256; the frontier runs did not repeat it (77.7 against
# 77.8 and 78.3 against 79.5 ms): run-to-run spread, not a chunk shape.
FUSED_LINEAR_ROW_MULTIPLE = 256
# The vocabulary-major path's grad_W blocks: vocabulary rows a multiple of this.
FLCE_CHUNK_MULTIPLE = 128
# Fused linear cross-entropy when the tokens are no more than the hidden size (and grad_weight
# has the input's dtype): the logits of all tokens, stored vocabulary-major, fit in grad_weight's
# own storage. The CE kernels then walk (vocab, token) tiles, coalesced along tokens:
# FLCE_VT_BLOCK_V x FLCE_VT_BLOCK_T elements per program; the lse pass splits the vocabulary
# into groups so that about FLCE_VT_PROGRAMS_PER_SM programs per SM stream it. grad_weight is
# then written block by block (each block copied out of the storage it is about to overwrite):
# FLCE_VT_GRAD_WEIGHT_BLOCK_ELEMENTS is that copy's size.
FLCE_VT_BLOCK_V = 64
FLCE_VT_BLOCK_T = 64
FLCE_VT_NUM_WARPS = 4
FLCE_VT_PROGRAMS_PER_SM = 16
FLCE_VT_GRAD_WEIGHT_BLOCK_ELEMENTS = 8 * 2**20
# fused_moe's grouped GEMMs, tuned apart: the token-row GEMMs (gate-up, down, grad of the
# input, down backward) take ROWS tiles, whose BLOCK_M is also the routing tile (one expert's
# sorted selections); the weight-gradient GEMM takes WGRAD tiles (BLOCK_M rows of the weight,
# BLOCK_K sorted rows per reduction step). Output columns and reduction step per program (the
# step halved for fp32), warps and software-pipeline stages; the gather-sum's column block.
# Measured on an H100 at Qwen3-30B-A3B's expert layer (full step, 4096 tokens, bf16): row tiles
# 64 x 128 x 64 with 8 warps and 4 stages 4.39 ms (3 stages 4.60, 64 x 256 4.44, 128 x 128 4.69,
# 64 x 64 5.31); the weight-gradient tile moved the step by under 0.1 ms over nine shapes
# (benchmarks/tuning/cuda.md).
MOE_ROWS_BLOCK_M = 64
MOE_ROWS_BLOCK_N = 128
MOE_ROWS_BLOCK_K = 64
MOE_ROWS_NUM_WARPS = 8
MOE_ROWS_NUM_STAGES = 4
MOE_WGRAD_BLOCK_M = 64
MOE_WGRAD_BLOCK_N = 128
MOE_WGRAD_BLOCK_K = 64
MOE_WGRAD_NUM_WARPS = 8
MOE_WGRAD_NUM_STAGES = 3
MOE_COMBINE_BLOCK = 1024
# From sm90 on, bf16 fused_moe runs its six GEMMs as torch._grouped_mm (CUTLASS grouped GEMMs,
# about 690 TFLOP/s at Mixtral-8x7B's expert layer on an H100 against 260-460 for the Triton
# ones above); the SwiGLU and its backward are then elementwise kernels of SWIGLU_BLOCK_M rows
# x SWIGLU_BLOCK_N columns.
GROUPED_MM_MIN_CAPABILITY = (9, 0)
MOE_SWIGLU_BLOCK_M = 4
MOE_SWIGLU_BLOCK_N = 1024

# embedding: BLOCK_M looked-up rows x BLOCK_N columns per forward tile (untuned). Backward,
# measured on the H100 (4096 tokens, 128256 x 4096 bf16): the zero fill of unused rows best at
# tiles of 2 whole 4096-wide rows (ZERO_TILE_ELEMENTS, more rows when narrow, at most
# ZERO_MAX_BLOCK_M) and 8 warps; the segment sums at 1024 columns a program and 4 warps.
EMBEDDING_BLOCK_M = 16
EMBEDDING_BLOCK_N = 512
EMBEDDING_NUM_WARPS = 4
EMBEDDING_ZERO_TILE_ELEMENTS = 8192
EMBEDDING_ZERO_BLOCK_N = 4096
EMBEDDING_ZERO_MAX_BLOCK_M = 256
EMBEDDING_ZERO_NUM_WARPS = 8
EMBEDDING_SEGMENT_BLOCK_N = 1024
EMBEDDING_SEGMENT_NUM_WARPS = 4

# modulated_rms_norm's backward: rms_norm's backward tile halved, and fewer elements per warp
# (three more fp32 accumulator rows, and x_hat and the modulated gradient live beside the tile:
# rms_norm's sizes spill). Untuned: chosen so that sm_90 spills no more than rms_norm's backward.
MODULATED_RMS_NORM_BACKWARD_TILE_ELEMENTS = 8192
MODULATED_RMS_NORM_BACKWARD_ELEMENTS_PER_WARP = 512
# mHC coefficients: tokens x HC x HC elements per Sinkhorn tile (HC padded to a power of two);
# a token's matrix is tiny, so a program takes as many tokens as fill the tile.
MHC_TILE_ELEMENTS = 2048
MHC_NUM_WARPS = 4
# mHC's pre-mix and post + residual mix: memory-bound sums over the stream axis. A program takes
# BLOCK_T tokens and walks their channels BLOCK_C at a time; its largest register tile (tokens x
# streams x channels, x streams again for the post-mix's HC x HC matrix) holds at most
# MHC_MIX_TILE_ELEMENTS. H100, 4096 tokens x 4 streams x 4096 channels, bf16, CUDA graphs:
# mhc_pre full step 0.189 ms at 4096 / 128 / 4 warps, 0.168 at 16384 / 1024 / 8 (0.166 at
# 4096 / 1024 / 4, 0.173 at 8192 / 512 / 8, 0.275 at 2048 / 256 / 4); mhc_post_res forward 0.158
# -> 0.112 ms, its full step under do_bench 1.17 -> 0.60 ms (scratch tuning run, ten shapes).
MHC_MIX_TILE_ELEMENTS = 16384
MHC_MIX_BLOCK_C = 1024
MHC_MIX_NUM_WARPS = 8
# mHC's projection (x @ phi, M = HC^2 + 2 HC <= a few dozen columns: memory-bound). Forward: a
# program takes MHC_PROJ_BLOCK_T tokens (at least 16, tl.dot's minimum) and streams a split of
# their K = HC * C values MHC_PROJ_BLOCK_K at a time. Every token block reads all of phi, so
# blocks are wide and K is split instead until about MHC_PROJ_PROGRAMS_PER_SM programs per SM run.
# H100, 4096 tokens x 4 x 4096, bf16, forward / full step: 64 x 32 with 4 warps 0.141 / 0.483 ms,
# 128 x 32 with 8 warps 0.139 / 0.484, 64 x 64 with 4 warps 0.178 / 0.522 (and 16 bytes of
# spill), with 8 warps 0.269 / 0.618; 16-token blocks over all of K (the first version) 0.36 /
# 0.714. Backward: a program owns MHC_PROJ_BACKWARD_BLOCK_K columns of K and walks a split of the
# tokens MHC_PROJ_BACKWARD_BLOCK_T at a time (K / 64 programs: 256 at 4 x 4096, times the splits).
# No variant here spills on sm_90 (tests/test_compile_mhc.py; backward 138 / 190 registers);
# 4-warp 64 x 64 backward tiles spill or sit at 255.
MHC_PROJ_BLOCK_T = 64
MHC_PROJ_BLOCK_K = 32
MHC_PROJ_NUM_WARPS = 4
MHC_PROJ_PROGRAMS_PER_SM = 4
MHC_PROJ_BACKWARD_BLOCK_T = 32
MHC_PROJ_BACKWARD_BLOCK_K = 64
MHC_PROJ_BACKWARD_NUM_WARPS = 8
