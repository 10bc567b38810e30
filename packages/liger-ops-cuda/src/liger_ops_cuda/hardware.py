"""NVIDIA hardware facts used by the kernels' launch plans (one place, no literals in kernels)."""

from __future__ import annotations

import functools
import os

import torch

# Largest row tile kept in registers in one piece; wider rows are processed in chunks.
MAX_FUSED_BLOCK = 32768
# Chunk width for rows wider than MAX_FUSED_BLOCK.
CHUNK_BLOCK = 8192
# Elements a program should hold per tile in the memory-bound norms: enough bytes in
# flight per SM on H100/H200 without spilling registers.
TARGET_TILE_ELEMENTS = 8192
# Stand-in SM count where there is no GPU (the Triton interpreter on CPU): small, so that
# tests still run several programs per grid.
INTERPRETER_SM_COUNT = 4


@functools.lru_cache(maxsize=None)
def sm_count(device_index: int | None = None) -> int:
    """Streaming multiprocessors of the device (env ``LIGER_CUDA_SM_COUNT`` overrides)."""
    override = os.environ.get("LIGER_CUDA_SM_COUNT")
    if override:
        return int(override)
    if not torch.cuda.is_available():
        return INTERPRETER_SM_COUNT
    index = torch.cuda.current_device() if device_index is None else device_index
    return torch.cuda.get_device_properties(index).multi_processor_count


def num_warps_for(block_elements: int) -> int:
    """Warps for a tile of this many elements: ~256 elements per warp, 4 to 32 warps."""
    return max(4, min(32, block_elements // 256))
