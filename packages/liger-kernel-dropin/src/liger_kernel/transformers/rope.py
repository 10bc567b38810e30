"""``liger_kernel.transformers.rope``: ``liger_rotary_pos_emb``, the RoPE liger-core's LLaMA patch swaps in.

``liger_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1) -> (q_rot, k_rot)``: the rotate-half RoPE of
transformers' LLaMA computed by Liger's rope op, LLaMA's own function where the kernel does not fit
(liger-kernel's takes ``position_ids`` as the fifth argument and ignores it; pass ``unsqueeze_dim`` by
keyword). It is the very object ``apply_liger_kernel_to_llama()`` puts in ``modeling_llama`` (liger-core
builds one per stock function and reuses it), so code that assigns it to a module's
``apply_rotary_pos_emb`` and checks ``modeling_llama.apply_rotary_pos_emb is liger_rotary_pos_emb``,
as liger-kernel's users do, works. Resolved on each access, so it follows a reloaded ``modeling_llama``.
The raw kernel call is ``liger_core.functional.liger_rotary_pos_emb``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable


def liger_rotary_pos_emb_for_llama() -> Callable:
    from liger_core.transformers import layers
    from liger_core.transformers import monkey_patch as mp

    modeling = importlib.import_module(mp.FAMILIES["llama"].modeling)
    return layers.rope_function(mp._stock_value(modeling, "apply_rotary_pos_emb"), "full")


def __getattr__(name: str):
    if name == "liger_rotary_pos_emb":
        return liger_rotary_pos_emb_for_llama()
    from liger_kernel._surface import missing

    raise missing(__name__, name)
