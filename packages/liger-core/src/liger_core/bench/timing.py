"""Timers and peak memory, per device.

Timers (what each row's ``timer`` field names):
- ``cudagraph``: `triton.testing.do_bench_cudagraph`: the call captured in a CUDA graph and
  replayed, so host launch overhead (about 30 us per call on the lab hosts, more than many
  kernels take) drops out. The default on CUDA. A call that cannot be captured (a host sync
  inside it) is timed with ``do_bench`` instead and the row says so.
- ``do_bench``: `triton.testing.do_bench` (L2 flushed between calls; host overhead included
  when it exceeds the kernel time). The default on other devices Triton drives.
- ``wall``: no Triton needed (liger-core never depends on it): each call timed on the host
  clock with a device sync after it. The default on CPU and where Triton is absent.

All return the 20th, 50th and 80th percentiles in milliseconds.
"""

from __future__ import annotations

import gc
import importlib.util
import statistics
import time
from collections.abc import Callable, Sequence

import torch

QUANTILES = (0.2, 0.5, 0.8)
TIMERS = ("auto", "cudagraph", "do_bench", "wall")


def has_triton() -> bool:
    return importlib.util.find_spec("triton") is not None


def default_timer(device_type: str) -> str:
    if device_type == "cpu" or not has_triton():
        return "wall"
    return "cudagraph" if device_type == "cuda" else "do_bench"


def resolve_timer(timer: str, device_type: str) -> str:
    """The timer ``timer`` means on ``device_type``; ValueError when it cannot run there."""
    if timer not in TIMERS:
        raise ValueError(f"timer must be one of {', '.join(TIMERS)}; got {timer!r}")
    if timer == "auto":
        return default_timer(device_type)
    if timer in ("cudagraph", "do_bench"):
        if not has_triton():
            raise ValueError(f"timer {timer!r} needs Triton, which is not installed; use --timer wall")
        if device_type == "cpu":
            raise ValueError(f"timer {timer!r} needs an accelerator; on cpu use --timer wall")
        if timer == "cudagraph" and device_type != "cuda":
            raise ValueError(f"timer 'cudagraph' needs CUDA; the device is {device_type!r}")
    return timer


def device_module(device_type: str):
    """torch.cuda / torch.npu / torch.xpu, or None for the CPU."""
    return None if device_type == "cpu" else getattr(torch, device_type, None)


def synchronize(device_type: str) -> None:
    mod = device_module(device_type)
    if mod is not None:
        mod.synchronize()


def free_memory(device_type: str) -> None:
    gc.collect()
    mod = device_module(device_type)
    if mod is not None and hasattr(mod, "empty_cache"):
        mod.empty_cache()


def restore_default_generator(device_type: str) -> bool:
    """Make the current CUDA device's default generator usable again after a failed graph capture.

    A capture puts the default generator's state in capture mode, and only a capture that ends
    cleanly takes it out (PyTorch before per-capture RNG state, 2.11 among them). After a failed
    one, every eager random op on the default generator raises "Offset increment outside graph
    capture", and re-seeding does not help (the seed is not the stuck part). Moving the seed and
    offset into a fresh state object (``graphsafe_set_state``) does: the random stream continues
    where it was, out of capture mode; the failed graph still holds, and releases, the old state.
    A no-op (False) off CUDA, on a PyTorch without that API, or when the generator works.
    """
    if device_type != "cuda" or not torch.cuda.is_available():
        return False
    idx = torch.cuda.current_device()  # first: it initialises CUDA, which fills default_generators
    gen = torch.cuda.default_generators[idx]
    if not hasattr(gen, "graphsafe_set_state"):
        return False
    try:
        torch.empty(1, device=gen.device).uniform_(generator=gen)  # raises only while stuck
        return False
    except RuntimeError:
        pass
    fresh = torch.Generator(device=gen.device)
    fresh.set_state(gen.get_state())  # seed and offset; reading them works while stuck
    gen.graphsafe_set_state(fresh.graphsafe_get_state())  # the default generator now holds fresh's state
    torch.empty(1, device=gen.device).uniform_(generator=gen)  # raises if that did not help
    return True


def peak_memory_mb(call: Callable[[], object], device_type: str) -> float | None:
    """Peak device memory one call allocates above what was allocated before it, in MiB.

    None on the CPU (no allocator statistics there).
    """
    mod = device_module(device_type)
    if mod is None or not hasattr(mod, "max_memory_allocated"):
        return None
    synchronize(device_type)
    mod.reset_peak_memory_stats()
    base = mod.memory_allocated()
    call()
    synchronize(device_type)
    return (mod.max_memory_allocated() - base) / 2**20


def _quantiles(samples: Sequence[float]) -> tuple[float, float, float]:
    if len(samples) == 1:
        return samples[0], samples[0], samples[0]
    cuts = statistics.quantiles(samples, n=10, method="inclusive")  # deciles: cuts[1] = p20 ...
    return cuts[1], statistics.median(samples), cuts[7]


def wall_time(
    call: Callable[[], object],
    device_type: str,
    reset: Callable[[], None] = lambda: None,
    warmup: int = 2,
    rep_ms: float = 100.0,
    min_reps: int = 5,
    max_reps: int = 1000,
) -> tuple[float, float, float]:
    """Host clock around each call, with a device sync; ``reset`` runs untimed before each call."""
    for _ in range(warmup):
        reset()
        call()
    synchronize(device_type)
    samples: list[float] = []
    spent = 0.0
    while len(samples) < min_reps or (spent < rep_ms and len(samples) < max_reps):
        reset()
        t0 = time.perf_counter()
        call()
        synchronize(device_type)
        ms = (time.perf_counter() - t0) * 1e3
        samples.append(ms)
        spent += ms
    return _quantiles(samples)


def triton_time(
    call: Callable[[], object],
    timer: str,
    grad_to_none: Sequence[torch.Tensor],
    warmup_ms: int = 25,
    rep_ms: int = 100,
) -> tuple[float, float, float]:
    from triton.testing import do_bench, do_bench_cudagraph

    if timer == "cudagraph":
        out = do_bench_cudagraph(call, rep=rep_ms, grad_to_none=list(grad_to_none), quantiles=list(QUANTILES))
    else:
        out = do_bench(call, warmup=warmup_ms, rep=rep_ms, grad_to_none=list(grad_to_none), quantiles=list(QUANTILES))
    return tuple(float(v) for v in out)  # type: ignore[return-value]


def device_name(device: torch.device) -> str:
    mod = device_module(device.type)
    if mod is not None and hasattr(mod, "get_device_name"):
        try:
            return str(mod.get_device_name(device))
        except Exception:  # noqa: BLE001 - a name is a label; never fail the run over it
            pass
    import platform

    return platform.processor() or platform.machine() or device.type
