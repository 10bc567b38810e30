"""An axolotl plugin that applies this project's kernels: name it in the YAML,

    plugins:
      - liger_core.integrations.axolotl.LigerPlugin
    liger_rope: true
    liger_rms_norm: true
    liger_glu_activation: true
    liger_fused_linear_cross_entropy: true

with the option names of axolotl's own Liger plugin (``axolotl.integrations.liger``), which imports
liger-kernel. ``pre_model_load`` (the hook axolotl runs before it builds the model) patches the
config's model family with `liger_core.transformers` (``apply_liger_kernel_to_<model_type>``),
each option switching its op. Imported by axolotl only: it needs axolotl (its ``BasePlugin``) and
pydantic.
"""

from __future__ import annotations

import inspect
import logging

from axolotl.integrations.base import BasePlugin
from pydantic import BaseModel, model_validator

LOG = logging.getLogger(__name__)

# axolotl option -> the apply function's flag (liger_glu_activation: swiglu or geglu, the family's).
_FLAGS = {
    "liger_rope": "rope",
    "liger_rms_norm": "rms_norm",
    "liger_layer_norm": "layer_norm",
    "liger_cross_entropy": "cross_entropy",
    "liger_fused_linear_cross_entropy": "fused_linear_cross_entropy",
}
# Options of axolotl's own plugin this one does not offer: what to use instead.
_NOT_OFFERED = {
    "liger_rms_norm_gated": "liger-core has no gated RMSNorm op yet",
    "liger_use_token_scaling": "liger-core's fused linear cross-entropy has no token scaling",
    "liger_kernel_impl": "liger-core picks the kernels by the vendor package installed (LIGER_BACKEND forces one)",
}


class LigerArgs(BaseModel):
    """This plugin's options (axolotl merges them into its config schema); unset means off."""

    liger_rope: bool | None = None
    liger_rms_norm: bool | None = None
    liger_rms_norm_gated: bool | None = None
    liger_layer_norm: bool | None = None
    liger_swiglu: bool | None = None  # axolotl's deprecated name of liger_glu_activation
    liger_glu_activation: bool | None = None
    liger_cross_entropy: bool | None = None
    liger_fused_linear_cross_entropy: bool | None = None
    liger_use_token_scaling: bool | None = None
    liger_kernel_impl: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _check(cls, data):
        if not isinstance(data, dict):
            return data
        if data.get("liger_swiglu") is not None:
            if data.get("liger_glu_activation") is not None:
                raise ValueError("set liger_glu_activation or its old name liger_swiglu, not both")
            data = {**data, "liger_glu_activation": data["liger_swiglu"]}
        if data.get("liger_cross_entropy") and data.get("liger_fused_linear_cross_entropy"):
            raise ValueError("liger_cross_entropy and liger_fused_linear_cross_entropy: set one of them, not both")
        for option, why in _NOT_OFFERED.items():
            if data.get(option):
                raise ValueError(f"{option}: not offered by liger_core.integrations.axolotl.LigerPlugin ({why})")
        return data


def apply_kwargs(cfg, apply_fn) -> dict[str, bool]:
    """The flags ``apply_fn`` (an ``apply_liger_kernel_to_<model_type>``) takes, from axolotl's ``cfg``."""
    params = inspect.signature(apply_fn).parameters
    glu = cfg.get("liger_glu_activation")
    if glu is None:
        glu = cfg.get("liger_swiglu")
    kwargs = {flag: bool(cfg.get(option)) for option, flag in _FLAGS.items() if flag in params}
    for flag in ("swiglu", "geglu"):
        if flag in params:
            kwargs[flag] = bool(glu)
    return kwargs


class LigerPlugin(BasePlugin):
    """axolotl plugin: liger-core's ``apply_liger_kernel_to_<model_type>`` before the model loads."""

    def get_input_args(self) -> str:
        return "liger_core.integrations.axolotl.LigerArgs"

    def pre_model_load(self, cfg) -> None:
        from liger_core.transformers.monkey_patch import MODEL_TYPE_TO_APPLY_LIGER_FN

        LigerArgs.model_validate({k: cfg.get(k) for k in LigerArgs.model_fields})
        model_type = cfg.get("model_config_type")
        apply_fn = MODEL_TYPE_TO_APPLY_LIGER_FN.get(model_type)
        if apply_fn is None:
            raise ValueError(
                f"model_config_type: liger-core has no patch for {model_type!r}; it patches "
                f"{sorted(MODEL_TYPE_TO_APPLY_LIGER_FN)} (or drop liger_core.integrations.axolotl.LigerPlugin)"
            )
        kwargs = apply_kwargs(cfg, apply_fn)
        LOG.info("liger-core: apply_liger_kernel_to_%s(%s)", model_type, kwargs)
        apply_fn(**kwargs)
