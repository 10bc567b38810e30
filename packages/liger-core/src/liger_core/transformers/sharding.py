"""The LM head under sharded data parallelism: FSDP2, FSDP1 and DeepSpeed ZeRO-3.

The fused linear cross-entropy reads the LM head's weight itself instead of calling the head.
Where a wrapper shards that weight, the full matrix exists only while the head's own call runs:
FSDP2 (``fully_shard(lm_head)``) and FSDP1 (lm_head its own ``FullyShardedDataParallel``
unit) unshard it in their pre-forward hooks and reshard it after; DeepSpeed ZeRO-3 gathers the
partitioned parameter in a forward pre-hook. Their backward machinery (re-gather before
backward, reduce-scatter or partition of the gradient after) is also tied to that call.

`call_head` therefore runs the fused loss *as* the head's forward: the head's ``forward`` is
redirected for that one call, and the call goes through the module (or its FSDP1 wrapper), so
every hook fires as for ``lm_head(hidden)`` and the weight's gradient reaches the shard through
the wrapper's own machinery.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import torch
from torch import nn


def _fsdp2_module_class() -> type | None:
    # A model wrapped by FSDP has imported it: a plain model's forward never pays for importing it.
    if "torch.distributed.fsdp" not in sys.modules:
        return None
    try:
        from torch.distributed.fsdp import FSDPModule
    except ImportError:  # torch releases before FSDP2's public API
        return None
    return FSDPModule


def _fsdp1_class() -> type | None:
    if "torch.distributed.fsdp" not in sys.modules:
        return None
    try:
        from torch.distributed.fsdp import FullyShardedDataParallel
    except ImportError:
        return None
    return FullyShardedDataParallel


def unwrap_head(head: nn.Module) -> tuple[nn.Module, str | None]:
    """(the module computing the head, the sharding wrapper that owns its weight or None).

    The module is ``head`` itself, or the one inside an FSDP1 wrapper. The wrapper named is
    "FSDP1", "FSDP2" (``fully_shard`` applied to the head itself) or "DeepSpeed ZeRO-3" (a
    partitioned weight): a wrapper whose hooks must run around any use of the weight. None
    where the weight is an ordinary tensor (also inside an FSDP unit that holds the whole
    causal LM, whose forward has already unsharded it when the loss reads it).
    """
    fsdp1 = _fsdp1_class()
    if fsdp1 is not None and isinstance(head, fsdp1):
        return head._fsdp_wrapped_module, "FSDP1"
    fsdp2 = _fsdp2_module_class()
    if fsdp2 is not None and isinstance(head, fsdp2):
        return head, "FSDP2"
    weight = getattr(head, "weight", None)
    if weight is not None and hasattr(weight, "ds_id"):  # DeepSpeed's partitioned parameters carry it
        return head, "DeepSpeed ZeRO-3"
    return head, None


def stock_head_class(module: nn.Module) -> type:
    """The head's class before FSDP2 (``fully_shard`` swaps in a subclass ``FSDP<Class>``)."""
    cls = type(module)
    fsdp2 = _fsdp2_module_class()
    if fsdp2 is not None and issubclass(cls, fsdp2):
        bases = [b for b in cls.__bases__ if b is not fsdp2]
        if len(bases) == 1:
            return bases[0]
    return cls


def call_head(head: nn.Module, inner: nn.Module, fn: Callable[[torch.Tensor], torch.Tensor], hidden: torch.Tensor):
    """``fn(hidden)`` run as ``inner``'s forward inside the call ``head(hidden)``.

    ``head`` is what the model holds (``inner`` itself or its FSDP1 wrapper). ``fn`` reads the
    weight from ``inner`` while the wrappers' hooks hold it gathered. The redirection is an
    instance attribute, removed (or the previous one restored) when the call returns.
    """
    had = "forward" in inner.__dict__
    previous = inner.__dict__.get("forward")
    inner.forward = fn
    try:
        return head(hidden)
    finally:
        if had:
            inner.forward = previous
        else:
            del inner.forward
