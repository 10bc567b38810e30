"""Tensor parallelism with the Liger patches: a tiny LLaMA split over two CPU processes (gloo) by
torch's ``parallelize_module``, stock and patched, against the same model in one process: loss
and every parameter's gradient. The per-op cases of tests/test_tensor_parallel.py run here too,
so that the session's backend (liger-ops-cuda's kernels in ``hf-interpreter``) meets DTensors.

The plan is Megatron-style with sequence parallelism (torch's TP tutorial, on HF's module
names): the norms run on sequence shards (``SequenceParallel``: Liger's RMSNorm gets DTensors,
its weight's gradient comes back ``Partial``), attention and MLP projections colwise/rowwise; the
gate/up projections keep DTensor outputs so that SwiGLU gets them sharded on the last dim; the
q/k projections hand local tensors on, as transformers' attention expects, so RoPE runs on each
rank's heads as plain tensors.

Tolerance: float32; ranks add the rowwise projections' partial sums and the norm weights'
gradients in another order than one process does: rtol = atol = 1e-5 for the loss, rtol = atol
= 1e-4 for the gradients.

transformers' own ``tp_plan="auto"`` is not used: on CPU (transformers 5.23, gloo) the model
loads with the plan but its weights stay whole, so it would test nothing.
"""

from __future__ import annotations

import os
import sys

import pytest
import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.dirname(__file__)))  # tp_harness, in tests/
import tp_harness  # noqa: E402
from hf_models import SIZES, batches, build  # noqa: E402

pytestmark = pytest.mark.skipif(
    not dist.is_available() or not dist.is_gloo_available(),
    reason="this torch build has no torch.distributed with gloo",
)

SIZE = SIZES["tiny"]


def llama_plan(model) -> dict:
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        PrepareModuleInput,
        RowwiseParallel,
        SequenceParallel,
    )

    plan = {
        "model.embed_tokens": RowwiseParallel(
            input_layouts=Replicate(), output_layouts=Shard(1), use_local_output=False
        ),
        "model.norm": SequenceParallel(),
        "lm_head": ColwiseParallel(input_layouts=Shard(1), output_layouts=Replicate()),
    }
    for i in range(len(model.model.layers)):
        p = f"model.layers.{i}"
        plan.update(
            {
                f"{p}.input_layernorm": SequenceParallel(),
                f"{p}.self_attn": PrepareModuleInput(
                    input_kwarg_layouts={"hidden_states": Shard(1)},
                    desired_input_kwarg_layouts={"hidden_states": Replicate()},
                ),
                f"{p}.self_attn.q_proj": ColwiseParallel(),
                f"{p}.self_attn.k_proj": ColwiseParallel(),
                f"{p}.self_attn.v_proj": ColwiseParallel(),
                f"{p}.self_attn.o_proj": RowwiseParallel(output_layouts=Shard(1), use_local_output=False),
                f"{p}.post_attention_layernorm": SequenceParallel(),
                f"{p}.mlp": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
                f"{p}.mlp.gate_proj": ColwiseParallel(use_local_output=False),
                f"{p}.mlp.up_proj": ColwiseParallel(use_local_output=False),
                f"{p}.mlp.down_proj": RowwiseParallel(output_layouts=Shard(1), use_local_output=False),
            }
        )
    return plan


def _loss_and_grads(model, batch) -> dict:
    loss = model(**batch).loss
    loss.backward()
    grads = {n: tp_harness.whole(p.grad) for n, p in model.named_parameters()}
    return {"loss": tp_harness.whole(loss), "grads": grads}


def llama_runs(mesh) -> dict:
    """Stock then patched: the loss and gradients of one process and of the TP model."""
    from torch.distributed.tensor.parallel import parallelize_module

    from liger_core import distributed
    from liger_core.transformers import apply_liger_kernel_to_llama, revert_liger_kernel_patches

    # Which ops took the DTensor route (the test checks that the patched norms and SwiGLU did).
    routed: list[str] = []
    call = distributed.call

    def counting(op, args):
        routed.append(op)
        return call(op, args)

    distributed.call = counting

    batch = batches(SIZE, 1, "cpu")[0]
    # The TP model sees every position id: its embeddings are a DTensor of the whole sequence.
    batch["position_ids"] = torch.arange(SIZE.seq).expand(SIZE.batch, -1)
    out = {}
    revert_liger_kernel_patches()
    for kind in ("stock", "patched"):
        if kind == "patched":
            apply_liger_kernel_to_llama(fused_linear_cross_entropy=False)
        single = build("llama", SIZE, torch.float32, "cpu")
        out[f"{kind}-single"] = _loss_and_grads(single, batch)
        model = build("llama", SIZE, torch.float32, "cpu")
        parallelize_module(model, mesh, llama_plan(model))
        out[f"{kind}-tp"] = _loss_and_grads(model, batch)
        out[f"{kind}-classes"] = sorted({type(m).__name__ for m in model.modules()})
        out[f"{kind}-routed"] = sorted(set(routed))
        routed.clear()
    revert_liger_kernel_patches()
    distributed.call = call
    return out


def all_runs(mesh) -> dict:
    # One spawn for the module: the processes' start costs more than the runs.
    return {"ops": tp_harness.op_cases(mesh), "llama": llama_runs(mesh)}


@pytest.fixture(scope="module")
def runs():
    return tp_harness.spawn(all_runs)


@pytest.fixture(scope="module")
def llama(runs):
    return runs["llama"]


@pytest.mark.parametrize("name", tp_harness.CASES)
def test_op_matches_one_process(runs, name):
    tp_harness.check_case(runs["ops"], name)


def test_op_replicated_parameter_gradients(runs):
    tp_harness.check_placements(runs["ops"])


@pytest.mark.parametrize("name", sorted(tp_harness.ERRORS))
def test_op_refused_placements(runs, name):
    tp_harness.check_error(runs["ops"], name)


@pytest.mark.parametrize("kind", ["stock", "patched"])
def test_llama_tp_matches_one_process(llama, kind):
    single, tp = llama[f"{kind}-single"], llama[f"{kind}-tp"]
    torch.testing.assert_close(tp["loss"], single["loss"], rtol=1e-5, atol=1e-5)
    assert set(tp["grads"]) == set(single["grads"])
    for name, g in single["grads"].items():
        torch.testing.assert_close(tp["grads"][name], g, rtol=1e-4, atol=1e-4, msg=lambda m, n=name: f"{n}: {m}")


def test_llama_patched_matches_stock(llama):
    assert any(c.startswith("Liger") for c in llama["patched-classes"]), llama["patched-classes"]
    # The sequence-parallel norms (the MLP's with the residual add, in the patched decoder layer) and the colwise
    # SwiGLU ran Liger's ops on DTensors.
    assert llama["stock-routed"] == []
    assert llama["patched-routed"] == ["fused_add_rms_norm", "rms_norm", "swiglu"]
    torch.testing.assert_close(llama["patched-tp"]["loss"], llama["stock-single"]["loss"], rtol=1e-5, atol=1e-5)
    for name, g in llama["stock-single"]["grads"].items():
        torch.testing.assert_close(
            llama["patched-tp"]["grads"][name], g, rtol=1e-4, atol=1e-4, msg=lambda m, n=name: f"{n}: {m}"
        )
