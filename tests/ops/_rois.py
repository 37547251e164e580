"""The RoI ops' test-side family home (as csrc/ops/_rois for the kernels): what the tests of roi_align, roi_pool,
deform_roi_pool and roi_align_rotated (rotated RoIs [K, 6]) share.

- RoIOpTester (torchvision's RoIOpTester): the tests every RoI op passes, run by a `class TestRoIOp(RoIOpTester)`
  in each op's test file: empty RoIs, invalid RoIs on CUDA (NaN rows, no gradient, no host sync), the sync checks'
  errors, a RoI with a huge coordinate (the adaptive grid cap, in the integer-edge worker). The compile and
  determinism tests are tests/test_compile_determinism.py's, the CUDA graph capture tests/test_cuda_graphs.py's.
- Unit tests of the [K, 5] RoI ops: their random RoIs (random_rois), the degenerate ones (DEGENERATE_ROIS), the
  check of an autograd formula registered from Python.
- Fuzz: the RoI cases' common strategy and inputs, the NaN rule of a bad RoI on CUDA, the comparison that allows a
  sample on a discontinuity, the runner of the sampled ops (roi_align, roi_align_rotated: sampled_roi_run).
- ONNX export: RoIs with real corners, the dynamic dimensions.
- Integer edges: the rows of an op whose function and module take output_size and sampling_ratio
  (pooled_edge_rows); autocast: an RoI layer after a convolution stem (rois_autocast_cases).
"""

from __future__ import annotations

import math
import time

import pytest
import torch
from hypothesis import strategies as st

from visdet_ops.ops import _args

from .. import autocast_harness as amp
from .. import fuzz_core as core
from .. import integer_edge_harness as edges
from ..conftest import require_cuda

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
    bad = core.pick_bad(draw, ROI_BAD + tuple(extra_bad))
    main = draw(st.sampled_from(core.FLOATS))
    out = draw(st.integers(1, 3)) if draw(st.booleans()) else [draw(st.integers(1, 3)), draw(st.integers(1, 3))]
    case = {
        "fn": fn,
        "seed": draw(st.integers(0, 2**31 - 1)),
        "shape": [core.size(draw, 1, 2), draw(st.integers(0, 3)), core.size(draw, 1, 6), core.size(draw, 1, 6)],
        "k": draw(st.integers(0, 5)),
        "big": draw(core.one_in(10)),
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
    case["t"], mixed = core.draw_tensors(draw, nd, main, device)
    if module:
        core.uniform(case, main, device)
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
    if bad != "spatial_scale" and draw(core.one_in(20)):
        case["spatial_scale"] = draw(st.sampled_from([1e-30, 1e30, 1e-3]))  # RoIs far smaller or larger than the map
    if bad in ("bad_index", "nan_roi", "rois_cols") and case["t"]["rois"]["lay"] == "e":
        case["t"]["rois"]["lay"] = "c"  # expanded, every RoI would be the first one
    case["expect"] = core.expectation(bad, mixed, borderline=n == 0 or h == 0 or w == 0)
    return case


def tiny_inputs(device) -> tuple[torch.Tensor, torch.Tensor]:
    """A [1, 2, 8, 8] map and one RoI inside it: the calls of the argument-message tests."""
    return torch.rand(1, 2, 8, 8, device=device), torch.tensor([[0.0, 1, 1, 6, 6]], device=device)


# Zero-size, reversed (x2 < x1) and fully-outside RoIs over an 8 x 8 map (the degenerate-RoI tests).
DEGENERATE_ROIS = [[0, 3, 3, 3, 3], [0, 6, 6, 2, 2], [0, 100, 100, 120, 130], [0, -50, -50, -40, -45]]


def random_rois(k, batch, height, width, scale, rng, margin=0.05, extent=0.6, shrink=0.0) -> torch.Tensor:
    """The unit tests' float64 RoIs [K, 5] (batch_index, x1, y1, x2, y2) in image coordinates (map size / scale):
    corners from `margin` of the image before it to `margin` past it (some RoIs partly outside, some tiny), sizes up
    to `extent` of the image less `shrink` (a negative size: an empty RoI)."""
    img_h, img_w = height / scale, width / scale
    x1 = torch.rand(k, generator=rng, dtype=torch.float64) * img_w * (1 + 2 * margin) - img_w * margin
    y1 = torch.rand(k, generator=rng, dtype=torch.float64) * img_h * (1 + 2 * margin) - img_h * margin
    w = torch.rand(k, generator=rng, dtype=torch.float64) * img_w * extent - shrink
    h = torch.rand(k, generator=rng, dtype=torch.float64) * img_h * extent - shrink
    b = torch.randint(0, batch, (k,), generator=rng).double()
    return torch.stack([b, x1, y1, x1 + w, y1 + h], 1)


def assert_autograd_registered_from_python(name: str, public, *op_args) -> None:
    """One autograd formula for the classic and the stable build: torch.library.register_autograd in
    visdet_ops/ops/<name>.py (the stable ABI has no C++ autograd), for the op and its backward (roi_align,
    roi_pool: the op `name` called with (input, rois, *op_args), its public function `public`)."""
    for op_name in (name, f"_{name}_backward"):
        op = getattr(torch.ops.visdet_ops, op_name).default
        assert torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), "Autograd")
        assert not torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), "CompositeImplicitAutograd")
    x = torch.randn(1, 1, 4, 4, requires_grad=True)
    rois = torch.tensor([[0, 0, 0, 3, 3.0]])
    # A direct call of the op runs the registered formula; the public function the same formula through its cheap
    # eager entry point (_registration.register_autograd).
    direct = getattr(torch.ops.visdet_ops, name)(x, rois, *op_args)[0]
    assert f"GeneratedBackwardFor_visdet_ops_{name}" in direct.grad_fn.name()
    # The output held in a name: a grad_fn read from a temporary can outlive its node (torch 2.11's name() then raises).
    out = public(x, rois, 2)
    assert out.grad_fn.name() == f"{name}_eagerBackward"


def roi_inputs(run: core.Run, case: dict, distinct: bool = False, rotated: bool = False):
    """The case's input and rois as core.Args: rois [K, 5] (batch_index, x1, y1, x2, y2), or with `rotated`
    [K, 6] (batch_index, x, y, w, h, angle) over the same boxes, the angle in [-2 pi, 2 pi)."""
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
    if rotated:
        angle = ((run.rand(k, 1) * 4 - 2) * math.pi * 64).round() / 64
        rois = torch.cat([idx, xy + wh / 2, wh, angle], 1)
    else:
        rois = torch.cat([idx, xy, xy + wh], 1)
    if case["t"]["rois"]["dt"] == "f16":  # finite in float16
        rois[:, 1:] = rois[:, 1:].clamp(-6e4, 6e4)
    if bad == "bad_index" and k:
        rois[k // 2, 0] = [n, -1, n + 7][case["seed"] % 3]
    elif bad == "nan_roi" and k:
        rois[k // 2, 1 + case["seed"] % (rois.size(1) - 1)] = [float("nan"), float("inf")][case["seed"] % 2]
    elif bad == "rois_cols":
        rois = rois[:, :4] if case["seed"] % 2 else torch.cat([rois, rois[:, :1]], 1)
    elif bad == "rois_ndim":
        rois = rois.reshape(-1)
    return run.arg("input", base), run.arg("rois", rois)


def roi_unchecked(run: core.Run, case: dict) -> None:
    """On CUDA without sync checks a bad RoI (batch index outside [0, N), non-finite coordinate) is not refused: its
    output row must be NaN (documented)."""
    # An empty batch makes every RoI's batch index (drawn in [0, 1)) a bad one.
    empty_batch = case["bad"] is None and case["shape"][0] == 0 and case["k"] > 0
    if (case["bad"] in ("bad_index", "nan_roi") or empty_batch) and run.unchecked_values and core.on_gpu(case, "rois"):
        run.expect = "either"
        rows = slice(None) if empty_batch else case["k"] // 2

        def check(out):
            if out.size(1) and not torch.isnan(out[rows]).all():
                raise core.Mismatch(f"a bad RoI on CUDA (rows {rows}) did not give NaN")

        run.unchecked_check = check


def close_up_to_edges(out, want, rois, reference, dt) -> bool:
    """core.assert_close(out, want), where a RoI whose output differs may instead match the reference for its RoI moved
    by a millionth of a pixel: a sample exactly on the map's border (y == -1 or H) or a bin size exactly an integer
    (the adaptive grid's ceil) is on a discontinuity, and the kernels' float32 (or other-order float64) arithmetic
    may land on its other side (tests/ops' exact_rois avoids them; the fuzz draws them on purpose). Returns
    whether such a RoI was needed (its gradients are then not compared)."""
    try:
        core.assert_close("output", out, want, dt)
        return False
    except core.Mismatch:
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
                core.assert_close(f"output of RoI {k}", out[k], w[k], dt)
                break
            except core.Mismatch as exc:
                errors.append(exc)
        else:
            raise errors[0]
    return True


def sampled_roi_run(
    case, family, module_cls, function, arg_names, reference, ctor_bad, rotated=False, ctor_extra=None, grad_values=None
):
    """The fuzz runner of an RoI op with output_size and sampling_ratio (roi_align, roi_align_rotated): the call
    of `function(input, rois, *args)` or of `module_cls(**kwargs)(input, rois)` with `arg_names` drawn in the case
    (the module takes mmcv's old names out_size / sample_num when the case says old_names), judged against
    `reference(input, rois, output_size pair, *args[1:])` up to the samples on a discontinuity. `ctor_bad`: the bad
    mutations the constructor refuses. Optional: `ctor_extra(case) -> dict`, more constructor arguments;
    `grad_values(case, a_in) -> bool`, whether the input gradient's values are compared (else only its presence)."""
    run = core.family_run(case, family)
    a_in, a_rois = roi_inputs(run, case, rotated=rotated)
    roi_unchecked(run, case)
    xi, xr = a_in.x(grad=True), a_rois.x()
    args = tuple(case[name] for name in arg_names)
    dt = a_in.dt
    if case["fn"] == module_cls.__name__:
        kwargs = {**dict(zip(arg_names, args, strict=True)), **(ctor_extra(case) if ctor_extra else {})}
        if case.get("old_names"):
            kwargs["out_size"], kwargs["sample_num"] = kwargs.pop("output_size"), kwargs.pop("sampling_ratio")
        mod = run.construct(lambda: module_cls(**kwargs), expect="error" if case["bad"] in ctor_bad else "ok")
        if mod is None:
            return
        call = lambda: mod(xi, xr)  # noqa: E731
    else:
        call = lambda: function(xi, xr, *args)  # noqa: E731

    def check(out):
        rl, r = a_in.ref(grad=True)
        size = core.pair(case["output_size"])
        want = reference(r, a_rois.r(), size, *args[1:])
        edge = close_up_to_edges(out, want, a_rois.r(), lambda rois: reference(r, rois, size, *args[1:]), dt)
        core.out_dtype_ok(out, dt, False)
        if run.grads and out.numel() and not edge:
            core.backward_both(run, out, want)
            values = grad_values(case, a_in) if grad_values else True
            core.check_grads([("input", a_in, rl)], dt, check_values=values)

    run.outcome(call, check)


# ----------------------------------------------------------------- RoIOpTester

# Invalid RoIs: a batch index past N, a negative one, a NaN and an infinite coordinate.
BAD_ROIS = [[5, 1, 1, 6, 6], [-1, 1, 1, 6, 6], [0, float("nan"), 1, 6, 6], [1, 1, 1, float("-inf"), 6]]


class RoIOpTester:
    """The tests every RoI op shares. A subclass (`class TestRoIOp(RoIOpTester)` in tests/ops/test_<op>.py) gives:
    - `name`: the op as its messages name it;
    - `fn(x, rois, *extra, variant)`: the public call with the subclass's other arguments (`variant`: the value of
      the `variant` fixture, which a subclass may override with params, e.g. roi_align's pool modes);
    - `reference(x, rois, *extra, variant)`: its float64 reference;
    - `call(**arguments)`: the public function by keyword, `valid` its arguments other than input and rois (what
      test_shared_checks changes one at a time);
    - `case(rng)`: a float64 input and 4 valid RoIs; `extra(k, rng)`: further float64 inputs with a gradient, one
      row per RoI (deform_roi_pool's offsets; none by default); `tol`: the tolerance against the reference;
    - for RoIs of another layout than (batch_index, x1, y1, x2, y2) (roi_align_rotated's [K, 6]): `roi_columns`,
      `bad_rois` (BAD_ROIS's four kinds of invalid RoI), `bad_batch_roi` (a batch index of 5 for a batch of 2) and
      `inf_roi` (an infinite coordinate) in that layout."""

    name = ""
    tol: dict = {}
    valid: dict = {}  # the public function's valid keyword arguments beside input and rois (test_shared_checks)
    roi_columns = 5
    bad_rois = BAD_ROIS
    bad_batch_roi = [5.0, 0, 0, 1, 1]
    inf_roi = [0, 0, 0, float("inf"), 1]

    @pytest.fixture
    def variant(self):
        return None

    def fn(self, x, rois, *extra, variant=None):
        raise NotImplementedError

    def reference(self, x, rois, *extra, variant=None):
        raise NotImplementedError

    def case(self, rng):
        raise NotImplementedError

    def extra(self, k, rng):
        return ()

    def call(self, **arguments):
        raise NotImplementedError

    @staticmethod
    def shared_checks(c: int, bad: list) -> dict:
        """The argument checks every RoI op shares (csrc/ops/_rois/rois.h, visdet_ops/ops/_args.py): a kind of bad
        argument -> (the change to a valid call on a [2, 3, 4, 4] input and one RoI of `c` columns, the message
        after "<name>: "); `bad`: the subclass's bad_rois as [1, c] tensors."""
        return {
            "rois_columns": (dict(rois=torch.zeros(3, c - 1)), rf"rois must have shape \[K, {c}\]"),
            "input_ndim": (dict(input=torch.zeros(2, 3, 4)), "input must have 4 dimensions"),
            "batch_index_past_n": (dict(rois=bad[0]), r"rois\[:, 0\] \(batch index\) must lie in \[0, 1\]"),
            "batch_index_negative": (dict(rois=bad[1]), r"rois\[:, 0\] \(batch index\) must lie in"),
            "nan_coordinate": (dict(rois=bad[2]), "rois must be finite"),
            "inf_coordinate": (dict(rois=bad[3]), "rois must be finite"),
            "rois_dtype": (
                dict(rois=torch.zeros(1, c, dtype=torch.float64)),
                r"rois must have the dtype of input \(Float\) or Float, got Double",
            ),
            "output_size": (dict(output_size=0), r"output_size must be positive, got \(0, 0\)"),
            "spatial_scale_zero": (dict(spatial_scale=0.0), "spatial_scale must be a positive finite number, got 0"),
            "spatial_scale_nan": (
                dict(spatial_scale=float("nan")),
                "spatial_scale must be a positive finite number, got nan",
            ),
            "integer_input": (
                dict(input=torch.zeros(2, 3, 4, 4, dtype=torch.int64), rois=torch.zeros(1, c, dtype=torch.int64)),
                "input must be a floating point tensor",
            ),
            "empty_map": (dict(input=torch.zeros(2, 3, 0, 4)), "input must have a non-empty spatial size"),
        }

    @pytest.mark.parametrize("kind", list(shared_checks(5, [None] * 4)))
    def test_shared_checks(self, kind):
        bad = [torch.tensor([row], dtype=torch.float32) for row in self.bad_rois]
        change, message = self.shared_checks(self.roi_columns, bad)[kind]
        arguments = dict(input=torch.zeros(2, 3, 4, 4), rois=torch.zeros(1, self.roi_columns), **self.valid)
        with pytest.raises(RuntimeError, match=rf"{self.name}: {message}"):
            self.call(**{**arguments, **change})

    def test_empty_rois(self, device, dtype, variant):
        x = torch.randn(2, 4, 5, 5, device=device, dtype=dtype, requires_grad=True)
        extra = [e.to(device, dtype).requires_grad_() for e in self.extra(0, torch.Generator())]
        out = self.fn(x, torch.empty(0, self.roi_columns, device=device, dtype=dtype), *extra, variant=variant)
        assert out.shape[:2] == (0, 4) and out.dtype == dtype
        out.sum().backward()
        assert torch.equal(x.grad, torch.zeros_like(x))
        assert all(e.grad.shape == e.shape for e in extra)

    @pytest.mark.parametrize("dtype16", [torch.bfloat16, torch.float16], ids=["bf16", "f16"])
    def test_half_input_takes_float32_rois(self, device, rng, variant, dtype16):
        """float32 RoIs beside a 16-bit input (what AMP produces) are used unrounded: the same result as the input
        in float32 with the same RoIs, up to the output's rounding; float64 RoIs beside it are refused."""
        x, rois = self.case(rng)
        x16 = x.to(device, dtype16)
        extra = [e.to(device, dtype16) for e in self.extra(len(rois), rng)]
        r32 = rois.to(device, torch.float32)
        got = self.fn(x16, r32, *extra, variant=variant)
        want = self.fn(x16.float(), r32, *[e.float() for e in extra], variant=variant)
        assert got.dtype == dtype16
        torch.testing.assert_close(got.float(), want.to(dtype16).float(), rtol=0, atol=0)
        name = {torch.bfloat16: "BFloat16", torch.float16: "Half"}[dtype16]
        with pytest.raises(RuntimeError, match=rf"rois must have the dtype of input \({name}\) or Float, got Double"):
            self.fn(x16, rois.to(device), *extra, variant=variant)

    def test_double_backward_is_refused(self, rng, variant):
        x, rois = self.case(rng)
        x = x.requires_grad_()
        extra = [e.requires_grad_() for e in self.extra(len(rois), rng)]
        out = self.fn(x, rois, *extra, variant=variant)
        grads = torch.autograd.grad(out, [x, *extra], torch.ones_like(out, requires_grad=True), create_graph=True)
        refused = rf"{self.name}: double backward \(the gradient of the gradient\) is not supported"
        with pytest.raises(RuntimeError, match=refused):
            grads[0].sum().backward()

    def test_cuda_invalid_rois_give_nan_without_a_sync(self, rng, variant):
        """On CUDA the host does not wait for a RoI check (so the op can be captured in a CUDA graph): an invalid RoI
        gives NaN and no gradient, the valid ones their normal answer; no synchronising call is made."""
        require_cuda()
        x, rois = self.case(rng)
        k = len(rois)
        extra = self.extra(k + len(self.bad_rois), rng)
        xc = x.cuda().requires_grad_()
        ec = [e.cuda().requires_grad_() for e in extra]
        all_rois = torch.cat([rois, torch.tensor(self.bad_rois, dtype=rois.dtype)]).cuda()
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            out = self.fn(xc, all_rois, *ec, variant=variant)
            out.backward(torch.ones_like(out))
        finally:
            torch.cuda.set_sync_debug_mode("default")
        assert torch.isnan(out[k:]).all()
        for e in ec:
            assert torch.equal(e.grad[k:].cpu(), torch.zeros_like(e.grad[k:].cpu()))
        xr, er = x.clone().requires_grad_(), [e[:k].clone().requires_grad_() for e in extra]
        want = self.reference(xr, rois, *er, variant=variant)
        torch.testing.assert_close(out[:k].detach().cpu(), want.detach(), **self.tol)
        grads = torch.autograd.grad(want, [xr, *er], torch.ones_like(want))
        torch.testing.assert_close(xc.grad.cpu(), grads[0], **self.tol)
        for e, g in zip(ec, grads[1:], strict=True):
            torch.testing.assert_close(e.grad[:k].cpu(), g, **self.tol)

    @pytest.mark.parametrize("variable", ["VISDET_OPS_SYNC_ROI_CHECKS", "VISDET_OPS_SYNC_CHECKS"])
    def test_cuda_sync_roi_checks_raise(self, monkeypatch, variable, variant):
        """VISDET_OPS_SYNC_ROI_CHECKS=1 (or VISDET_OPS_SYNC_CHECKS=1, every op): the synchronising check with its
        clear error."""
        require_cuda()
        monkeypatch.setenv(variable, "1")
        x = torch.zeros(2, 3, 4, 4, device="cuda")
        extra = [e.float().cuda() for e in self.extra(1, torch.Generator())]
        with pytest.raises(RuntimeError, match=rf"{self.name}: rois\[:, 0\] \(batch index\) must lie in \[0, 1\]"):
            self.fn(x, torch.tensor([self.bad_batch_roi], device="cuda"), *extra, variant=variant)
        rois = torch.tensor([self.inf_roi], device="cuda").bfloat16()
        with pytest.raises(RuntimeError, match=f"{self.name}: rois must be finite"):
            self.fn(x.bfloat16(), rois, *[e.bfloat16() for e in extra], variant=variant)

    def test_huge_roi_is_bounded(self, device):
        """In the integer-edge worker (a hang fails the case only): before the adaptive grid cap this looped for
        hours."""
        seed = edges.seed()
        result = edges.run_in_worker(__name__, f"huge_roi-{self.name}", device, 0, seed)
        where = f"{self.name} with a 1e9 RoI on {device.type} (VISDET_OPS_TEST_SEED={seed})"
        assert not result.get("timeout"), f"{where}: no result within {edges.CASE_TIMEOUT_S} s"
        assert "crash" not in result, f"{where}: the process died ({result.get('crash')})\n{result.get('stderr')}"
        assert result["ok"], f"{where}: {result['type']}: {result['message']}"


def _huge_roi_case(op: str, device, _value, gen):
    """A RoI with a huge finite coordinate: the adaptive grid is capped at the map side + 1 per side, so the call is
    quick and equals an explicit sampling_ratio of side + 1 (square map: the same on both axes; roi_align_rotated:
    H + W + 2, the sampled region's diagonal bound). roi_pool visits only the pixels of a bin inside the map."""
    from visdet_ops.ops.deform_roi_pool import deform_roi_pool
    from visdet_ops.ops.roi_align import roi_align
    from visdet_ops.ops.roi_align_rotated import roi_align_rotated
    from visdet_ops.ops.roi_pool import roi_pool
    from visdet_ops.reference.deform_roi_pool import deform_roi_pool_reference
    from visdet_ops.reference.roi_align import roi_align_reference
    from visdet_ops.reference.roi_align_rotated import roi_align_rotated_reference

    x = torch.rand(1, 2, 8, 8, generator=gen, dtype=torch.float64).to(device)
    rois = torch.tensor([[0, -1e9, -1e9, 1e9, 1e9], [0, 0.0, 0.0, 1e9, 3.0]], dtype=torch.float64).to(device)
    # The same boxes as rotated RoIs (centre, size), turned a little.
    rotated = torch.tensor([[0, 0.0, 0.0, 2e9, 2e9, 0.3], [0, 5e8, 1.5, 1e9, 3.0, 0.0]], dtype=torch.float64)
    rotated = rotated.to(device)
    calls = {
        "roi_align": lambda sr: roi_align(x, rois, 2, 1.0, sr, "avg", True),
        "deform_roi_pool": lambda sr: deform_roi_pool(x, rois, None, 2, 1.0, sr, 0.1),
        "roi_pool": lambda sr: roi_pool(x, rois, 2, 1.0),
        "roi_align_rotated": lambda sr: roi_align_rotated(x, rotated, 2, 1.0, sr, True, False),
    }
    fn = calls[op]
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
    # Row 0: both axes capped at 9 (rotated: 18). Row 1: x capped, y adaptive ceil(3 / 2) = 2.
    cap = 18 if op == "roi_align_rotated" else 9
    torch.testing.assert_close(got[:1], fn(cap)[:1], rtol=0, atol=0)
    if op == "roi_align":
        want = roi_align_reference(x.cpu(), rois.cpu(), (2, 2), 1.0, 0, "avg", True)
    elif op == "roi_align_rotated":
        want = roi_align_rotated_reference(x.cpu(), rotated.cpu(), (2, 2), 1.0, 0, True, False)
    else:
        want = deform_roi_pool_reference(x.cpu(), rois.cpu(), None, (2, 2), 1.0, 0, 0.1)
    edges.close(got, want)


for _op in ("roi_align", "roi_pool", "deform_roi_pool", "roi_align_rotated"):
    edges.register_case(f"huge_roi-{_op}", lambda device, value, gen, _op=_op: _huge_roi_case(_op, device, value, gen))


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


class Heads(torch.nn.Module):
    """Several RoI modules on one (x, rois): the ONNX tests' model, each module a head of its output tuple."""

    def __init__(self, heads):
        super().__init__()
        self.heads = torch.nn.ModuleList(heads)

    def forward(self, x, rois):
        return tuple(head(x, rois) for head in self.heads)


def onnx_export_and_run(onnx_table, make_heads, node: str, sizes, rng, compare) -> None:
    """Exports Heads(make_heads()) with dynamic sizes (it must contain the standard ONNX `node`), then runs it in
    onnxruntime on inputs of each of `sizes` ((batch, channels, height, width, k, scale)): compare(head index, got,
    want) against eager."""
    from .. import onnx_harness as ox

    x = torch.randn(2, 3, 10, 12, generator=rng)
    onnx_model = ox.export(onnx_table, Heads(make_heads()), (x, onnx_rois(6, 2, 10, 12, rng, 0.5)), onnx_map_dims())
    assert node in ox.op_types(onnx_model)
    for batch, channels, height, width, k, scale in sizes:
        x = torch.randn(batch, channels, height, width, generator=rng)
        rois = onnx_rois(k, batch, height, width, rng, scale)
        got = ox.run(onnx_model, x, rois)
        for i, (g, w) in enumerate(zip(got, Heads(make_heads())(x, rois), strict=True)):
            compare(i, g, w)


# ---------------------------------------------------------------- integer edges and autocast


def pooled_edge_rows(function, module, call, call_module, op_call, backward_op_call, sampling_at_bound=()):
    """The integer-edge rows (tests/integer_edge_harness.py) of an RoI op whose function and module take
    output_size and sampling_ratio: call(device, gen, output_size=, sampling_ratio=) runs the function (named
    `function`), call_module(...) the module (`module`), op_call(device, gen, ph=, pw=, sr=) the registered op and
    backward_op_call(device, gen, sr) its backward op. sampling_at_bound: sampling_ratio values at the bound cheap
    enough to run through the function."""
    op, backward = f"op.{function}", f"op._{function}_backward"
    return [
        edges.kw_row(f"{function}-output_size", "output_size", _args.POOLED_SIZE, call),
        edges.kw_row(
            f"{function}-sampling_ratio", "sampling_ratio", _args.SAMPLING_RATIO, call, at_bound=sampling_at_bound
        ),
        edges.kw_row(f"{module}-output_size", "output_size", _args.POOLED_SIZE, call_module),
        edges.kw_row(f"{module}-sampling_ratio", "sampling_ratio", _args.SAMPLING_RATIO, call_module),
        edges.Row(
            f"{op}-pooled_height", edges.names("pooled_height"), _args.POOLED_SIZE, lambda d, v, g: op_call(d, g, ph=v)
        ),
        edges.Row(
            f"{op}-pooled_width", edges.names("pooled_width"), _args.POOLED_SIZE, lambda d, v, g: op_call(d, g, pw=v)
        ),
        edges.Row(
            f"{op}-sampling_ratio", ("sampling_ratio",), _args.SAMPLING_RATIO, lambda d, v, g: op_call(d, g, sr=v)
        ),
        edges.Row(
            f"{backward}-sampling_ratio",
            ("sampling_ratio",),
            _args.SAMPLING_RATIO,
            lambda d, v, g: backward_op_call(d, g, v),
        ),
    ]


def rois_autocast_case(gen, rois, function, layer, module=False):
    """The autocast case (tests/autocast_harness.py) of an RoI op after a convolution stem: function(x, rois), or
    with module=True the module `layer` (a parameter of the case either way) as layer(x, rois)."""

    def body(p, img, rois):
        x = p["stem"](img)
        return p["layer"](x, rois) if module else function(x, rois)

    return amp.Case(body, (amp.img(gen), rois), amp.LOW, stem=amp.Stem(8, gen), layer=layer)


def rois_autocast_cases(make_rois, modules: dict, **functions) -> dict:
    """An RoI op's AUTOCAST_CASES, each rois_autocast_case over the RoIs make_rois(gen): each of `functions` (name
    -> function(x, rois)) and each of `modules` (class name -> a factory of the module). A function's case carries
    the first module as its parameter."""
    first = next(iter(modules.values()))
    cases = {name: lambda g, f=f: rois_autocast_case(g, make_rois(g), f, first()) for name, f in functions.items()}
    for name, factory in modules.items():
        cases[name] = lambda g, factory=factory: rois_autocast_case(g, make_rois(g), None, factory(), module=True)
    return cases
