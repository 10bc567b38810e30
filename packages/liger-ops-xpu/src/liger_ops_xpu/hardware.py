"""Intel GPU facts used by the kernels' launch plans, in one place (no literals in kernels).

Terms: an EU (execution unit, "XVE" on Xe2) runs several hardware threads; one Triton
"warp" is one sub-group, i.e. one hardware thread running 16 or 32 lanes; a program
(work-group) of ``num_warps`` sub-groups occupies ``num_warps`` hardware threads of one
Xe-core. Register-heavy kernels (the norms) compile with the large register file (256
GRF per thread), which halves the resident threads per EU and caps a work-group at 32
sub-groups.

Where each tuned size comes from (and which are still untuned starting points):
benchmarks/tuning/xpu.md in the repository.
"""

from __future__ import annotations

import functools
import inspect
import os
import re
from typing import Any

import torch

# --- tile caps (smaller than CUDA's: an Intel hardware thread holds fewer values per lane
# without spilling, even with 256 GRF) -------------------------------------------------------
# Largest row tile kept in registers in one piece; wider rows are processed in chunks.
MAX_FUSED_BLOCK = 16384
# Chunk width for rows wider than MAX_FUSED_BLOCK.
CHUNK_BLOCK = 4096
# Elements a program holds per tile in the memory-bound norms: short rows are packed
# several to a tile until it holds about this many.
TARGET_TILE_ELEMENTS = 4096
# At most this many rows in one tile (keeps the per-row reductions cheap).
MAX_ROWS_PER_TILE = 32
# Norms that keep several live fp32 copies of the row (poly_norm's three powers, layer_norm's
# centred row and gradient) fuse rows only up to this width before chunking.
MAX_FUSED_BLOCK_HEAVY = 8192

# --- elementwise ops (swiglu, geglu, dyt): a flat 1-D grid, light on registers ------------------
# Elements per program: 16 per lane of a 16-sub-group work-group. Small enough for the default
# 128-GRF mode (more threads resident to hide memory latency), large enough to amortise the
# program's index math.
ELEMENTWISE_BLOCK = 8192
ELEMENTWISE_NUM_WARPS = 16
# Smaller blocks get fewer sub-groups, so that each lane still holds at least this many elements.
ELEMENTWISE_MIN_ELEMENTS_PER_LANE = 4
# Columns per program of the 2-D elementwise kernels with a per-column parameter (dyt).
ELEMENTWISE_COL_BLOCK = 1024
# RoPE: elements of one [heads x half head_dim] tile (each program rotates one position's
# heads in chunks of this size; 32 heads x 64 columns for LLaMA's head_dim 128).
ROPE_TILE_ELEMENTS = 2048

# Attention Residuals: positions x columns per tile (rows are walked in BLOCK_N-wide chunks, so
# no row width is too wide); the per-block scores live in registers beside the tile.
ATTN_RES_TILE_ELEMENTS = 4096
ATTN_RES_BLOCK_N = 4096

# Sparsemax threshold search: halvings of [max - 1, max] (fp32 resolution at unit scale), then
# Michelot steps that make tau exact for the support found.
SPARSEMAX_BISECTION_STEPS = 24
SPARSEMAX_MICHELOT_STEPS = 2

# --- losses: one row of logits per program, the vocabulary walked in blocks -------------------
# Vocabulary block of the cross-entropy-style kernels: an Intel thread spills beyond a few fp32
# values per lane (with 256 GRF: 128 per SIMD32 lane).
LOSS_VOCAB_BLOCK = 4096
LOSS_NUM_WARPS = 32
# Fused linear losses: bytes of chunk buffers a chunk loop may hold at once (the default of
# `liger_core.memory_budget`; a call, a module or LIGER_FLCE_MEMORY_BUDGET overrides it). 256 MiB
# is what the earlier 64 Mi-logit chunks took in fp32 (the JSD, KL and distillation losses now
# hold a quarter as many logits: two fp32 buffers; cross-entropy in bf16 twice as many, as the
# H200 measurements of issue 38 favour): unmeasured on Intel hardware. A Max 1550 stack has
# 64 GiB of HBM, so the limit is the training step's headroom, not the device. Per row:
# cross-entropy and scaled cross-entropy hold vocab logits in the input dtype (the gradient in
# place); the JSD, KL and distillation losses the student's and teacher's fp32 logits (8 bytes a
# logit); the preference losses and GRPO fp32 logits of whole pairs or sequences (4 bytes, at
# least one pair or sequence per chunk).
FUSED_LINEAR_MEMORY_BUDGET = 256 * 2**20
# Chunk rows are a multiple of the 16-bit GEMM's row tile (MATMUL_BLOCK_M below) when the budget
# holds that many: no chunk ends in a partly filled tile.
FUSED_LINEAR_ROW_MULTIPLE = 256
# Tiles of the 16-bit GEMM with float32 output (fused_linear_jsd's logits), for the large
# register file.
MATMUL_BLOCK_M = 256
MATMUL_BLOCK_N = 256
MATMUL_BLOCK_K = 32
MATMUL_NUM_WARPS = 32
# tl.dot wants every tile dimension >= 16.
MIN_DOT_BLOCK = 16
# fused_moe's grouped GEMMs, tuned apart: the token-row GEMMs (gate-up, down, grad of the
# input, down backward) take ROWS tiles, whose BLOCK_M is also the routing tile (one expert's
# sorted selections); the weight-gradient GEMM takes WGRAD tiles (BLOCK_M rows of the weight,
# BLOCK_K sorted rows per reduction step). Output columns and reduction step per program (the
# step halved for fp32), sub-groups; the gather-sum's column block. Untuned starting points
# (DPAS-friendly tiles for the large register file).
MOE_ROWS_BLOCK_M = 128
MOE_ROWS_BLOCK_N = 128
MOE_ROWS_BLOCK_K = 32
MOE_ROWS_NUM_WARPS = 16
MOE_WGRAD_BLOCK_M = 128
MOE_WGRAD_BLOCK_N = 128
MOE_WGRAD_BLOCK_K = 32
MOE_WGRAD_NUM_WARPS = 16
MOE_COMBINE_BLOCK = 1024

# fused_neighborhood_attention's banded kernels: query and key rows per block; heads wider than
# NAT_WIDE_HEAD_DIM take NAT_WIDE_HEAD_BLOCK rows (the fp32 accumulators are rows x head_dim).
# Untuned starting points (CUDA's sizes, on the large register file).
NAT_BLOCK = 64
NAT_WIDE_HEAD_DIM = 128
NAT_WIDE_HEAD_BLOCK = 32
NAT_NUM_WARPS = 8

# Multi-token attention's direct convolution over the (query, key) planes: a program's fp32
# accumulator is a block of at most MTA_CONV_MAX_BLOCK_C channels x positions, MTA_CONV_TILE_ELEMENTS
# in all (half CUDA's: 16 values per lane of the 8 sub-groups, ELEMENTS_PER_LANE, beside the
# position vectors and the shifted loads, on the large register file), the positions
# MTA_CONV_BLOCK_N columns wide; the weight gradient runs a persistent grid over the tiles
# (`persistent_programs`, EU-count based; partial sums, no atomics). Untuned starting points (not
# yet timed on an XPU).
MTA_CONV_TILE_ELEMENTS = 4096
MTA_CONV_MAX_BLOCK_C = 16
MTA_CONV_BLOCK_N = 64
MTA_CONV_NUM_WARPS = 8

# --- threads and sub-groups ------------------------------------------------------------------
# Triton's default sub-group width on XPU; every Intel GPU Triton targets supports it.
DEFAULT_SUB_GROUP_SIZE = 32
# Values per lane per tile in the norms: a few live fp32 tiles of this size stay well inside the
# 128 fp32 values a SIMD32 lane gets from a 256-GRF thread.
ELEMENTS_PER_LANE = 16
MIN_NUM_WARPS = 4
# A work-group compiled with 256 (or 512) GRF may hold at most 32 sub-groups.
MAX_NUM_WARPS_LARGE_GRF = 32
# Hardware threads resident per EU with the large register file (8 with 128 GRF).
THREADS_PER_EU_LARGE_GRF = 4
# EUs per sub-slice (Xe-core) where a driver reports only the sub-slice count (8 on Xe-HPC and
# Xe2, 16 on Xe-HPG: the lower figure only under-fills the grid, it never over-sizes it).
EUS_PER_SUBSLICE = 8
# Stand-in EU count without an XPU (the Triton interpreter on CPU): small, so that tests
# still run several programs per grid without slowing the interpreter down.
INTERPRETER_EU_COUNT = 8

EU_COUNT_ENV = "LIGER_XPU_EU_COUNT"
GRF_MODE_ENV = "LIGER_XPU_GRF_MODE"


def xpu_available() -> bool:
    return hasattr(torch, "xpu") and torch.xpu.is_available()


def _device_index(device_index: int | None) -> int:
    return torch.xpu.current_device() if device_index is None else device_index


@functools.cache
def _device_eu_count(device_index: int) -> int:
    props = torch.xpu.get_device_properties(device_index)
    eus = int(getattr(props, "gpu_eu_count", 0) or 0)
    if eus <= 0:
        # Older drivers/torch report only sub-slices (Xe-cores).
        eus = int(getattr(props, "gpu_subslice_count", 0) or 0) * EUS_PER_SUBSLICE
    return eus if eus > 0 else INTERPRETER_EU_COUNT


def eu_count(device_index: int | None = None) -> int:
    """Execution units of the device: ``gpu_eu_count`` (else sub-slices x 8).

    ``LIGER_XPU_EU_COUNT`` overrides it (read on every call, so tests and tuning can change
    it); without an XPU a small stand-in is returned for the Triton interpreter.
    """
    override = os.environ.get(EU_COUNT_ENV)
    if override:
        value = int(override)
        if value < 1:
            raise ValueError(f"{EU_COUNT_ENV} must be a positive integer; got {override!r}")
        return value
    if not xpu_available():
        return INTERPRETER_EU_COUNT
    return _device_eu_count(_device_index(device_index))


@functools.cache
def _device_sub_group_sizes(device_index: int) -> tuple[int, ...]:
    sizes = getattr(torch.xpu.get_device_properties(device_index), "sub_group_sizes", None) or ()
    return tuple(int(s) for s in sizes)


def sub_group_size(device_index: int | None = None) -> int:
    """Lanes per sub-group (Triton warp) the kernels are compiled for: Triton's default 32 when
    the device supports it (all current Intel GPUs), else the widest it reports."""
    if not xpu_available():
        return DEFAULT_SUB_GROUP_SIZE
    sizes = _device_sub_group_sizes(_device_index(device_index))
    if not sizes or DEFAULT_SUB_GROUP_SIZE in sizes:
        return DEFAULT_SUB_GROUP_SIZE
    return max(sizes)


def persistent_programs(num_warps: int, device_index: int | None = None) -> int:
    """Programs that are resident at once when each has ``num_warps`` sub-groups and uses the
    large register file: the grid of kernels that loop over their share of the work and keep
    one partial result per program."""
    return max(1, eu_count(device_index) * THREADS_PER_EU_LARGE_GRF // num_warps)


# --- launch options -------------------------------------------------------------------------
def interpreting(kernel: Any = None) -> bool:
    """Whether kernels run in the Triton interpreter (``TRITON_INTERPRET=1``).

    Triton chooses at decoration time (``@triton.jit`` returns an ``InterpretedFunction``), so
    the kernel object is the most reliable witness; the environment covers the rest.
    """
    if kernel is not None:
        try:
            from triton.runtime.interpreter import InterpretedFunction
        except ImportError:  # pragma: no cover - every Triton with an interpreter has it
            pass
        else:
            if isinstance(kernel, InterpretedFunction):
                return True
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


_GRF_COMPARE = re.compile(r"grf_mode\s*==\s*['\"](\w+)['\"]")


def grf_modes_accepted_by(options_cls: Any, backend_source: str) -> frozenset[str]:
    """The ``grf_mode`` values an Intel backend accepts, from its options dataclass and source.

    Triton 3.3-era backends declare ``grf_mode: tuple = ('small', 'large', 'auto', 'default')``
    (the default lists the accepted values); later ones declare ``grf_mode: str = 'default'``
    and compare the option against each accepted value (``'128'``, ``'256'``, ...) when they
    build the binary, raising on anything else.
    """
    field = getattr(options_cls, "__dataclass_fields__", {}).get("grf_mode")
    if field is None:
        return frozenset()
    if isinstance(field.default, (tuple, list)):
        return frozenset(str(v) for v in field.default)
    return frozenset(_GRF_COMPARE.findall(backend_source))


def _accepted_grf_modes() -> frozenset[str]:
    """``grf_mode`` values the installed Triton understands; empty without an Intel backend
    (plain Triton rejects the keyword as unknown)."""
    try:
        from triton.backends.intel import compiler as intel_compiler
    except Exception:  # noqa: BLE001 - no Intel backend, or one that cannot load here
        return frozenset()
    try:
        source = inspect.getsource(intel_compiler)
    except (OSError, TypeError):
        source = ""
    return grf_modes_accepted_by(getattr(intel_compiler, "XPUOptions", None), source)


@functools.cache
def large_grf_mode() -> str | None:
    """The ``grf_mode`` launch value selecting 256 registers per thread: ``"256"`` on newer
    Intel Triton, ``"large"`` on older, None where the installed Triton has neither.

    ``LIGER_XPU_GRF_MODE`` overrides it (``off`` passes no ``grf_mode``). Cached: call
    ``large_grf_mode.cache_clear()`` after changing the variable.
    """
    override = os.environ.get(GRF_MODE_ENV)
    if override:
        return None if override.lower() in ("off", "none") else override
    accepted = _accepted_grf_modes()
    for value in ("256", "large"):
        if value in accepted:
            return value
    return None


def launch_kwargs(kernel: Any, device: torch.device, num_warps: int, register_heavy: bool = True) -> dict[str, Any]:
    """Keyword arguments for launching ``kernel`` on ``device`` with ``num_warps`` sub-groups.

    Register-heavy kernels get the large register file (``grf_mode``) when they are compiled
    for an XPU by a Triton that accepts the option; never in the interpreter (it must only see
    standard launch keywords) and never for other devices.
    """
    if num_warps < 1 or num_warps & (num_warps - 1):
        raise ValueError(f"num_warps must be a power of two; got {num_warps}")
    kwargs: dict[str, Any] = {"num_warps": num_warps}
    if not register_heavy or interpreting(kernel) or torch.device(device).type != "xpu":
        return kwargs
    mode = large_grf_mode()
    if mode is not None:
        if num_warps > MAX_NUM_WARPS_LARGE_GRF and mode in ("256", "512", "large"):
            raise ValueError(f"grf_mode={mode!r} allows at most {MAX_NUM_WARPS_LARGE_GRF} warps; got {num_warps}")
        kwargs["grf_mode"] = mode
    return kwargs


# embedding: BLOCK_M looked-up rows x BLOCK_N columns per forward tile. Backward: the zero fill
# of unused rows stores tiles of ZERO_TILE_ELEMENTS (whole rows up to ZERO_BLOCK_N wide, at most
# ZERO_MAX_BLOCK_M rows), the segment sums SEGMENT_BLOCK_N columns a program. Untuned starting
# points (CUDA's sizes, measured on the H100).
EMBEDDING_BLOCK_M = 16
EMBEDDING_BLOCK_N = 512
EMBEDDING_ZERO_TILE_ELEMENTS = 8192
EMBEDDING_ZERO_BLOCK_N = 4096
EMBEDDING_ZERO_MAX_BLOCK_M = 256
EMBEDDING_SEGMENT_BLOCK_N = 1024

# mHC coefficients: tokens x HC x HC elements per Sinkhorn tile (HC padded to a power of two).
# A few fp32 tiles of this size are live at once: well inside the default 128-GRF mode, which
# keeps more threads resident to hide the loads.
MHC_TILE_ELEMENTS = 2048
MHC_NUM_WARPS = 4
# mHC's pre-mix and post + residual mix: memory-bound sums over the stream axis. A program takes
# BLOCK_T tokens and walks their channels BLOCK_C at a time; its largest register tile (tokens x
# streams x channels, x streams again for the post-mix's HC x HC matrix) holds at most
# MHC_MIX_TILE_ELEMENTS. Untuned starting points.
MHC_MIX_TILE_ELEMENTS = 4096
MHC_MIX_BLOCK_C = 128
MHC_MIX_NUM_WARPS = 4
# mHC's projection (x @ phi, M = HC^2 + 2 HC <= a few dozen columns: memory-bound). Forward: a
# program takes MHC_PROJ_BLOCK_T tokens (at least 16, tl.dot's minimum) and streams a split of
# their K = HC * C values MHC_PROJ_BLOCK_K at a time. Every token block reads all of phi (float32
# in the bench: BLOCK_K x 32 x 4 bytes a step against 16 x BLOCK_K x 2 of x at 16 tokens), so
# blocks are wide and K is split instead until about MHC_PROJ_PROGRAMS_PER_EU programs per EU run:
# the kernels launch without the large register file (128 GRF), where an EU holds 8 threads: two
# 4-sub-group programs. At 64 x 32 the forward's live fp32 tiles (x 64 x 32, phi 32 x 32, the
# 64 x 32 accumulator) are 40 values per SIMD32 lane, inside the 64 a 128-GRF thread holds.
# Backward: a program owns MHC_PROJ_BACKWARD_BLOCK_K columns of K and walks a split of the tokens
# MHC_PROJ_BACKWARD_BLOCK_T at a time (K / 64 programs: 256 at 4 x 4096, times the splits).
# Untuned starting points (not yet timed on an XPU).
MHC_PROJ_BLOCK_T = 64
MHC_PROJ_BLOCK_K = 32
MHC_PROJ_NUM_WARPS = 4
MHC_PROJ_PROGRAMS_PER_EU = 2
MHC_PROJ_BACKWARD_BLOCK_T = 64
MHC_PROJ_BACKWARD_BLOCK_K = 64
MHC_PROJ_BACKWARD_NUM_WARPS = 4
