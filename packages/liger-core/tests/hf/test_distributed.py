"""Patched models under sharded data parallelism: two processes on CPU over gloo.

A tiny patched LLaMA is trained for a few AdamW steps, each of two ranks taking one row of
every batch, under:

- ``fsdp2``: ``fully_shard`` on the embeddings, each decoder layer, the LM head and the root,
  ``reshard_after_forward=True``: the LM head's weight is a sharded DTensor outside its own call;
- ``fsdp1_head_unit``: FSDP1 (``use_orig_params=True``) with each decoder layer and the LM head
  a unit of their own, the rest in the root: the head's weight is a flat shard view outside its call;
- ``fsdp1_root``: FSDP1 (``use_orig_params=False``), one unit for the whole model: the head's
  weight is unsharded while the root's forward runs (FSDP1 gathers no gradients with
  ``use_orig_params=False``: losses and final parameters only);
- ``zero3``: DeepSpeed ZeRO-3 (``DS_ACCELERATOR=cpu``, every parameter partitioned), where
  deepspeed is installed (the ``hf-deepspeed`` nox session; ``LIGER_HF_DEEPSPEED=1`` makes its
  absence a failure).

All selected scenarios run in one pair of spawned processes (one start-up of torch and transformers each).

Each rank's loss is its sum over the global number of target tokens (``num_items_in_batch``)
times the world size, as transformers' Trainer computes it with ``average_tokens_across_devices``:
the wrappers average gradients over ranks, so the result is the one-process loss of the whole
batch. Compared with one process (patched) and with stock transformers: the loss of every step,
every gradient of the first step and every final parameter, gathered, at fp32 tolerances
(summation order only). Every step asserts the fused path ran: no logits, the LM head's
hooks fired for the loss (the call went through the wrapper), no stock fallback warning.
"""

from __future__ import annotations

import datetime
import importlib.util
import os
import traceback
import warnings

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as torch_mp
from hf_models import SIZES, batches, build, stock_transformers

from liger_core.transformers import apply_liger_kernel_to_llama
from liger_core.transformers.layers import LigerStockFallbackWarning

pytestmark = pytest.mark.skipif(
    not dist.is_available() or not dist.is_gloo_available(), reason="this torch build has no gloo process group"
)

TINY = SIZES["tiny"]
WORLD = 2
STEPS = 3
LR = 3e-3
# fp32: the sharded runs differ from one process only in summation order (gradient reduction over ranks,
# per-row versus per-batch sums).
LOSS_TOL = dict(atol=1e-5, rtol=1e-5)
GRAD_TOL = dict(atol=1e-6, rtol=1e-4)
PARAM_TOL = dict(atol=1e-5, rtol=1e-4)
SCENARIOS = ("fsdp2", "fsdp1_head_unit", "fsdp1_root", "zero3")
HAVE_DEEPSPEED = importlib.util.find_spec("deepspeed") is not None


def _data() -> list[dict[str, torch.Tensor]]:
    data = batches(TINY, STEPS, "cpu")
    for batch in data:
        # Target tokens of the whole batch (labels shifted by one), as the Trainer counts them across ranks.
        batch["num_items_in_batch"] = (batch["labels"][:, 1:] != -100).sum()
    return data


def _strip(name: str) -> str:
    # FSDP1 and DeepSpeed name parameters through their wrappers.
    for prefix in ("_fsdp_wrapped_module.", "module."):
        name = name.replace(prefix, "")
    return name


def _single(patched: bool) -> dict:
    """One process, the whole batch: losses, first-step gradients, final parameters."""
    data = _data()
    if patched:
        apply_liger_kernel_to_llama()
        model = build("llama", TINY, torch.float32, "cpu")
        return _train(model, data, rank=0)
    with stock_transformers(lambda: None):
        model = build("llama", TINY, torch.float32, "cpu")
        return _train(model, data, rank=0)


def _train(model, data, rank: int, world: int = 1, engine=None, grads=None, params=None) -> dict:
    """AdamW steps on this rank's rows; (summed over ranks) losses, gathered first-step gradients and final params."""
    opt = None if engine is not None else torch.optim.AdamW(model.parameters(), lr=LR, eps=1e-6)
    model.train()
    losses, first_grads, fused = [], None, []
    for batch in data:
        rows = slice(rank, rank + 1) if world > 1 else slice(None)
        out = model(
            input_ids=batch["input_ids"][rows],
            labels=batch["labels"][rows],
            num_items_in_batch=batch["num_items_in_batch"],
        )
        fused.append(out.logits is None)
        loss = out.loss * world  # the wrappers average gradients over ranks
        if engine is not None:
            engine.backward(loss)
        else:
            loss.backward()
        reported = loss.detach().clone() / world
        if world > 1:
            dist.all_reduce(reported)
        losses.append(reported.item())
        if first_grads is None:
            first_grads = grads() if grads is not None else {n: p.grad.clone() for n, p in model.named_parameters()}
        if engine is not None:
            engine.step()
        else:
            opt.step()
            opt.zero_grad(set_to_none=True)
    final = params() if params is not None else {n: p.detach().clone() for n, p in model.named_parameters()}
    return {"losses": losses, "grads": first_grads, "params": final, "fused": fused}


def _count_head_calls(head, counter: list[int]) -> None:
    # Fires only where the loss runs through the head's own call (the sharding wrappers' hooks fire there too).
    head.register_forward_pre_hook(lambda module, args: counter.append(1))


def _run_fsdp2(rank: int) -> tuple[dict, list[int]]:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    model = build("llama", TINY, torch.float32, "cpu")
    mesh = init_device_mesh("cpu", (WORLD,))
    for module in (model.model.embed_tokens, *model.model.layers, model.lm_head):
        fully_shard(module, mesh=mesh, reshard_after_forward=True)
    fully_shard(model, mesh=mesh, reshard_after_forward=True)
    calls: list[int] = []
    _count_head_calls(model.lm_head, calls)

    def full(tensors):
        return {n: t.full_tensor().clone() for n, t in tensors}

    result = _train(
        model,
        _data(),
        rank,
        WORLD,
        grads=lambda: full((n, p.grad) for n, p in model.named_parameters()),
        params=lambda: full((n, p.detach()) for n, p in model.named_parameters()),
    )
    return result, calls


def _run_fsdp1(rank: int, head_unit: bool) -> tuple[dict, list[int]]:
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    model = build("llama", TINY, torch.float32, "cpu")
    layer_cls = type(model.model.layers[0])
    head = model.lm_head

    def policy(module, recurse, nonwrapped_numel):
        return True if recurse else isinstance(module, layer_cls) or module is head

    wrapped = FSDP(
        model,
        auto_wrap_policy=policy if head_unit else None,
        use_orig_params=head_unit,
        device_id=torch.device("cpu"),
    )
    calls: list[int] = []
    if head_unit:
        _count_head_calls(wrapped.module.lm_head, calls)

    def gathered(with_grads: bool):
        with FSDP.summon_full_params(wrapped, with_grads=with_grads, writeback=False):
            return {_strip(n): (p.grad if with_grads else p.detach()).clone() for n, p in wrapped.named_parameters()}

    # FSDP1 gathers gradients only with use_orig_params=True; the one-unit run is checked by its losses and
    # final parameters (which every step's gradients move).
    grads = (lambda: gathered(True)) if head_unit else dict
    result = _train(wrapped, _data(), rank, WORLD, grads=grads, params=lambda: gathered(False))
    return result, calls


def _run_zero3(rank: int) -> tuple[dict, list[int]]:
    import deepspeed
    import deepspeed.comm.torch

    # DeepSpeed's CPU accelerator compiles a shared-memory all-reduce extension at start (minutes on two cores);
    # gloo's collectives serve this test, so it is left unbuilt.
    deepspeed.comm.torch.build_shm_op = lambda: None
    deepspeed.init_distributed(dist_backend="gloo")

    model = build("llama", TINY, torch.float32, "cpu")
    config = {
        "train_micro_batch_size_per_gpu": 1,
        "gradient_accumulation_steps": 1,
        "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0},
        "optimizer": {"type": "AdamW", "params": {"lr": LR, "eps": 1e-6, "weight_decay": 0.01, "torch_adam": True}},
        "gradient_clipping": 0.0,
        "steps_per_print": 10**9,
    }
    engine, *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)
    calls: list[int] = []
    _count_head_calls(engine.module.lm_head, calls)
    from deepspeed.utils import safe_get_full_fp32_param, safe_get_full_grad

    def full(get):
        return {n: get(p).clone() for n, p in engine.module.named_parameters()}

    result = _train(
        engine,
        _data(),
        rank,
        WORLD,
        engine=engine,
        grads=lambda: full(safe_get_full_grad),
        params=lambda: full(safe_get_full_fp32_param),
    )
    return result, calls


def _worker(rank: int, scenarios: tuple[str, ...], init_file: str, out: str) -> None:
    """One rank: every scenario in turn; rank 0 saves {scenario: result, or the traceback where it failed}."""
    torch.set_num_threads(1)
    # DeepSpeed reads these (and picks its accelerator at import); the FSDP runs ignore them.
    os.environ.update(
        RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(WORLD), LOCAL_WORLD_SIZE=str(WORLD), DS_ACCELERATOR="cpu"
    )
    dist.init_process_group(
        "gloo", init_method=f"file://{init_file}", rank=rank, world_size=WORLD, timeout=datetime.timedelta(seconds=300)
    )
    results: dict[str, dict | str] = {}
    try:
        apply_liger_kernel_to_llama()
        for scenario in scenarios:
            try:
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always", LigerStockFallbackWarning)
                    if scenario == "fsdp2":
                        result, calls = _run_fsdp2(rank)
                    elif scenario == "zero3":
                        result, calls = _run_zero3(rank)
                    else:
                        result, calls = _run_fsdp1(rank, head_unit=scenario == "fsdp1_head_unit")
            except Exception:
                # The ranks may now be out of step in their collectives: the remaining scenarios are not run.
                results[scenario] = traceback.format_exc()
                break
            result["head_calls"] = len(calls)
            result["fallbacks"] = [str(w.message) for w in caught if issubclass(w.category, LigerStockFallbackWarning)]
            results[scenario] = result
    finally:
        if rank == 0:
            torch.save(results, out)
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def distributed(request, tmp_path_factory) -> dict[str, dict | str]:
    """Every selected scenario, in one pair of spawned processes (each process start imports torch and
    transformers, so one start serves them all)."""
    tmp = tmp_path_factory.mktemp("distributed")
    out = str(tmp / "results.pt")
    selected = {item.callspec.params.get("scenario") for item in request.session.items if hasattr(item, "callspec")}
    scenarios = tuple(s for s in SCENARIOS if s in selected and (s != "zero3" or HAVE_DEEPSPEED))
    try:
        torch_mp.spawn(_worker, args=(scenarios, str(tmp / "pg"), out), nprocs=WORLD, join=True)
    except torch_mp.ProcessRaisedException:
        pass  # rank 0 saved what each scenario gave, the traceback included; the tests report it
    return torch.load(out, weights_only=False)


@pytest.fixture(scope="module")
def single() -> dict[str, dict]:
    return {"patched": _single(patched=True), "stock": _single(patched=False)}


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_sharded_training_matches_one_process(scenario, distributed, single):
    if scenario == "zero3" and not HAVE_DEEPSPEED:
        if os.environ.get("LIGER_HF_DEEPSPEED") == "1":  # the hf-deepspeed session installs it: no skip there
            pytest.fail("LIGER_HF_DEEPSPEED=1 but deepspeed is not importable")
        pytest.skip("deepspeed is not installed here (the hf-deepspeed nox session runs this case)")
    got = distributed.get(scenario, "not run: an earlier scenario failed (see its test)")
    if isinstance(got, str):
        pytest.fail(f"{scenario} failed in the spawned ranks:\n{got}")
    assert all(got["fused"]), "every step must take the fused loss (logits None)"
    assert got["fallbacks"] == [], got["fallbacks"]
    if scenario != "fsdp1_root":
        # The head is sharded on its own: the loss must have run inside its call, once per step.
        assert got["head_calls"] == STEPS
    for ref_name, ref in single.items():
        torch.testing.assert_close(got["losses"], ref["losses"], **LOSS_TOL, msg=f"losses vs {ref_name}")
        if scenario != "fsdp1_root":
            assert sorted(got["grads"]) == sorted(ref["grads"])
        for name, grad in ref["grads"].items() if got["grads"] else ():
            torch.testing.assert_close(got["grads"][name], grad, **GRAD_TOL, msg=f"{name} grad vs {ref_name}")
        for name, param in ref["params"].items():
            torch.testing.assert_close(got["params"][name], param, **PARAM_TOL, msg=f"{name} vs {ref_name}")


def test_single_process_references_agree_stock_and_patched(single):
    """The two references themselves: patched one-process training equals stock (so a sharded run equal to
    one is equal to both), and the patched one took the fused path."""
    assert all(single["patched"]["fused"]) and not any(single["stock"]["fused"])
    torch.testing.assert_close(single["patched"]["losses"], single["stock"]["losses"], **LOSS_TOL)


def test_a_partitioned_head_is_gathered_by_its_own_call():
    """In one process, a head that holds its weight only inside its call, as ZeRO-3 does (an empty partition
    outside, marked with ``ds_id``; a forward pre-hook gathers it): the fused loss runs inside that call, equals
    stock's in loss and every gradient, and the head's forward is its class's again afterwards."""
    stock = build("llama", TINY, torch.float32, "cpu")
    state = stock.state_dict()
    apply_liger_kernel_to_llama()
    patched = build("llama", TINY, torch.float32, "cpu", state)
    head = patched.lm_head
    full = head.weight.detach().clone()
    head.weight.data = torch.empty(0)
    head.weight.ds_id = 0
    gathered = []

    def gather(module, args):
        module.weight.data = full
        gathered.append(module.weight.shape)

    head.register_forward_pre_hook(gather)
    batch = batches(TINY, 1, "cpu")[0]
    patched.train(), stock.train()
    out = patched(**batch)
    assert out.logits is None and gathered == [full.shape]
    assert "forward" not in head.__dict__, "the head's forward redirection outlived its call"
    with stock_transformers(apply_liger_kernel_to_llama):
        ref = stock(**batch)
        ref.loss.backward()
    out.loss.backward()
    torch.testing.assert_close(out.loss, ref.loss, **LOSS_TOL)
    ref_grads = dict(stock.named_parameters())
    for name, p in patched.named_parameters():
        torch.testing.assert_close(p.grad, ref_grads[name].grad, **GRAD_TOL, msg=name)
