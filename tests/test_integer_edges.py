"""The integer-edge checks that span ops. Each op's rows (every integer argument of its ops and modules at 0, -1,
2^31, 2^40, 2^63 - 1 and just past its bounds) are in its test file, tests/ops/test_<module>.py, over the harness
in tests/integer_edge_harness.py (its docstring: what a row checks, and the worker that runs each case)."""

from __future__ import annotations

import pytest
import torch

from visdet_ops.ops import _args

from . import integer_edge_harness as edges

# ---------------------------------------------------------------- the adaptive grid cap


_HUGE_ROI_OPS = ("roi_align", "deform_roi_pool", "roi_pool")


def _huge_roi_case(device, op_index, gen):
    """A RoI with a huge finite coordinate: the adaptive grid is capped at the
    map side + 1 per side, so the call is quick and equals an explicit
    sampling_ratio of side + 1 (square map: the same on both axes). roi_pool
    visits only the pixels of a bin inside the map."""
    import time

    from visdet_ops.ops.deform_roi_pool import deform_roi_pool
    from visdet_ops.ops.roi_align import roi_align
    from visdet_ops.ops.roi_pool import roi_pool

    op = _HUGE_ROI_OPS[op_index]
    x = torch.rand(1, 2, 8, 8, generator=gen, dtype=torch.float64).to(device)
    rois = torch.tensor([[0, -1e9, -1e9, 1e9, 1e9], [0, 0.0, 0.0, 1e9, 3.0]], dtype=torch.float64).to(device)
    if op == "roi_align":
        fn = lambda sr: roi_align(x, rois, 2, 1.0, sr, "avg", True)  # noqa: E731
    elif op == "deform_roi_pool":
        fn = lambda sr: deform_roi_pool(x, rois, None, 2, 1.0, sr, 0.1)  # noqa: E731
    else:
        fn = lambda sr: roi_pool(x, rois, 2, 1.0)  # noqa: E731
    fn(2)  # warm-up: CUDA module loading is not the kernel's time
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    got = fn(0)
    if device.type == "cuda":
        torch.cuda.synchronize()
    elapsed = time.perf_counter() - start
    assert elapsed < 1.0, f"{op} with a 1e9 RoI took {elapsed:.2f} s"
    if op == "roi_pool":
        assert torch.isfinite(got).all()
        return
    # Row 0: both axes capped at 9. Row 1: x capped at 9, y adaptive ceil(3 / 2) = 2.
    torch.testing.assert_close(got[:1], fn(9)[:1], rtol=0, atol=0)
    from visdet_ops.reference.deform_roi_pool import deform_roi_pool_reference
    from visdet_ops.reference.roi_align import roi_align_reference

    if op == "roi_align":
        want = roi_align_reference(x.cpu(), rois.cpu(), (2, 2), 1.0, 0, "avg", True)
    else:
        want = deform_roi_pool_reference(x.cpu(), rois.cpu(), None, (2, 2), 1.0, 0, 0.1)
    edges.close(got, want)


edges.register_case("huge_roi", _huge_roi_case)


@pytest.mark.parametrize("op_index", range(len(_HUGE_ROI_OPS)), ids=_HUGE_ROI_OPS)
def test_huge_roi_is_bounded(device, op_index):
    """In the worker too: before the cap this call looped for hours."""
    seed = edges.seed()
    result = edges.run_in_worker(__name__, "huge_roi", device, op_index, seed)
    where = f"{_HUGE_ROI_OPS[op_index]} with a 1e9 RoI on {device.type} (VISDET_OPS_TEST_SEED={seed})"
    assert not result.get("timeout"), f"{where}: no result within {edges.CASE_TIMEOUT_S} s"
    assert "crash" not in result, f"{where}: the process died ({result.get('crash')})\n{result.get('stderr')}"
    assert result["ok"], f"{where}: {result['type']}: {result['message']}"


def test_python_and_cpp_bounds_agree():
    """The numbers in _args.py and csrc/common/checks.h are the same."""
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "csrc" / "common" / "checks.h").read_text()
    consts = {m[0]: eval(m[1]) for m in re.findall(r"constexpr int64_t (k\w+) = ([^;]+);", text)}  # noqa: S307
    assert consts["kMaxPooledSize"] == _args.POOLED_SIZE[1]
    assert (consts["kMinSamplingRatio"], consts["kMaxSamplingRatio"]) == _args.SAMPLING_RATIO
    assert consts["kMaxStride"] == _args.STRIDE[1]
    assert consts["kMaxPadding"] == _args.PADDING[1]
    assert consts["kMaxDilation"] == _args.DILATION[1]
    assert consts["kMaxGroups"] == _args.GROUPS[1]
    assert consts["kMaxCarafeKernel"] == _args.CARAFE_KERNEL[1]
    assert consts["kMaxCarafeGroups"] == _args.CARAFE_GROUPS[1]
    assert consts["kMaxCarafeScale"] == _args.CARAFE_SCALE[1]


def test_fake_impls_reject_like_eager():
    """torch.compile sees the fake impls: they reject the same values."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        x = torch.empty(2, 3, 8, 8)
        rois = torch.empty(4, 5)
        with pytest.raises(RuntimeError, match=r"roi_align: sampling_ratio must be in \[-1, 128\], got 2147483648"):
            torch.ops.visdet_ops.roi_align(x, rois, 3, 3, 1.0, 2**31, "avg", True)
        with pytest.raises(RuntimeError, match="deform_roi_pool: sampling_ratio must be in"):
            torch.ops.visdet_ops.deform_roi_pool(x, rois, None, 3, 3, 1.0, 2**40, 0.1)
        with pytest.raises(RuntimeError, match="roi_pool: pooled_width must be in"):
            torch.ops.visdet_ops.roi_pool(x, rois, 3, 2**63 - 1, 1.0)
        with pytest.raises(RuntimeError, match="deform_conv2d: pad_h must be in"):
            torch.ops.visdet_ops.deform_conv2d(
                x, torch.empty(2, 18, 6, 6), None, torch.empty(4, 3, 3, 3), None, 1, 1, 2**40, 0, 1, 1, 1, 1, 1
            )
        with pytest.raises(RuntimeError, match="carafe: scale_factor must be in"):
            torch.ops.visdet_ops.carafe(x, torch.empty(2, 9, 16, 16), 3, 1, 2**31)
        with pytest.raises(RuntimeError, match="masked_conv2d: pad_w must be in"):
            torch.ops.visdet_ops.masked_conv2d(x, torch.empty(1, 8, 8), torch.empty(4, 3, 3, 3), None, 0, -1)
        with pytest.raises(RuntimeError, match="multi_scale_deformable_attn: im2col_step must be in"):
            torch.ops.visdet_ops.multi_scale_deformable_attn(
                torch.empty(2, 20, 2, 4),
                torch.empty(1, 2, dtype=torch.long),
                torch.empty(1, dtype=torch.long),
                torch.empty(2, 3, 2, 1, 2, 2),
                torch.empty(2, 3, 2, 1, 2),
                0,
            )
        out = torch.ops.visdet_ops.roi_align(x, rois, 3, 3, 1.0, 0, "avg", True)[0]
        assert out.shape == (4, 3, 3, 3)
