"""The launch guard every kernel of this package goes through.

The Triton interpreter on CPU enforces none of the Ascend limits that fail a real launch:
the grid product (``grid should be less than 65536!``), the Unified Buffer (``ub overflow,
requires N bits while M bits available`` at compile time, or an ``AICore execute failed`` with
no Python trace at run time), tiles of several rows whose rows are not 32-byte aligned in HBM
(vector-core faults), and int32 offsets inside a tile that wrap. So every launch describes its
grid, the tiles it keeps live at once, its rows per tile with their pitches and its largest
in-tile offset, and `check` refuses a plan that breaks a limit with an error that names the
kernel, the numbers and the budget. The UB model behind the tiles: ``ub_model.md``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from liger_ops_ascend.hardware import ALIGN_BYTES, GRID_LIMIT, INT32_MAX, Hardware, align_up


class AscendLaunchError(RuntimeError):
    """A launch plan that an Ascend NPU would refuse (grid too large, tiles overflow the UB)."""


@dataclass(frozen=True)
class Tile:
    """A buffer one program keeps in the UB: ``rows x cols`` elements of ``elem_bytes`` each,
    allocated ``buffers`` times (2 for a buffer that a loop fills or drains by DMA: multi-buffer).

    The tail axis is padded to 32 bytes, as the hardware allocates it.
    """

    name: str
    rows: int
    cols: int
    elem_bytes: int
    buffers: int = 1

    @property
    def nbytes(self) -> int:
        return self.buffers * self.rows * align_up(self.cols * self.elem_bytes)

    def __str__(self) -> str:
        times = f"x{self.buffers}" if self.buffers > 1 else ""
        return f"{self.name} {self.rows}x{self.cols}x{self.elem_bytes}B{times}={self.nbytes}"


@dataclass(frozen=True)
class KernelPlan:
    """One launch: which kernel, its grid, and every tile live in one program at once.

    ``block_rows``: rows of HBM a tile spans, ``row_pitches``: the row strides in bytes of the
    tensors it tiles that way (several rows need 32-byte aligned pitches); ``int32_extent``: the
    largest offset formed in int32 inside a tile (0: none from a runtime stride).
    """

    kernel: str
    grid: tuple[int, ...]
    tiles: tuple[Tile, ...]
    block_rows: int = 1
    row_pitches: tuple[int, ...] = ()
    int32_extent: int = 0

    @property
    def ub_bytes(self) -> int:
        return sum(t.nbytes for t in self.tiles)

    @property
    def programs(self) -> int:
        return math.prod(self.grid)


def check(plan: KernelPlan, hw: Hardware) -> None:
    """Raise AscendLaunchError if ``plan`` breaks the grid limit, ``hw``'s UB budget, the row
    alignment of a multi-row tile or int32 in-tile offsets."""
    programs = plan.programs
    if not plan.grid or programs < 1:
        raise AscendLaunchError(f"liger-ops-ascend kernel {plan.kernel}: empty grid {plan.grid}")
    if programs >= GRID_LIMIT:
        raise AscendLaunchError(
            f"liger-ops-ascend kernel {plan.kernel}: grid {plan.grid} launches {programs} programs, but "
            f"Ascend NPUs need fewer than {GRID_LIMIT} ('grid should be less than 65536!'). Launch one "
            f"program per core ({hw.soc} has {hw.vector_cores} vector cores) and loop over the work inside"
        )
    need = plan.ub_bytes
    if need > hw.ub_budget:
        biggest = sorted(plan.tiles, key=lambda t: t.nbytes, reverse=True)
        listing = ", ".join(str(t) for t in biggest[:6]) + (", ..." if len(biggest) > 6 else "")
        raise AscendLaunchError(
            f"liger-ops-ascend kernel {plan.kernel}: its tiles need {need} bytes of Unified Buffer at "
            f"once ({listing}), over the budget by {need - hw.ub_budget} bytes: {hw.describe_budget()}. "
            f"Use a smaller tile (fewer rows per tile, or chunk the row)"
        )
    unaligned = [p for p in plan.row_pitches if p % ALIGN_BYTES]
    if plan.block_rows > 1 and unaligned:
        raise AscendLaunchError(
            f"liger-ops-ascend kernel {plan.kernel}: tiles of {plan.block_rows} rows over rows {unaligned[0]} bytes "
            f"apart; tiles of several rows need row pitches that are multiples of {ALIGN_BYTES} bytes (vector-core "
            f"faults otherwise). Use one row per tile, or pad the rows"
        )
    if plan.int32_extent > INT32_MAX:
        raise AscendLaunchError(
            f"liger-ops-ascend kernel {plan.kernel}: offsets inside a tile reach {plan.int32_extent}, past int32 "
            f"({INT32_MAX}). Use fewer rows per tile, or a copy with a smaller row stride"
        )


def launch(kernel: Any, plan: KernelPlan, hw: Hardware, *args: Any, **kwargs: Any) -> None:
    """Check ``plan`` against ``hw``, then launch ``kernel`` on ``plan.grid``."""
    check(plan, hw)
    kernel[plan.grid](*args, **kwargs)


def check_all(plans: Sequence[KernelPlan], hw: Hardware) -> None:
    for plan in plans:
        check(plan, hw)


__all__ = ["AscendLaunchError", "KernelPlan", "Tile", "check", "check_all", "launch"]
