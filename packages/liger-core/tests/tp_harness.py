"""Two CPU processes over gloo, for the tensor-parallel tests (core and hf).

`spawn(fn)` runs ``fn(mesh)`` on two ranks of a 1-D device mesh and returns rank 0's result;
one spawn costs the two processes' start (a few seconds each on a 2-core machine), so each test
module spawns once and runs all its cases inside.

`op_cases(mesh)` runs every op that declares a sharding on whole tensors in one process and on
DTensors placed as a parallel plan places them, and returns both sides' outputs and gradients as
whole tensors (plus the placements of the gradients, and the errors of the placements the ops
refuse), for the tests to compare.
"""

from __future__ import annotations

import os
import tempfile
import traceback
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

WORLD = 2


def _entry(rank: int, fn: Callable, init_file: str, out_file: str) -> None:
    torch.set_num_threads(1)  # two processes on a 2-core machine
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=WORLD)
    try:
        from torch.distributed.device_mesh import init_device_mesh

        result = fn(init_device_mesh("cpu", (WORLD,)))
        if rank == 0:
            torch.save(result, out_file)
    except BaseException:
        # Spawn reports only that a child failed; keep the traceback.
        traceback.print_exc()
        raise
    finally:
        dist.destroy_process_group()


def spawn(fn: Callable[[Any], Any]) -> Any:
    """``fn(mesh)`` on two gloo ranks (``fn`` importable by name); rank 0's return value."""
    with tempfile.TemporaryDirectory() as tmp:
        init_file, out_file = os.path.join(tmp, "init"), os.path.join(tmp, "out.pt")
        mp.spawn(_entry, args=(fn, init_file, out_file), nprocs=WORLD, join=True)
        return torch.load(out_file, weights_only=False)


def whole(t: torch.Tensor | None) -> torch.Tensor | None:
    """A DTensor's full value (Partial reduced), a plain tensor as is."""
    from torch.distributed.tensor import DTensor

    if t is None:
        return None
    return (t.full_tensor() if isinstance(t, DTensor) else t).detach().clone()


def run_both(mesh, fn: Callable, args: dict, place: dict, grads: tuple[str, ...], seed: int = 7) -> dict:
    """``fn(**args)`` on whole tensors and on DTensors (``place``: name -> placements; a name left
    out stays a plain tensor); forward, then backward from seeded upstream gradients.

    Returns ``{"single": ..., "parallel": ...}``, each mapping ``out<i>`` and ``grad_<name>`` to
    whole tensors, and ``"placements"``: each parallel gradient's placements (as text).
    """
    from torch.distributed.tensor import DTensor, distribute_tensor

    out: dict[str, Any] = {"placements": {}}
    for side in ("single", "parallel"):
        a = {}
        for name, v in args.items():
            if isinstance(v, torch.Tensor):
                t = v.detach().clone()
                if side == "parallel" and name in place:
                    t = distribute_tensor(t, mesh, place[name])
                a[name] = t.requires_grad_(name in grads)
            else:
                a[name] = v
        res = fn(**a)
        outs = res if isinstance(res, tuple) else (res,)
        g = torch.Generator().manual_seed(seed)
        ups = []
        for o in outs:
            up = torch.randn(o.shape, generator=g, dtype=o.dtype)
            ups.append(distribute_tensor(up, mesh, o.placements) if isinstance(o, DTensor) else up)
        torch.autograd.backward(outs, ups)
        got = {f"out{i}": whole(o) for i, o in enumerate(outs)}
        for name in grads:
            got[f"grad_{name}"] = whole(a[name].grad)
            if side == "parallel" and isinstance(a[name].grad, DTensor):
                out["placements"][name] = str(tuple(a[name].grad.placements))
        out[side] = got
    return out


def error_of(fn: Callable[[], Any]) -> tuple[str, str] | None:
    """The exception ``fn()`` raises, as (type name, message); None when it raises none."""
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - the test reads the type and message
        return type(e).__name__, str(e)
    return None


def op_cases(mesh) -> dict[str, Any]:
    """Every op with a sharding, placed as the parallel plans place it (see the module docstring)."""
    from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor

    from liger_core import functional as F

    g = torch.Generator().manual_seed(0)

    def rand(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g)

    R, S1, S2 = [Replicate()], [Shard(1)], [Shard(2)]
    # Sequence 7: an uneven split (4 + 3 rows per rank), as a real sequence length may give.
    B, T, H = 2, 7, 16
    cases: dict[str, Any] = {}
    w = rand(H) + 1
    cases["rms_norm-seq"] = run_both(
        mesh, F.liger_rms_norm, {"x": rand(B, T, H), "weight": w}, {"x": S1, "weight": R}, ("x", "weight")
    )
    cases["rms_norm-batch-gemma"] = run_both(
        mesh,
        F.liger_rms_norm,
        {"x": rand(B * 2, T, H), "weight": w, "offset": 1.0, "casting_mode": "gemma"},
        {"x": [Shard(0)], "weight": R},
        ("x", "weight"),
    )
    cases["rms_norm-replicated"] = run_both(
        mesh, F.liger_rms_norm, {"x": rand(B, T, H), "weight": w}, {"x": R, "weight": R}, ("x", "weight")
    )
    # torch's own RMSNorm on the same placements: the weight gradient's placement ours must match.
    cases["torch_rms_norm-seq"] = run_both(
        mesh,
        lambda x, weight: torch.nn.functional.rms_norm(x, (H,), weight, 1e-6),
        {"x": rand(B, T, H), "weight": w},
        {"x": S1, "weight": R},
        ("x", "weight"),
    )
    cases["fused_add_rms_norm-seq"] = run_both(
        mesh,
        F.liger_fused_add_rms_norm,
        {"x": rand(B, T, H), "residual": rand(B, T, H), "weight": w},
        {"x": S1, "residual": S1, "weight": R},
        ("x", "residual", "weight"),
    )
    cases["layer_norm-seq"] = run_both(
        mesh,
        F.liger_layer_norm,
        {"x": rand(B, T, H), "weight": w, "bias": rand(H)},
        {"x": S1, "weight": R, "bias": R},
        ("x", "weight", "bias"),
    )
    for op in ("swiglu", "geglu"):
        fn = getattr(F, f"liger_{op}")
        # Colwise gate/up projections shard the intermediate (last) dim.
        cases[f"{op}-colwise"] = run_both(
            mesh, fn, {"a": rand(B, T, 12), "b": rand(B, T, 12)}, {"a": S2, "b": S2}, ("a", "b")
        )
    # Colwise q/k projections shard the heads; cos/sin come whole from the rotary embedding (one
    # as a plain tensor, as transformers passes it, one as a replicated DTensor).
    D = 8
    cases["rope-heads"] = run_both(
        mesh,
        F.liger_rope,
        {"q": rand(B, 4, T, D), "k": rand(B, 2, T, D), "cos": rand(B, T, D), "sin": rand(B, T, D)},
        {"q": S1, "k": S1, "cos": R},
        ("q", "k"),
    )
    cases["rope-heads-unsqueeze2"] = run_both(
        mesh,
        F.liger_rope,
        {"q": rand(B, T, 4, D), "k": rand(B, T, 2, D), "cos": rand(B, T, D), "sin": rand(B, T, D), "unsqueeze_dim": 2},
        {"q": S2, "k": S2},
        ("q", "k"),
    )

    # Placements the ops refuse, each with the error it raises.
    def dt(t: torch.Tensor, placements, grad: bool = False) -> DTensor:
        return distribute_tensor(t, mesh, placements).requires_grad_(grad)

    x, wd = rand(B, T, H), dt(w, R)
    errors = {
        "rms_norm-x-last-dim": lambda: F.liger_rms_norm(dt(x, S2), wd),
        "rms_norm-weight-sharded": lambda: F.liger_rms_norm(dt(x, S1), dt(w, [Shard(0)])),
        "rms_norm-x-partial": lambda: F.liger_rms_norm(DTensor.from_local(x, mesh, [Partial()]), wd),
        "rms_norm-plain-weight-requires-grad": lambda: F.liger_rms_norm(dt(x, S1), w.clone().requires_grad_()),
        "fused_add_rms_norm-misaligned": lambda: F.liger_fused_add_rms_norm(dt(x, S1), dt(x, [Shard(0)]), wd),
        "swiglu-misaligned": lambda: F.liger_swiglu(dt(x, S2), dt(x, S1)),
        "swiglu-plain-b": lambda: F.liger_swiglu(dt(x, S2), x),
        "rope-seq-sharded": lambda: F.liger_rope(
            dt(rand(B, 4, T, D), [Shard(2)]), dt(rand(B, 2, T, D), S1), rand(B, T, D), rand(B, T, D)
        ),
        "layer_norm-bias-sharded": lambda: F.liger_layer_norm(dt(x, S1), wd, dt(rand(H), [Shard(0)])),
    }
    cases["errors"] = {name: error_of(fn) for name, fn in errors.items()}
    return cases
