"""The launch guard every kernel of this package goes through.

The Triton interpreter on CPU enforces neither of the two Ascend limits that fail a real
launch: the grid product (``grid should be less than 65536!``) and the Unified Buffer
(``ub overflow, requires N bits while M bits available`` at compile time, or an
``AICore execute failed`` with no Python trace at run time). So every launch describes
its grid and the tiles it keeps live at once, and `check` refuses a plan that breaks
either limit with an error that names the kernel, the numbers and the budget.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from liger_ops_ascend.hardware import GRID_LIMIT, Hardware, align_up


class AscendLaunchError(RuntimeError):
    """A launch plan that an Ascend NPU would refuse (grid too large, tiles overflow the UB)."""


@dataclass(frozen=True)
class Tile:
    """A buffer one program keeps in the UB: ``rows x cols`` elements of ``elem_bytes`` each.

    The tail axis is padded to 32 bytes, as the hardware allocates it.
    """

    name: str
    rows: int
    cols: int
    elem_bytes: int

    @property
    def nbytes(self) -> int:
        return self.rows * align_up(self.cols * self.elem_bytes)

    def __str__(self) -> str:
        return f"{self.name} {self.rows}x{self.cols}x{self.elem_bytes}B={self.nbytes}"


@dataclass(frozen=True)
class KernelPlan:
    """One launch: which kernel, its grid, and every tile live in one program at once."""

    kernel: str
    grid: tuple[int, ...]
    tiles: tuple[Tile, ...]

    @property
    def ub_bytes(self) -> int:
        return sum(t.nbytes for t in self.tiles)

    @property
    def programs(self) -> int:
        return math.prod(self.grid)


def check(plan: KernelPlan, hw: Hardware) -> None:
    """Raise AscendLaunchError if ``plan`` breaks the grid limit or ``hw``'s UB budget."""
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


def launch(kernel: Any, plan: KernelPlan, hw: Hardware, *args: Any, **kwargs: Any) -> None:
    """Check ``plan`` against ``hw``, then launch ``kernel`` on ``plan.grid``."""
    check(plan, hw)
    kernel[plan.grid](*args, **kwargs)


def check_all(plans: Sequence[KernelPlan], hw: Hardware) -> None:
    for plan in plans:
        check(plan, hw)


__all__ = ["AscendLaunchError", "KernelPlan", "Tile", "check", "check_all", "launch"]
