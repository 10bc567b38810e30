"""``liger_kernel.transformers.functional``: liger-kernel's functional names, served by liger_core.functional
(same names and argument names; each dispatches to the installed vendor package's kernel)."""

from __future__ import annotations

import liger_core.functional as _core

globals().update({name: getattr(_core, name) for name in _core.__all__})


def __getattr__(name: str):
    from liger_kernel._surface import missing

    raise missing(__name__, name)


__all__ = list(_core.__all__)
