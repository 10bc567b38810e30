"""Ascend hardware facts used by the launch plans: the one place that knows the chips.

Per SoC: the Unified Buffer (UB) of one core and the AI-core / vector-core counts. At run
time the core counts come from triton-ascend's driver; the table and the environment are
the fallbacks, and the table alone serves the Triton interpreter on CPU.

Environment overrides (for a chip missing from the table, or to model another chip):
    LIGER_ASCEND_SOC            SoC name from ``SOC_TABLE`` (``Ascend910B4``, ``Ascend950``, ...).
    LIGER_ASCEND_VECTOR_CORES   vector cores = programs of a vector-only kernel's grid.
    LIGER_ASCEND_UB_BYTES       UB bytes per core (the whole UB, as the compiler counts it).

The Unified Buffer model (what a kernel's tiles cost, against what budget) is described term by
term, with its sources and what only an NPU can confirm, in ``ub_model.md`` beside this file.
"""

from __future__ import annotations

import contextlib
import functools
import os
import warnings
from dataclasses import dataclass

import torch

# The product of a launch grid must stay below this ("grid should be less than 65536!").
GRID_LIMIT = 65536
# Vector instructions and UB allocations work on 32-byte blocks: a tile's tail axis is
# padded to a multiple of this many bytes. Tiles of several rows also need row pitches (the
# row stride in HBM) that are multiples of it: upstream liger-kernel saw vector-core faults
# for unaligned rows (ub_model.md).
ALIGN_BYTES = 32
# Auto multi-buffer (on by default) allocates every buffer that a loop moves between HBM and
# the UB this many times, so the next iteration's DMA overlaps this one's compute.
UB_MULTI_BUFFER = 2
# Share of the UB the planned tiles may fill. The compiler checks its allocation against the
# whole UB ("requires N bits while 1572864 bits available"); the rest is held back for its own
# local buffers (reductions, scalars), as upstream liger-kernel holds back 10 to 15 percent.
UB_USABLE = 0.9
# Offsets inside a tile are int32 (int64 vector arithmetic runs as scalar code): the largest
# in-tile offset a plan may form.
INT32_MAX = 2**31 - 1

KIB = 1024

# -- tuned sizes (where each comes from: benchmarks/tuning/ascend.md) -----------------

# Most rows in one tile (also heads per rope block, channels per group-norm block): more only
# lengthens the per-row vectors without saving a DMA.
MAX_BLOCK_M = 256
# Widest tile along a row, and the chunk width of wider rows; the UB budget usually binds first.
MAX_BLOCK_N = 65536
# Sparsemax threshold: bisection halves [max - 1, max) to 2^-24 (fp32 resolution for O(1)
# thresholds), then Michelot fixed-point steps make it exact once the support is found.
SPARSEMAX_BISECTION_STEPS = 24
SPARSEMAX_REFINE_STEPS = 3
# Fused linear preference losses: whole pairs per chunk, as many as keep one chunk's logits
# within this many elements (at least one pair).
PREFERENCE_CHUNK_ELEMENTS = 1 << 26
# fused_moe's grouped GEMMs, tuned apart: the token-row GEMMs (gate-up, down, grad of the
# input, down backward) take ROWS tiles, whose BLOCK_M is also the routing tile (one expert's
# sorted selections; the cube unit's 16-row fractals four times); the weight-gradient GEMM takes
# WGRAD tiles (BLOCK_M rows of the weight, BLOCK_K sorted rows per reduction step). BLOCK_M is
# fixed; BLOCK_N and BLOCK_K are caps of each kernel's output columns and reduction step, which
# its plan halves (columns first) until its tiles fit the UB budget, never below MOE_MIN_BLOCK
# (tl.dot's smallest tile); the gather-sum's column block cap. Untuned starting points:
# benchmarks/tuning/ascend.md.
MOE_ROWS_BLOCK_M = 64
MOE_ROWS_BLOCK_N = 256
MOE_ROWS_BLOCK_K = 64
MOE_WGRAD_BLOCK_M = 64
MOE_WGRAD_BLOCK_N = 256
MOE_WGRAD_BLOCK_K = 64
MOE_MIN_BLOCK = 16
MOE_COMBINE_BLOCK = 8192
# fused_neighborhood_attention: rows of a query and a key block, halved from NAT_BLOCK until every
# kernel's tiles fit the UB; NAT_MIN_BLOCK is tl.dot's smallest tile. Untuned starting point.
NAT_BLOCK = 64
NAT_MIN_BLOCK = 16
# fused_linear_grpo: float32 logits of whole sequences per chunk (HBM, not UB; at least one
# sequence): 256 MiB.
FLGRPO_CHUNK_ELEMENTS = 1 << 26
# Fused linear losses: the default of `liger_core.memory_budget` (bytes of chunk buffers per
# chunk loop). None keeps the earlier rule until measured on an NPU: the token-chunked losses
# (cross-entropy, scaled cross-entropy, JSD, KL, distillation) take chunks whose logits have about
# as many elements as the whole input (liger-kernel's rule, a power of two tokens; at 16384 x 2048
# tokens x hidden in bf16, 64 MiB), the preference losses and GRPO their element counts above. A
# budget set by a call, a module or LIGER_FLCE_MEMORY_BUDGET replaces both; per row it counts
# the logits in the input dtype (cross-entropy, scaled cross-entropy: the gradient in place) or
# the student's and teacher's fp32 logits (8 bytes a logit), and 4 bytes a logit for whole
# sequences or pairs. Limits: the chunk buffers live in HBM (64 GB on Atlas A2 910B, the
# kernels' UB tiles are planned apart), so the bound is the training step's headroom.
FUSED_LINEAR_MEMORY_BUDGET: int | None = None
# Chunk rows are a multiple of this when the budget holds that many: whole 128-row cube tiles
# (8 of the cube unit's 16-row fractals) in the chunk's matmuls. Untuned starting point.
FUSED_LINEAR_ROW_MULTIPLE = 128


@dataclass(frozen=True)
class SocInfo:
    """One Ascend SoC: UB bytes per core, AI cores (1 cube + 2 vector each), vector cores."""

    name: str
    ub_bytes: int
    ai_cores: int
    vector_cores: int


def _soc(name: str, ub_kib: int, ai_cores: int) -> SocInfo:
    # On A2/A3/950 every AI core pairs one cube core with two vector cores.
    return SocInfo(name, ub_kib * KIB, ai_cores, 2 * ai_cores)


# UB KiB and AI cores per SoC (sources: benchmarks/tuning/ascend.md). Ascend950's
# 32 AI cores are a placeholder: the run-time query supersedes it on a real device.
SOC_TABLE: dict[str, SocInfo] = {
    s.name: s
    for s in (
        _soc("Ascend910B1", 192, 24),
        _soc("Ascend910B2", 192, 24),
        _soc("Ascend910B2C", 192, 24),
        _soc("Ascend910B3", 192, 20),
        _soc("Ascend910B4", 192, 20),
        _soc("Ascend910_9391", 192, 24),
        _soc("Ascend910_9392", 192, 24),
        _soc("Ascend910_9381", 192, 24),
        _soc("Ascend910_9382", 192, 24),
        _soc("Ascend950", 256, 32),
    )
}
# Families for SoC names missing from the table (e.g. Ascend910_9372, Ascend950PR_9579):
# the longest matching prefix wins.
SOC_FAMILIES: dict[str, str] = {
    "Ascend910B": "Ascend910B2",
    "Ascend910_93": "Ascend910_9391",
    "Ascend950": "Ascend950",
}
# What the interpreter on CPU (no NPU) plans for: the most common A2 part.
DEFAULT_SOC = "Ascend910B2"


@dataclass(frozen=True)
class Hardware:
    """The facts a launch plan needs about the device it runs on."""

    soc: str
    ub_bytes: int
    vector_cores: int
    ai_cores: int

    @property
    def ub_budget(self) -> int:
        """Bytes the tiles of one kernel may occupy at their peak, multi-buffered DMA buffers
        counted twice: ``UB_USABLE`` of the UB, in whole 32-byte blocks."""
        return int(self.ub_bytes * UB_USABLE) // ALIGN_BYTES * ALIGN_BYTES

    def describe_budget(self) -> str:
        return (
            f"{self.soc}'s budget is {self.ub_budget} bytes ({self.ub_bytes // KIB} KiB UB per core, "
            f"{round(100 * UB_USABLE)}% of it for the planned tiles; a loop's DMA buffers count "
            f"{UB_MULTI_BUFFER}x for multi-buffering)"
        )


def align_up(nbytes: int, align: int = ALIGN_BYTES) -> int:
    """``nbytes`` rounded up to a multiple of ``align`` (32-byte tail alignment)."""
    return -(-nbytes // align) * align


def min_block(elem_bytes: int) -> int:
    """Fewest elements of a tile's tail axis that fill one 32-byte block."""
    return max(1, ALIGN_BYTES // elem_bytes)


def lookup_soc(name: str) -> SocInfo:
    """The table entry for ``name``, else its family's, else a clear error."""
    if name in SOC_TABLE:
        return SOC_TABLE[name]
    for prefix in sorted(SOC_FAMILIES, key=len, reverse=True):
        if name.startswith(prefix):
            return SOC_TABLE[SOC_FAMILIES[prefix]]
    raise ValueError(
        f"unknown Ascend SoC {name!r}; known: {', '.join(SOC_TABLE)} (and names starting with "
        f"{', '.join(SOC_FAMILIES)}). Set LIGER_ASCEND_SOC to one of them, or LIGER_ASCEND_UB_BYTES "
        f"and LIGER_ASCEND_VECTOR_CORES"
    )


@functools.cache
def _query_device(index: int) -> tuple[str | None, int | None, int | None]:
    """(SoC name, AI cores, vector cores) reported by the NPU runtime; None where unknown."""
    name = aic = aiv = None
    # An old torch_npu or a broken CANN answers with an error: the fallbacks then apply.
    with contextlib.suppress(Exception):
        name = str(torch.npu.get_device_name(index))
    with contextlib.suppress(Exception):
        import triton

        props = triton.runtime.driver.active.utils.get_device_properties(index)
        aic = int(props["num_aicore"]) or None
        aiv = int(props["num_vectorcore"]) or None
    return name, aic, aiv


def _env_int(name: str) -> int | None:
    value = os.environ.get(name, "").strip()
    if not value:
        return None
    try:
        number = int(value, 0)
    except ValueError:
        raise ValueError(f"{name} must be a positive integer; got {value!r}") from None
    if number <= 0:
        raise ValueError(f"{name} must be a positive integer; got {value!r}")
    return number


def current(device: torch.device | None = None) -> Hardware:
    """Hardware facts for ``device``: environment, then run-time query, then the SoC table.

    Tensors that are not on an NPU (the Triton interpreter on CPU) get ``DEFAULT_SOC``.
    """
    soc_env = os.environ.get("LIGER_ASCEND_SOC", "").strip()
    name = aic = aiv = None
    if soc_env:
        # A forced SoC models that chip: its table counts, not the queried ones.
        soc = lookup_soc(soc_env)
        name = soc_env
    else:
        if device is not None and device.type == "npu":
            index = device.index if device.index is not None else torch.npu.current_device()
            name, aic, aiv = _query_device(index)
        soc = _known_or_default(name or DEFAULT_SOC)
    return Hardware(
        soc=name or soc.name,
        ub_bytes=_env_int("LIGER_ASCEND_UB_BYTES") or soc.ub_bytes,
        vector_cores=_env_int("LIGER_ASCEND_VECTOR_CORES") or aiv or soc.vector_cores,
        ai_cores=aic or soc.ai_cores,
    )


@functools.cache
def _known_or_default(name: str) -> SocInfo:
    try:
        return lookup_soc(name)
    except ValueError:
        # A chip this release does not know: plan with the default's UB (the core counts
        # still come from the run-time query) and say so once.
        warnings.warn(
            f"liger-ops-ascend does not know the UB size of SoC {name!r}; planning tiles for "
            f"{DEFAULT_SOC} ({SOC_TABLE[DEFAULT_SOC].ub_bytes // KIB} KiB UB). Set LIGER_ASCEND_UB_BYTES "
            f"to the UB bytes per core to plan for the real chip",
            RuntimeWarning,
            stacklevel=3,
        )
        return SOC_TABLE[DEFAULT_SOC]


def for_soc(name: str) -> Hardware:
    """Hardware facts of a table SoC, without environment or device (sweeps, tests)."""
    soc = lookup_soc(name)
    return Hardware(soc.name, soc.ub_bytes, soc.vector_cores, soc.ai_cores)


# embedding: the columns of one table row a tile holds (the gather and the backward's segment
# sums); the backward's zero tile holds up to ZERO_TILE_ELEMENTS (several table rows where rows
# are 32-byte aligned). Untuned.
EMBEDDING_BLOCK_N = 2048
EMBEDDING_ZERO_TILE_ELEMENTS = 4096

# modulated_rms_norm's modulation pass: the columns of one row a tile holds; the backward sums
# at most ROWS_PER_CHUNK rows of one modulation row per unit.
MODULATION_BLOCK_N = 2048
MODULATION_ROWS_PER_CHUNK = 64
# mHC coefficients: at most this many tokens x HC x HC lanes per Sinkhorn tile; the UB plan
# (mhc.plan_mhc) halves the tokens per tile until the live tiles fit the budget.
MHC_TILE_ELEMENTS = 2048
# mHC's pre-mix and post + residual mix: a program's largest tile (tokens x streams x channels, x
# streams again for the post-mix's HC x HC matrix) holds at most MHC_MIX_TILE_ELEMENTS, the
# channels at most MHC_MIX_BLOCK_C; the UB plan (mhc.plan_mix) halves the tokens, then the
# channels, until the live tiles fit the budget.
MHC_MIX_TILE_ELEMENTS = 4096
MHC_MIX_BLOCK_C = 256
