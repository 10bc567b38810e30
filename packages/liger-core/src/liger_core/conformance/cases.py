"""Every conformance case, generated from the op catalogue; a vendor's tests/test_conformance.py
star-imports this module.

Per op ``<op>`` there are three tests: ``test_<op>[<sample>]`` runs each declared sample through
`liger_core.conformance.check.check` (forward and every gradient against the float64 oracle),
``test_<op>_bad_input[<case>]`` each declared bad input (the error type and message, which starts
with the op's name), ``test_<op>_dtypes`` the dtype rules (`liger_core.conformance.dtypes`). A backend
whose interface predates an op skips that op's tests, saying so.
"""

from __future__ import annotations

import pytest

from liger_core.conformance import require_op
from liger_core.conformance.check import check_sample
from liger_core.conformance.dtypes import check_dtype_errors, check_mixed_dtypes
from liger_core.interface import CATALOGUE
from liger_core.op import Op


def _tests(decl: Op) -> dict:
    samples = list(decl.samples())
    ids = [s.id for s in samples]
    if len(set(ids)) != len(ids):
        raise ValueError(f"{decl.name}: two samples share an id: {sorted(i for i in ids if ids.count(i) > 1)}")

    @pytest.mark.parametrize("sample", samples, ids=ids)
    def test_samples(conformance_backend, conformance_device, sample):
        require_op(conformance_backend, decl.name)
        check_sample(conformance_backend, decl, sample, conformance_device)

    @pytest.mark.parametrize("bad", decl.errors, ids=[b.name for b in decl.errors])
    def test_bad_input(conformance_backend, conformance_device, bad):
        fn = require_op(conformance_backend, decl.name)
        args = decl.bind(bad.apply(decl.error_sample.args(conformance_device)))
        with pytest.raises(bad.error, match=bad.match) as info:
            fn(*args.values())
        assert str(info.value).startswith(f"{decl.name}: "), f"the message lacks the op's name: {info.value}"

    def test_dtypes(conformance_backend, conformance_device):
        fn = require_op(conformance_backend, decl.name)
        check_dtype_errors(fn, decl, conformance_device)
        check_mixed_dtypes(fn, decl, conformance_device)

    tests = {
        f"test_{decl.name}": test_samples,
        f"test_{decl.name}_bad_input": test_bad_input,
        f"test_{decl.name}_dtypes": test_dtypes,
    }
    for name, fn in tests.items():
        fn.__name__ = fn.__qualname__ = name
        fn.__doc__ = f"`{decl.name}` against its declaration (liger_core.ops.{decl.name})."
    return tests


__all__: list[str] = []
for _decl in CATALOGUE.values():
    _generated = _tests(_decl)
    globals().update(_generated)
    __all__ += list(_generated)
