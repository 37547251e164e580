"""Every op module's example case (visdet_ops.ops.EXAMPLES: what the doctor runs and the
compute-sanitizer sweep launches) passes on every device and in every float dtype, on fresh random
inputs."""

from __future__ import annotations

import pytest

import visdet_ops  # noqa: F401
from visdet_ops.ops import EXAMPLES
from visdet_ops.ops._examples import DTYPES


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("family", sorted(EXAMPLES))
def test_example_case(device, family, dtype, rng):
    error = EXAMPLES[family].run(device, dtype, rng)
    assert error is None, f"{family} example in {dtype} on {device}: {error}"


def test_every_op_module_declares_one():
    import pkgutil

    from visdet_ops import ops

    modules = {m.name for m in pkgutil.iter_modules(ops.__path__) if not m.name.startswith("_")}
    assert set(EXAMPLES) == modules
