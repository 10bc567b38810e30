"""One memory budget for the fused linear losses: the bytes their chunk loops may hold at once.

Every fused linear loss (cross-entropy, scaled cross-entropy, JSD and the distillation losses,
the preference losses, GRPO) computes the logits a chunk of tokens at a time; the budget bounds
the buffers one chunk allocates (its logits in the compute dtype, any float32 copies, gradient
buffers: each vendor module states its per-row formula). Larger chunks make the weight-gradient
GEMM (K = chunk rows) more efficient and cost memory the training step may not have spare.

Where the budget comes from, first found wins:

1. the innermost `fused_linear_memory_budget` context (what ``memory_budget=`` of the functional
   API and of the nn modules sets around one call);
2. the environment variable ``LIGER_FLCE_MEMORY_BUDGET`` (read at every call, so a launcher can
   set it for a whole run, e.g. ``bench_e2e.py``);
3. the vendor's default, ``hardware.FUSED_LINEAR_MEMORY_BUDGET`` of its package.

A budget is a positive int of bytes, or a string: ``"536870912"``, ``"512MiB"``, ``"1GiB"``,
``"64 KiB"``, ``"500MB"`` (binary KiB/MiB/GiB, decimal KB/MB/GB, plain bytes B).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
import re
from collections.abc import Callable, Iterator
from contextvars import ContextVar

MEMORY_BUDGET_ENV = "LIGER_FLCE_MEMORY_BUDGET"

_UNITS = {
    "": 1,
    "b": 1,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
}
_PATTERN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")
_EXPECTED = 'a positive number of bytes: an int, or a string such as "536870912", "512MiB", "1GiB" or "500MB"'

_override: ContextVar[int | None] = ContextVar("liger_fused_linear_memory_budget", default=None)


def parse_memory_budget(value: int | str, name: str = "memory_budget") -> int:
    """``value`` as bytes (see the module docstring for the forms accepted). ``name`` is what the
    error message calls the value (an argument, or the environment variable)."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise TypeError(f"{name} must be {_EXPECTED}; got {type(value).__name__} {value!r}")
    if isinstance(value, int):
        n = value
    else:
        m = _PATTERN.match(value)
        unit = m.group(2).lower() if m else None
        if m is None or unit not in _UNITS:
            raise ValueError(f"{name} must be {_EXPECTED}; got {value!r}")
        n = int(float(m.group(1)) * _UNITS[unit])
    if n < 1:
        raise ValueError(f"{name} must be {_EXPECTED}; got {value!r} ({n} bytes)")
    return n


@functools.lru_cache(maxsize=8)
def _env_budget(text: str) -> int:
    return parse_memory_budget(text, MEMORY_BUDGET_ENV)


@contextlib.contextmanager
def fused_linear_memory_budget(budget: int | str | None) -> Iterator[None]:
    """Within the block, the fused linear losses keep their chunk buffers within ``budget`` bytes
    (None: no change). The forward reads it; a backward that recomputes chunks reuses the plan the
    forward made."""
    if budget is None:
        yield
        return
    token = _override.set(parse_memory_budget(budget))
    try:
        yield
    finally:
        _override.reset(token)


def takes_memory_budget(fn: Callable) -> Callable:
    """``fn`` with one more keyword-only argument, ``memory_budget`` (bytes, a string such as
    ``"512MiB"``, or None: the budget already in force), that holds for the one call. Under
    torch.compile, pass None and set the budget outside the compiled code (or by the environment
    variable): a context entered inside a graph would break it."""

    @functools.wraps(fn)
    def call(*args, memory_budget: int | str | None = None, **kwargs):
        if memory_budget is None:
            return fn(*args, **kwargs)
        with fused_linear_memory_budget(memory_budget):
            return fn(*args, **kwargs)

    sig = inspect.signature(fn)
    extra = inspect.Parameter(
        "memory_budget", inspect.Parameter.KEYWORD_ONLY, default=None, annotation="int | str | None"
    )
    call.__signature__ = sig.replace(parameters=[*sig.parameters.values(), extra])
    return call


def module_memory_budget(module: str, budget: int | str | None) -> int | None:
    """A module's ``memory_budget`` constructor argument, checked now (None: the budget in force
    at each call), as bytes."""
    return None if budget is None else parse_memory_budget(budget, f"{module}: memory_budget")


def current_memory_budget(default: int | None) -> int | None:
    """The budget in force (context, then ``LIGER_FLCE_MEMORY_BUDGET``, then ``default``: the
    calling vendor's ``hardware.FUSED_LINEAR_MEMORY_BUDGET``, which may be None where a vendor
    keeps a rule of its own), in bytes."""
    chosen = _override.get()
    if chosen is not None:
        return chosen
    text = os.environ.get(MEMORY_BUDGET_ENV)
    if text:
        return _env_budget(text)
    return default


def budget_is_set() -> bool:
    """Whether a call, module or the environment chose a budget (else the vendor default applies)."""
    return _override.get() is not None or bool(os.environ.get(MEMORY_BUDGET_ENV))


def chunk_rows(n_rows: int, bytes_per_row: int, budget: int, row_multiple: int) -> int:
    """Rows per chunk whose buffers (``bytes_per_row`` each) fit ``budget`` bytes.

    Rounded down to a multiple of ``row_multiple`` (the GEMM tile the vendor's matmuls run
    fastest with: a ragged row count leaves a partly empty tile in every chunk's three GEMMs)
    whenever the budget holds that many rows. A budget below one tile of rows still works: as
    many whole rows as fit, and at least one (a budget smaller than one row is exceeded by that
    one row rather than refused). Never more rows than there are (the buffer would be wasted)."""
    if n_rows < 1:
        return 1
    rows = budget // max(bytes_per_row, 1)
    if rows >= row_multiple:
        rows -= rows % row_multiple
    return max(1, min(rows, n_rows))


def logits_budget_elements(default: int, bytes_per_element: int) -> int:
    """The budget in force (``default`` bytes if none is set) as a number of logits, each costing
    ``bytes_per_element`` bytes of chunk buffers: for the drivers that plan whole sequences or
    pairs per chunk."""
    return max(1, (current_memory_budget(default) or default) // max(bytes_per_element, 1))


def logits_budget(default_elements: int, bytes_per_logit: int) -> int:
    """Logits per chunk for the drivers that plan whole sequences or pairs: ``default_elements`` (the
    vendor's hardware value for the op) unless a call, module or the environment set a budget, else that
    budget divided by ``bytes_per_logit``."""
    if budget_is_set():
        return logits_budget_elements(0, bytes_per_logit)
    return default_elements


__all__ = [
    "MEMORY_BUDGET_ENV",
    "budget_is_set",
    "chunk_rows",
    "current_memory_budget",
    "fused_linear_memory_budget",
    "logits_budget",
    "logits_budget_elements",
    "module_memory_budget",
    "parse_memory_budget",
    "takes_memory_budget",
]
