"""mmcv.ops names that are compositions, not kernels: pure PyTorch in mmcv too (point_sample, SimpleRoIAlign,
the NAS-FPN merge cells) or thin modules over visdet_ops' registered ops (SAConv2d over deform_conv2d).

A module here registers no op, so the lists that span the registered ops (example cases, fuzz families, op
benchmarks, integer-edge rows, ONNX cases) do not apply to it; what users see is as for an op module: mmcv's names,
signatures, module paths and state-dict keys, its `__all__` exported by visdet_ops (found by name, as the op
modules are), its test file tests/ops/test_<module>.py against mmcv's formulas, and its `## <module>` section in
docs/ops.md (which tests/ops/test_<module>.py checks)."""
