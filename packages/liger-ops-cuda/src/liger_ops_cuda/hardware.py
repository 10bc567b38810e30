"""NVIDIA hardware facts used by the kernels' launch plans (one place, no literals in kernels)."""

from __future__ import annotations

import functools
import os

import torch

# Largest row tile kept in registers in one piece; wider rows are processed in chunks
# (backward holds ~5 fp32 copies of the tile: beyond this it spills).
MAX_FUSED_BLOCK = 16384
# Chunk width for rows wider than MAX_FUSED_BLOCK.
CHUNK_BLOCK = 8192
# Elements a program holds per tile in the memory-bound norms, and elements per warp.
# Tuned on an H200 at 4096 x 4096 bf16 with CUDA-graph timing
# (benchmarks/bench_rms_norm.py --tune): forward one 4096-row with 8 warps (18.7 us),
# backward 4 rows x 4096 with 16 warps and one program per SM (41.8 us).
FORWARD_TILE_ELEMENTS = 4096
FORWARD_ELEMENTS_PER_WARP = 512
BACKWARD_TILE_ELEMENTS = 16384
BACKWARD_ELEMENTS_PER_WARP = 1024
# Backward programs per SM: each keeps an fp32 grad_weight row; more programs hide latency
# at the cost of a larger partial buffer to reduce.
BACKWARD_PROGRAMS_PER_SM = 1
# Summing per-program partial rows (grad_weight): columns per program, and partial rows
# loaded at once (measured on H200: one row per iteration cost ~8 us for 132 x 4096).
REDUCE_BLOCK = 64
REDUCE_ROWS = 32
# Elementwise gated activations (swiglu, geglu): elements per program and warps. Tuned on an
# H200 (benchmarks/bench_activations.py --tune, 4096 x 14336 bf16, CUDA-graph): 2048 with 8
# warps was fastest for both (fwd 81.8 us, bwd 137.5 us); every plan within 2%.
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
# tile, and the widest column block (wider rows are split across column blocks). Starting
# points from first principles (16 elements per thread); check with benchmarks/bench_norms.py --tune.
DYT_TILE_ELEMENTS = 4096
DYT_BACKWARD_TILE_ELEMENTS = 8192
DYT_MAX_BLOCK_N = 4096
# GroupNorm: a (batch, group) is a (channels-per-group, spatial) array. Elements per tile,
# and the elements of a group above which it is split across several programs (two-phase
# statistics) rather than normalised by one program in two passes (the second from L2).
# GROUP_NORM_SPLIT_PROGRAMS: split groups until about this many programs per SM run.
# Tuned on an H200 at 32 x 128 x 8192 fp32, 32 groups (CUDA-graph fwd+bwd; torch.compile 265 us):
# tile 4096/16 warps 246 us, 8192/16 warps 218 us, 16384/16 warps 244 us, 32768 397 us.
GROUP_NORM_TILE_ELEMENTS = 8192
GROUP_NORM_ELEMENTS_PER_WARP = 512
GROUP_NORM_CHUNK_ELEMENTS = 8192
GROUP_NORM_SPLIT_PROGRAMS_PER_SM = 4
# fused_add_rms_norm and layer_norm backward tiles: RMSNorm's tuned tile as the starting
# point (same shape of work with one more input or accumulator), tunable apart from it with
# benchmarks/bench_norms.py. Compiled for sm_90, 4 x 4096 rows with 16 warps spill ~100 bytes
# (fused_add) / ~24 bytes (layer_norm) per thread, 2 x 4096 none.
FUSED_ADD_RMS_NORM_BACKWARD_TILE_ELEMENTS = 16384
LAYER_NORM_BACKWARD_TILE_ELEMENTS = 16384
# PolyNorm keeps about nine fp32 copies of its backward tile live (x, dy, three powers and
# their products). Tuned on an H200 at 4096 x 4096 bf16 (benchmarks/bench_norms.py, CUDA
# graphs): forward one row with 4 warps 22.6 us (8 warps: 27.0); backward 2 rows with 8
# warps 59.0 us (1 row, 16 warps: ~70).
POLY_NORM_FORWARD_TILE_ELEMENTS = 4096
POLY_NORM_FORWARD_ELEMENTS_PER_WARP = 1024
POLY_NORM_BACKWARD_TILE_ELEMENTS = 8192
POLY_NORM_BACKWARD_ELEMENTS_PER_WARP = 1024
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
# Vocabulary tile per program and its warps: every (row, tile) pair is a program, so 4096 x 128256
# logits are ~130k programs of 4096 elements (16 fp32 per thread with 8 warps), enough loads in
# flight on every SM of an H100/H200 without a per-row loop. Untuned starting point: measure
# with benchmarks/tune_losses.py (liger bench --ops losses compares with the peers).
CE_BLOCK = 4096
CE_NUM_WARPS = 8
# cross_entropy forward with many rows: one program per row streams its vocabulary in
# CE_ROW_BLOCK-wide steps (running max / sum of exp), so the only buffers are the per-row loss
# and lse (8 bytes a row, no (rows, tiles) partials: ~32 KiB at 4096 rows, under liger-kernel's
# footprint). 8192 fp32 with 8 warps: eight 16-byte loads per thread in flight (32 KiB per
# program), 60 registers (sm_90): ~4 programs resident per SM. A program per row needs
# rows to balance: CE_ROW_PROGRAMS_MIN_ROWS_PER_SM x SMs rows (1056 on an H100/H200) are >= 2
# full waves, and in a ragged last wave one program an SM still keeps ~32 KiB in flight (more
# than its share of bandwidth), so little idles; fewer rows (fused_linear_cross_entropy's
# 512-token chunks) keep the (row, tile) programs, which fill every SM whatever the row count.
# Untuned starting points: benchmarks/tune_losses.py --only ce-rows sweeps all three.
CE_ROW_BLOCK = 8192
CE_ROW_NUM_WARPS = 8
CE_ROW_PROGRAMS_MIN_ROWS_PER_SM = 8
# The targets' statistics (mean's scales, bad-target count, sum of class weights): one program
# over the targets in steps of CE_STATS_BLOCK (4096 int64 targets: one step at 4096 tokens).
CE_STATS_BLOCK = 4096
CE_STATS_NUM_WARPS = 8
# The divergences (kl_div, jsd, tvd): elements per program and warps, same reasoning.
DIV_BLOCK = 4096
DIV_NUM_WARPS = 8
# In-place scaling of a gradient by the incoming gradient (skipped on the device when it is 1).
SCALE_BLOCK = 8192
SCALE_NUM_WARPS = 8
# Fused linear losses: tokens per chunk so that one chunk's logits take at most this many
# elements (bf16: 128 MiB at 64M; 512 tokens at vocab 128256), rounded down to a multiple of
# FLCE_CHUNK_MULTIPLE tokens (tensor-core friendly GEMM shapes). Peak memory beyond grad_weight
# and grad_input is one chunk's logits; larger chunks make the grad_weight GEMM (K = chunk)
# more efficient.
FLCE_CHUNK_ELEMENTS = 64 * 2**20
FLCE_CHUNK_MULTIPLE = 128
# Fused linear cross-entropy when the tokens are no more than the hidden size (and grad_weight
# has the input's dtype): the logits of all tokens, stored vocabulary-major, fit in grad_weight's
# own storage, so there is no chunk buffer and the three GEMMs run once at full size. The CE
# kernels then walk (vocab, token) tiles, coalesced along tokens: FLCE_VT_BLOCK_V x
# FLCE_VT_BLOCK_T elements per program; the lse pass splits the vocabulary into groups so that
# about FLCE_VT_PROGRAMS_PER_SM programs per SM stream it. grad_weight is then written block by
# block, vocabulary descending (each block is copied out of the storage it is about to
# overwrite): FLCE_VT_GRAD_WEIGHT_BLOCK_ELEMENTS is that copy's size (16 MiB in bf16).
FLCE_VT_BLOCK_V = 64
FLCE_VT_BLOCK_T = 64
FLCE_VT_NUM_WARPS = 4
FLCE_VT_PROGRAMS_PER_SM = 16
FLCE_VT_GRAD_WEIGHT_BLOCK_ELEMENTS = 8 * 2**20
# fused_linear_jsd keeps three chunk-sized buffers (student and teacher fp32 logits, the
# gradient in the input dtype): a smaller budget.
FLJSD_CHUNK_ELEMENTS = 32 * 2**20
