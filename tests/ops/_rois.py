"""The RoI ops' test-side family home (as csrc/ops/_rois for the kernels): what the tests of roi_align, roi_pool
and deform_roi_pool share. Fuzz: the RoI cases' common strategy and inputs, the NaN rule of a bad RoI on CUDA, the
comparison that allows a sample on a discontinuity.
"""

from __future__ import annotations

import torch
from hypothesis import strategies as st

from .. import fuzz_core as core
from ..fuzz_core import FLOATS, Mismatch, Run, assert_close, draw_tensors, expectation, on_gpu, one_in, pick_bad, size

ROI_BAD = (
    "rois_cols",
    "rois_ndim",
    "input_ndim",
    "input_dtype",
    "rois_dtype",
    "bad_index",
    "nan_roi",
    "output_size",
    "spatial_scale",
)


@st.composite
def roi_case(draw, device, fn, extra_bad=(), module=False):
    bad = pick_bad(draw, ROI_BAD + tuple(extra_bad))
    main = draw(st.sampled_from(FLOATS))
    out = draw(st.integers(1, 3)) if draw(st.booleans()) else [draw(st.integers(1, 3)), draw(st.integers(1, 3))]
    case = {
        "fn": fn,
        "seed": draw(st.integers(0, 2**31 - 1)),
        "shape": [size(draw, 1, 2), draw(st.integers(0, 3)), size(draw, 1, 6), size(draw, 1, 6)],
        "k": draw(st.integers(0, 5)),
        "big": draw(one_in(10)),
        "output_size": out,
        "spatial_scale": draw(st.sampled_from([1.0, 0.5, 0.25, 2.0])),
        "reach": draw(st.sampled_from([8.0, 16.0, 1e4])),
        "bad": bad,
    }
    if case["big"]:  # more RoIs, channels, pixels and bins
        case["shape"] = [
            draw(st.integers(1, 3)),
            draw(st.integers(1, 8)),
            draw(st.integers(7, 20)),
            draw(st.integers(7, 20)),
        ]
        case["k"] = draw(st.integers(6, 20))
        if bad != "output_size":
            case["output_size"] = [draw(st.integers(1, 7)), draw(st.integers(1, 7))]
    nd = {"input": 4, "rois": 2}
    case["t"], mixed = draw_tensors(draw, nd, main, device)
    if module:
        for o in case["t"].values():
            o["dt"] = main
            if device != "cpu":
                o["dev"] = device
        mixed = False
    if case["t"]["rois"]["lay"] == "e" and case["t"]["rois"]["ed"] == 1:
        case["t"]["rois"]["ed"] = 0  # [b, b, b, b, b]: a RoI at the batch index; dim 0 only (a repeated RoI)
    n, _, h, w = case["shape"]
    # rois in the input's dtype, or float32 beside a 16-bit input: the documented pairs.
    rdt, idt = case["t"]["rois"]["dt"], case["t"]["input"]["dt"]
    mixed = mixed and not (
        rdt == "f32" and idt in ("f16", "bf16") and case["t"]["input"].get("dev") == case["t"]["rois"].get("dev")
    )
    if bad == "input_dtype":
        case["t"]["input"]["dt"] = draw(st.sampled_from(core.NON_FLOATS))
    elif bad == "rois_dtype":
        case["t"]["rois"]["dt"] = draw(st.sampled_from(core.NON_FLOATS))
    elif bad == "output_size":
        case["output_size"] = draw(st.sampled_from([0, -1, 4097, 2**31, [2, 0], [1, 2**40], 1.5, "2", [1, 2, 3]]))
    elif bad in ("bad_index", "nan_roi"):
        case["k"] = max(case["k"], 1)
    elif bad == "spatial_scale":
        case["spatial_scale"] = draw(st.sampled_from([0.0, -1.0, float("nan"), float("inf"), -float("inf")]))
    if bad != "spatial_scale" and draw(one_in(20)):
        case["spatial_scale"] = draw(st.sampled_from([1e-30, 1e30, 1e-3]))  # RoIs far smaller or larger than the map
    if bad in ("bad_index", "nan_roi", "rois_cols") and case["t"]["rois"]["lay"] == "e":
        case["t"]["rois"]["lay"] = "c"  # expanded, every RoI would be the first one
    case["expect"] = expectation(bad, mixed, borderline=n == 0 or h == 0 or w == 0)
    return case


def roi_inputs(run: Run, case: dict, distinct: bool = False):
    n, c, h, w = case["shape"]
    k, bad, scale = case["k"], case["bad"], case["spatial_scale"]
    if bad == "input_ndim":
        shape = [n, c, h, w][1:]
    else:
        shape = [n, c, h, w]
    if distinct:  # distinct values (per plane), exact in bfloat16: max pooling has no ties
        numel = 1
        for d in shape:
            numel *= d
        base = (torch.randperm(numel, generator=run.gen).double() - numel / 2).reshape(shape) / 4
    else:
        base = run.randn(*shape)
    # RoIs sized for the map at this scale (an extreme or invalid scale draws them as for scale 1)
    reach = case["reach"] / (scale if 1e-3 <= abs(scale) <= 1e3 else 1.0)
    xy = ((run.rand(k, 2) * (reach + 8) - 4) * 8).round() / 8
    wh = ((run.rand(k, 2) * reach * 0.75) * 8).round() / 8
    idx = run.randint(0, max(n, 1), k, 1)
    rois = torch.cat([idx, xy, xy + wh], 1)
    if case["t"]["rois"]["dt"] == "f16":  # finite in float16
        rois[:, 1:] = rois[:, 1:].clamp(-6e4, 6e4)
    if bad == "bad_index" and k:
        rois[k // 2, 0] = [n, -1, n + 7][case["seed"] % 3]
    elif bad == "nan_roi" and k:
        rois[k // 2, 1 + case["seed"] % 4] = [float("nan"), float("inf")][case["seed"] % 2]
    elif bad == "rois_cols":
        rois = rois[:, :4] if case["seed"] % 2 else torch.cat([rois, rois[:, :1]], 1)
    elif bad == "rois_ndim":
        rois = rois.reshape(-1)
    return run.arg("input", base), run.arg("rois", rois)


def roi_unchecked(run: Run, case: dict) -> None:
    """On CUDA without sync checks a bad RoI (batch index outside [0, N), non-finite coordinate) is not refused: its
    output row must be NaN (documented)."""
    # An empty batch makes every RoI's batch index (drawn in [0, 1)) a bad one.
    empty_batch = case["bad"] is None and case["shape"][0] == 0 and case["k"] > 0
    if (case["bad"] in ("bad_index", "nan_roi") or empty_batch) and run.unchecked_values and on_gpu(case, "rois"):
        run.expect = "either"
        rows = slice(None) if empty_batch else case["k"] // 2

        def check(out):
            if out.size(1) and not torch.isnan(out[rows]).all():
                raise Mismatch(f"a bad RoI on CUDA (rows {rows}) did not give NaN")

        run.unchecked_check = check


def close_up_to_edges(out, want, rois, reference, dt) -> bool:
    """assert_close(out, want), where a RoI whose output differs may instead match the reference for its RoI moved
    by a millionth of a pixel: a sample exactly on the map's border (y == -1 or H) or a bin size exactly an integer
    (the adaptive grid's ceil) is on a discontinuity, and the kernels' float32 (or other-order float64) arithmetic
    may land on its other side (tests/ops' exact_rois avoids them; the fuzz draws them on purpose). Returns
    whether such a RoI was needed (its gradients are then not compared)."""
    try:
        assert_close("output", out, want, dt)
        return False
    except Mismatch:
        if out.dim() != 4 or tuple(out.shape) != tuple(want.shape):
            raise
    moved = []
    for delta in (1e-6, -1e-6):
        for scaled in (False, True):
            r = rois.clone()
            r[:, 1:] = r[:, 1:] * (1 + delta) if scaled else r[:, 1:] + delta
            moved.append(reference(r))
    for k in range(out.size(0)):
        errors = []
        for w in [want, *moved]:
            try:
                assert_close(f"output of RoI {k}", out[k], w[k], dt)
                break
            except Mismatch as exc:
                errors.append(exc)
        else:
            raise errors[0]
    return True


# ----------------------------------------------------------------- ONNX export


def onnx_rois(k: int, batch: int, height: int, width: int, rng: torch.Generator, scale: float = 1.0) -> torch.Tensor:
    """RoIs in image coordinates (map size / scale) with real corners: some tiny (below one pixel), some reaching
    out of the map, some with integer corners, some empty (x2 + 1 <= x1)."""
    size = torch.tensor([width, height], dtype=torch.float32) / scale
    corner = torch.rand(k, 2, generator=rng) * size * 1.2 - 0.1 * size
    extent = torch.rand(k, 2, generator=rng) * size * 0.6
    extent[: k // 5] *= 0.02
    rois = torch.cat([torch.randint(0, batch, (k, 1), generator=rng).float(), corner, corner + extent], 1)
    rois[k // 5 : 2 * k // 5, 1:] = rois[k // 5 : 2 * k // 5, 1:].round()
    rois[2 * k // 5 : 2 * k // 5 + 2, 3:] = rois[2 * k // 5 : 2 * k // 5 + 2, 1:3] - 3
    return rois


def onnx_map_dims() -> tuple[dict, dict]:
    """x [N, C, H, W] and rois [K, 5], every size but the 5 dynamic."""
    x = {axis: torch.export.Dim(name) for axis, name in enumerate("nchw")}
    return x, {0: torch.export.Dim("k")}
