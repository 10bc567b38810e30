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
import re
import tempfile
import traceback
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

WORLD = 2

CASES = (
    "rms_norm-seq",
    "rms_norm-batch-gemma",
    "rms_norm-replicated",
    "fused_add_rms_norm-seq",
    "layer_norm-seq",
    "swiglu-colwise",
    "geglu-colwise",
    "rope-heads",
    "rope-heads-unsqueeze2",
)
# The error each refused placement raises: (type, message pattern naming the argument).
ERRORS = {
    "rms_norm-x-last-dim": ("ValueError", r"rms_norm: x is Shard\(dim=2\) on mesh dim 0, along dim 2"),
    "rms_norm-weight-sharded": ("ValueError", r"rms_norm: weight must be replicated.*Shard\(dim=0\)"),
    "rms_norm-x-partial": ("ValueError", r"rms_norm: x is Partial\(sum\).*pending a reduction"),
    "rms_norm-plain-weight-requires-grad": ("TypeError", r"rms_norm: weight requires grad but is a plain tensor"),
    "fused_add_rms_norm-misaligned": ("ValueError", r"x and residual combine elementwise and must be sharded alike"),
    "swiglu-misaligned": ("ValueError", r"swiglu: a and b .*sharded alike; got a.placements=\(Shard\(dim=2\),\)"),
    "swiglu-plain-b": ("TypeError", r"swiglu: b is a plain tensor while a is a DTensor"),
    "rope-seq-sharded": ("ValueError", r"rope: q is Shard\(dim=2\) on mesh dim 0, along dim 2"),
    "layer_norm-bias-sharded": ("ValueError", r"layer_norm: bias must be replicated"),
}


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


# -- the checks, shared by tests/test_tensor_parallel.py and tests/hf/test_tp_models.py --------


def check_case(results: dict, name: str) -> None:
    """The parallel run's outputs and gradients equal one process's (float32, rtol = atol = 1e-5:
    each rank computes whole rows; only the weight gradients' sums over rows are split)."""
    single, parallel = results[name]["single"], results[name]["parallel"]
    assert set(single) == set(parallel)
    for key in single:
        torch.testing.assert_close(parallel[key], single[key], rtol=1e-5, atol=1e-5, msg=lambda m: f"{name} {key}: {m}")


def check_placements(results: dict) -> None:
    """A norm weight's gradient from sequence-sharded rows is Partial(sum), as torch's own
    RMSNorm gives it on the same placements; from replicated rows, Replicate. The inputs'
    gradients keep the inputs' placements."""
    torch_seq = results["torch_rms_norm-seq"]["placements"]["weight"]
    assert torch_seq == "(Partial(sum),)"
    for name in ("rms_norm-seq", "rms_norm-batch-gemma", "fused_add_rms_norm-seq"):
        assert results[name]["placements"]["weight"] == torch_seq, name
    # Inputs sharded over uneven shards (7 rows on 2 ranks): their gradients stay sharded, as torch's own
    # RMSNorm returns them (not Replicate, which costs an all-gather per backward).
    assert results["torch_rms_norm-seq"]["placements"]["x"] == "(Shard(dim=1),)"
    assert results["rms_norm-seq"]["placements"]["x"] == "(Shard(dim=1),)"
    assert results["rms_norm-batch-gemma"]["placements"]["x"] == "(Shard(dim=0),)"
    assert results["fused_add_rms_norm-seq"]["placements"] == {
        "x": "(Shard(dim=1),)",
        "residual": "(Shard(dim=1),)",
        "weight": torch_seq,
    }
    assert results["layer_norm-seq"]["placements"] == {"x": "(Shard(dim=1),)", "weight": torch_seq, "bias": torch_seq}
    assert results["rms_norm-replicated"]["placements"]["weight"] == "(Replicate(),)"
    assert results["swiglu-colwise"]["placements"] == {"a": "(Shard(dim=2),)", "b": "(Shard(dim=2),)"}
    assert results["rope-heads"]["placements"] == {"q": "(Shard(dim=1),)", "k": "(Shard(dim=1),)"}


def check_error(results: dict, name: str) -> None:
    got = results["errors"][name]
    assert got is not None, f"{name}: no error raised"
    kind, pattern = ERRORS[name]
    assert got[0] == kind and re.search(pattern, got[1]), got
