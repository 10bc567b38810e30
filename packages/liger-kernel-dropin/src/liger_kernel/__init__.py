"""``liger_kernel``, served by liger-core: for code that imports upstream Liger Kernel by name.

This is the distribution ``liger-kernel-dropin``, not ``liger-kernel``: transformers' Trainer
(``use_liger_kernel=True``), LLaMA-Factory (``enable_liger_kernel``), OpenRLHF and verl import
``liger_kernel.transformers``, and get this project's kernels (liger-core's patches, dispatched to
the installed ``liger-ops-<vendor>``). Its version is its own (0.9.0 and up).

Both distributions install files under the one import name ``liger_kernel``, so they must never be
installed together: importing this package with ``liger-kernel`` also installed is an ImportError
that says which one owns the name and how to fix it.
"""

from __future__ import annotations

import importlib.metadata as _metadata
import os as _os

from liger_kernel.__about__ import __version__

DISTRIBUTION = "liger-kernel-dropin"
UPSTREAM = "liger-kernel"


class LigerKernelConflictError(ImportError):
    """liger-kernel and liger-kernel-dropin are installed together (their files overwrite each other)."""


def _upstream_version() -> str | None:
    try:
        return _metadata.version(UPSTREAM)
    except _metadata.PackageNotFoundError:
        return None


def _check_alone() -> None:
    upstream = _upstream_version()
    if upstream is None:
        return
    here = _os.path.dirname(__file__)
    raise LigerKernelConflictError(
        f"both {UPSTREAM} {upstream} and {DISTRIBUTION} {__version__} are installed, and both install the import "
        f"name `liger_kernel`. Its __init__ ({here}) is {DISTRIBUTION}'s, so {DISTRIBUTION} owns the name now, "
        f"but {UPSTREAM}'s other files may sit beside it: the two would mix. Keep one: "
        f"`pip uninstall -y {UPSTREAM} {DISTRIBUTION} && pip install {DISTRIBUTION}` for this project's kernels, "
        f"or `pip uninstall -y {UPSTREAM} {DISTRIBUTION} && pip install {UPSTREAM}` for upstream's "
        f"(uninstall both first: uninstalling one deletes files the other shares)."
    )


_check_alone()


def __getattr__(name: str):
    from liger_kernel._surface import missing

    raise missing(__name__, name)
