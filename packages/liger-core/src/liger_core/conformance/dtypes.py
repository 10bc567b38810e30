"""The dtype rules of `liger_core.op` ("Argument errors", "Dtypes"), checked on any backend's
implementation of an op from the op's declaration alone (its ``error_sample``):

- `check_dtype_errors`: each floating argument given as int64 raises TypeError whose message
  starts with the op's name and names the argument;
- `check_mixed_dtypes`: each floating argument given in another floating dtype than the op's
  first one is either accepted, or refused with a TypeError that starts with the op's name and
  names both arguments and both dtypes; the head arguments an op casts
  (`liger_core.ops._checks.CASTS_TO_INPUT_DTYPE`) are accepted with a bfloat16 input and a
  float32 head (mixed-precision training), and the trained head gets float32 gradients.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
import torch

from liger_core.op import Op
from liger_core.ops._checks import CASTS_TO_INPUT_DTYPE


def _floating(args: dict) -> list[str]:
    return [k for k, v in args.items() if isinstance(v, torch.Tensor) and v.is_floating_point()]


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _mentions(message: str, word: str) -> bool:
    return re.search(rf"(?<![\w]){re.escape(word)}(?![\w])", message) is not None


def check_dtype_errors(fn: Callable, decl: Op, device) -> None:
    args = decl.bind(decl.error_sample.args(device))
    for name in _floating(args):
        changed = dict(args, **{name: args[name].detach().to(torch.int64)})
        with pytest.raises(TypeError) as info:
            fn(*changed.values())
        message = str(info.value)
        assert message.startswith(f"{decl.name}: "), f"{name} as int64: the message lacks the op's name: {message!r}"
        assert _mentions(message, name), f"{name} as int64: the message does not name {name}: {message!r}"


def _first_output(out) -> torch.Tensor:
    return out[0] if isinstance(out, (tuple, list)) else out


def check_mixed_dtypes(fn: Callable, decl: Op, device) -> None:
    args = decl.bind(decl.error_sample.args(device))
    floating = _floating(args)
    casts = CASTS_TO_INPUT_DTYPE.get(decl.name, {})
    for name in floating[1:]:
        if name in casts:
            continue
        other = torch.float32 if args[name].dtype == torch.bfloat16 else torch.bfloat16
        changed = dict(args, **{name: args[name].detach().to(other)})
        try:
            fn(*changed.values())
        except TypeError as e:
            message = str(e)
            assert message.startswith(f"{decl.name}: "), f"{name}: the message lacks the op's name: {message!r}"
            named = [k for k in floating if k != name and _mentions(message, k)]
            assert _mentions(message, name) and named, f"{name}: the message must name both arguments: {message!r}"
            for dtype in (args[name].dtype, other):
                like = args[named[0]].dtype if dtype == args[name].dtype else other
                assert _name(like) in message, f"{name}: the message must name both dtypes: {message!r}"
    for name, like in casts.items():
        if not isinstance(args.get(name), torch.Tensor) or not isinstance(args.get(like), torch.Tensor):
            continue
        changed = dict(args)
        changed[like] = args[like].detach().to(torch.bfloat16)
        head = args[name].detach().to(torch.float32).requires_grad_(True)
        changed[name] = head
        out = _first_output(fn(*changed.values()))
        assert out.dtype.is_floating_point and torch.isfinite(out.float()).all(), f"{name}: {out}"
        if name.startswith("ref_"):  # the frozen reference model's head takes no gradient
            continue
        out.float().sum().backward()
        assert head.grad is not None and head.grad.dtype == torch.float32, (
            f"{name} (float32) with a bfloat16 {like}: its gradient must come back in float32"
        )
