"""The fuzz families (issue 25, item 6): per op module of visdet_ops/ops/, a hypothesis strategy drawing cases for
every public function and module of its __all__, and the runner that makes the call and judges it against the
float64 reference (tests/fuzz_core.py: the case format and the oracle; tests/fuzz_worker.py drives them).

Each strategy draws mostly valid calls (shapes with 0-sized dimensions, every float dtype, non-contiguous,
channels_last and expanded layouts, numbers of the arguments' whole range) and about one in four invalid ones
(`bad`: a wrong number of dims, a mismatched size, a non-float dtype, an out-of-range integer, a wrong string),
which must raise a clear error. Mixed dtypes and (on CUDA) mixed devices are drawn now and then, expectation
`either`.

KNOWN_BUGS lists the bugs the fuzzing found that are not fixed yet: a case it matches is skipped (a crash or a
hang: not run at all) or allowed to fail, and counted; tests/test_fuzz.py runs each one's reproducer as a strict
xfail, so a fix shows up (and its entry must go).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from hypothesis import strategies as st

try:
    from . import fuzz_core as core
except ImportError:  # run as a script from tests/ (fuzz_worker.py)
    import fuzz_core as core

import visdet_ops
from visdet_ops.reference.bbox_overlaps import bbox_overlaps_reference
from visdet_ops.reference.carafe import carafe_reference
from visdet_ops.reference.corner_pool import corner_pool_reference
from visdet_ops.reference.deform_conv import deform_conv2d_reference
from visdet_ops.reference.deform_roi_pool import deform_roi_pool_reference
from visdet_ops.reference.focal_loss import sigmoid_focal_loss_reference, softmax_focal_loss_reference
from visdet_ops.reference.masked_conv import masked_conv2d_reference
from visdet_ops.reference.multi_scale_deform_attn import multi_scale_deformable_attn_reference
from visdet_ops.reference.nms import nms_match_reference, nms_reference, soft_nms_reference
from visdet_ops.reference.roi_align import roi_align_reference
from visdet_ops.reference.roi_pool import roi_pool_reference

FLOATS, Run, Mismatch = core.FLOATS, core.Run, core.Mismatch
one_in, draw_tensors, bad_int = core.one_in, core.draw_tensors, core.bad_int
assert_close, check_grads, worst = core.assert_close, core.check_grads, core.worst


@dataclass(frozen=True)
class Family:
    name: str  # the op module: visdet_ops/ops/<name>.py
    fns: tuple[str, ...]  # the public names its cases call (must cover the module's __all__)
    strategy: Callable  # strategy(device) -> a hypothesis strategy of cases
    run: Callable  # run(case) -> None, raising Mismatch on a finding
    ops: tuple[str, ...] = ()  # registered op names its errors may name
    weight: float = 1.0  # share of the example budget (slow references get less)


FAMILIES: dict[str, Family] = {}


def _numpy_works() -> bool:
    """NumPy in and out (the NMS family's mmcv behaviour) is drawn only where torch can use NumPy: the package needs
    torch only, and a venv without numpy, or with one torch was not built against, must not fail the fuzz."""
    try:
        import numpy  # noqa: F401

        torch.zeros(1).numpy()
    except Exception:
        return False
    return True


HAS_NUMPY = _numpy_works()


def family(name: str, fns, ops=(), weight: float = 1.0):
    def register(pair):
        strategy, run = pair
        FAMILIES[name] = Family(name, tuple(fns), strategy, run, tuple(ops) or (name,), weight)
        return pair

    return register


def expectation(bad, mixed: bool, borderline: bool = False) -> str:
    if bad:
        return "error"
    return "either" if mixed or borderline else "ok"


def size(draw, lo: int, hi: int) -> int:
    """A size in [lo, hi], or 0 about one time in eight."""
    return 0 if draw(one_in(8)) else draw(st.integers(lo, hi))


def pick_bad(draw, mutations) -> str | None:
    """A mutation about one case in four (None shrinks first: a failing invalid case shrinks to a valid one
    when that fails too)."""
    if not mutations or not draw(one_in(4)):
        return None
    return draw(st.sampled_from(list(mutations)))


def names_for(case: dict, fam: str, *extra: str) -> set[str]:
    return {case["fn"], *FAMILIES[fam].ops, *extra}


def rand_grad(run: Run, out: torch.Tensor) -> torch.Tensor:
    return run.randn(*out.shape).to(out.dtype).to(out.device)


def ref_backward(want: torch.Tensor, grad: torch.Tensor) -> None:
    """The reference's backward (a reference output built of constants alone, e.g. only empty bins, has none)."""
    if want.requires_grad:
        want.backward(grad.detach().cpu().double())


def out_dtype_ok(got: torch.Tensor, dt: str, mixed: bool, what: str = "output") -> None:
    if not mixed and got.dtype != core.DTYPES[dt]:
        raise Mismatch(f"{what} dtype {got.dtype}, the input's is {core.DTYPES[dt]}")


# ================================================================= bbox_overlaps

_BBOX_BAD = ("last5", "batch", "aligned_mn", "mode", "offset", "eps", "dtype", "conflict", "ndim1")


@st.composite
def _bbox_case(draw, device):
    bad = pick_bad(draw, _BBOX_BAD)
    main = draw(st.sampled_from(FLOATS))
    batch = draw(st.lists(st.integers(0, 3), max_size=2))
    top = 300 if draw(one_in(10)) else 7  # now and then many boxes (the kernels' vector loops)
    m, n = draw(st.integers(0, top)), draw(st.integers(0, top))
    aligned = draw(st.sampled_from([None, False, True]))
    if aligned:
        n = m
    case = {
        "fn": "bbox_overlaps",
        "seed": draw(st.integers(0, 2**31 - 1)),
        "batch": batch,
        "m": m,
        "n": n,
        "mode": draw(st.sampled_from(["iou", "iof", "giou"])),
        "aligned": aligned,
        "is_aligned": draw(st.sampled_from([None, None, False, True])),
        "offset": draw(st.sampled_from([0, 1])),
        "eps": draw(st.sampled_from([None, 0.0, 1e-6, 0.5])),
        "degenerate": draw(one_in(5)),
        "special": draw(one_in(8)),
        "empty1d": bad is None and not batch and m == 0 and draw(one_in(3)),
        "bad": bad,
    }
    if case["is_aligned"] is not None and case["aligned"] is not None:
        case["is_aligned"] = case["aligned"]  # agreeing; "conflict" makes them disagree
    if case["is_aligned"] and not case["aligned"]:
        case["n"] = m
    nd = len(batch) + 2
    case["t"], mixed = draw_tensors(draw, {"bboxes1": nd, "bboxes2": nd}, main, device)
    if bad == "dtype":
        case["t"]["bboxes1"]["dt"] = draw(st.sampled_from(core.NON_FLOATS))
    elif bad == "mode":
        case["mode"] = draw(st.sampled_from(["diou", "IoU", ""]))
    elif bad == "offset":
        case["offset"] = draw(st.sampled_from([2, -1, 0.5]))
    elif bad == "eps":
        case["eps"] = draw(st.sampled_from([-1.0, float("nan"), float("inf"), True, "1e-6"]))
    elif bad == "conflict":
        case["aligned"], case["is_aligned"] = True, False
        case["n"] = m
    elif bad == "aligned_mn":
        case["aligned"], case["is_aligned"], case["n"] = True, None, m + 1
    elif bad == "batch" and not batch:
        case["batch"] = [draw(st.integers(1, 3))]  # bboxes1 batched, bboxes2 not (set in run)
    case["expect"] = expectation(bad, mixed)
    return case


def _bbox_run(case):
    run = Run(case, names_for(case, "bbox_overlaps"), {"bboxes1", "bboxes2", "mode", "aligned", "offset", "eps"})
    bad, batch, m, n = case["bad"], list(case["batch"]), case["m"], case["n"]
    shape1, shape2 = [*batch, m, 4], [*batch, n, 4]
    if bad == "batch":
        shape2 = [*batch[1:], n, 4] if len(batch) == 1 else [batch[0] + 1, *batch[1:], n, 4]
    if bad == "last5":
        shape1[-1] = 5
    if bad == "ndim1":
        shape1 = [4]

    def boxes(shape):
        count = 1
        for s in shape[:-1]:
            count *= s
        b = core.grid_boxes(run, count, span=40, size=20)
        if shape[-1] == 5:
            b = torch.cat([b, run.rand(count, 1)], 1)
        if case["degenerate"] and count:
            b[::3, [0, 2]] = b[::3, [2, 0]]  # negative widths
        if case["special"] and count:
            b[count // 2, count % 4] = [float("nan"), float("inf"), -float("inf")][count % 3]
        return b.reshape(shape)

    a1, a2 = run.arg("bboxes1", boxes(shape1)), run.arg("bboxes2", boxes(shape2))
    kwargs = {}
    if case["is_aligned"] is not None:
        kwargs["is_aligned"] = case["is_aligned"]
    if case["eps"] is not None:
        kwargs["eps"] = case["eps"]
    mixed = case["expect"] == "either"
    dt = worst(a1.dt, a2.dt)
    x1, x2 = a1.x(grad=True), a2.x(grad=True)
    if case["empty1d"]:
        x1 = torch.empty(0, dtype=x1.dtype, device=x1.device)
    aligned = bool(case["aligned"] if case["aligned"] is not None else case["is_aligned"])
    eps = 1e-6 if case["eps"] is None else case["eps"]

    def check(out):
        r1l, r1 = a1.ref(grad=True)
        r2l, r2 = a2.ref(grad=True)
        if case["empty1d"]:
            r1 = torch.empty(0, 4, dtype=torch.float64)
        want = bbox_overlaps_reference(r1, r2, case["mode"], aligned, case["offset"], eps)
        assert_close("output", out, want, dt)
        out_dtype_ok(out, a1.dt, mixed)
        if run.grads and out.numel() and not case["special"] and not case["empty1d"]:
            g = rand_grad(run, out)
            run.backward(out, g)
            ref_backward(want, g)
            check_grads([("bboxes1", a1, r1l), ("bboxes2", a2, r2l)], dt)

    run.outcome(
        lambda: visdet_ops.bbox_overlaps(x1, x2, case["mode"], case["aligned"], case["offset"], **kwargs), check
    )


family("bbox_overlaps", ["bbox_overlaps"])((_bbox_case, _bbox_run))


# ================================================================= corner_pool

_POOL_FNS = {"top_pool": "top", "bottom_pool": "bottom", "left_pool": "left", "right_pool": "right"}
_CORNER_BAD = ("ndim", "mode", "complex")


@st.composite
def _corner_case(draw, device):
    fn = draw(st.sampled_from(["corner_pool", *_POOL_FNS, "CornerPool"]))
    bad = pick_bad(draw, [b for b in _CORNER_BAD if b != "mode" or fn in ("corner_pool", "CornerPool")])
    main = draw(st.sampled_from(FLOATS))
    case = {
        "fn": fn,
        "seed": draw(st.integers(0, 2**31 - 1)),
        "shape": [draw(st.integers(0, 2)), draw(st.integers(0, 3)), draw(st.integers(0, 6)), draw(st.integers(0, 6))],
        "big": draw(one_in(10)),
        "mode": _POOL_FNS.get(fn) or draw(st.sampled_from(["top", "bottom", "left", "right"])),
        "values": draw(st.sampled_from(["ties", "randn", "special"])),
        "int_input": draw(one_in(6)),
        "bad": bad,
    }
    if case["big"]:  # long scans
        case["shape"][1:] = [draw(st.integers(1, 5)), draw(st.integers(7, 40)), draw(st.integers(7, 40))]
    case["t"], mixed = draw_tensors(draw, {"input": 4}, main, device)
    if case["int_input"]:
        case["t"]["input"]["dt"] = draw(st.sampled_from(["i32", "i64", "bool", "u8", "i16"]))
    if bad == "ndim":
        case["shape"] = case["shape"][: draw(st.integers(1, 3))] if draw(st.booleans()) else [*case["shape"], 2]
    elif bad == "mode":
        case["mode"] = draw(st.sampled_from(["Top", "up", ""]))
    elif bad == "complex":
        case["t"]["input"]["dt"] = "c64"
    case["expect"] = expectation(bad, mixed)
    return case


def _corner_run(case):
    run = Run(case, names_for(case, "corner_pool", "CornerPool"), {"input", "mode"})
    shape = case["shape"]
    if case["values"] == "ties":
        base = run.randint(-3, 4, *shape)
    else:
        base = run.randn(*shape) * 3
        if case["values"] == "special" and base.numel():
            flat = base.view(-1)
            flat[:: max(1, flat.numel() // 3)] = float("nan")
            flat[1 :: max(1, flat.numel() // 2)] = float("inf")
    a = run.arg("input", base)
    dt = a.dt
    x = a.x(grad=True)
    mode = case["mode"]
    fn = case["fn"]

    def call():
        if fn == "CornerPool":
            return visdet_ops.CornerPool(mode)(x)
        if fn == "corner_pool":
            return visdet_ops.corner_pool(x, mode)
        return getattr(visdet_ops, fn)(x)

    def check(out):
        if not a.floating:
            from visdet_ops.reference.corner_pool import _DIM_FLIP

            d, flip = _DIM_FLIP[mode]
            xs = x.detach().cpu()
            want = torch.cummax(xs.flip(d) if flip else xs, d).values
            want = want.flip(d) if flip else want
            if out.dtype != xs.dtype or not torch.equal(out.cpu(), want):
                raise Mismatch(f"integer corner_pool differs from torch.cummax ({out.dtype})")
            return
        rl, r = a.ref(grad=True)
        want = corner_pool_reference(r, mode)
        assert_close("output", out, want, dt)
        out_dtype_ok(out, dt, False)
        if run.grads and out.numel():
            g = rand_grad(run, out)
            run.backward(out, g)
            ref_backward(want, g)
            # Ties follow torch.cummax exactly, so 16-bit gradients are compared too (sums of routed values).
            gw, gg = rl.grad, a.grad()
            if gg is None:
                raise Mismatch("grad of input: none")
            assert_close("grad of input", gg, gw, dt)

    run.outcome(call, check)


family("corner_pool", ["corner_pool", *_POOL_FNS, "CornerPool"])((_corner_case, _corner_run))


# ================================================================= carafe

_CARAFE_FN_BAD = ("even_k", "groups", "mask_channels", "mask_size", "ndim", "dtype", "kernel_int", "scale_int")
_CARAFE_CTOR_BAD = ("ctor_int", "ctor_float", "ctor_even")


@st.composite
def _carafe_case(draw, device):
    fn = draw(st.sampled_from(["carafe", "carafe_naive", "CARAFE", "CARAFENaive", "CARAFEPack"]))
    main = draw(st.sampled_from(FLOATS))
    case = {"fn": fn, "seed": draw(st.integers(0, 2**31 - 1))}
    g = draw(st.sampled_from([1, 2, 3]))
    case.update(
        n=draw(st.integers(0, 2)),
        g=g,
        c=g * draw(st.integers(0 if fn != "CARAFEPack" else 1, 3)),
        h=draw(st.integers(0, 5)),
        w=draw(st.integers(0, 5)),
        big=draw(one_in(10)),
        k=draw(st.sampled_from([1, 3, 5])),
        s=draw(st.sampled_from([1, 2, 3])),
    )
    if case["big"]:  # more channels than one CUDA chunk (32), maps larger than a tile side
        case.update(c=g * draw(st.integers(1, 14)), h=draw(st.integers(6, 12)), w=draw(st.integers(6, 12)))
    if fn == "CARAFEPack":
        bad = pick_bad(draw, ("ctor_int", "ctor_even", "ctor_float"))
        case["ctor"] = {
            "channels": case["c"],
            "scale_factor": case["s"],
            "up_kernel": case["k"],
            "up_group": g,
            "encoder_kernel": draw(st.sampled_from([1, 3])),
            "encoder_dilation": draw(st.sampled_from([1, 2])),
            "compressed_channels": draw(st.integers(1, 4)),
        }
        main = draw(st.sampled_from(["f32", "f64"]))
        case["t"], mixed = {"x": {"dt": main, "lay": draw(st.sampled_from(["c", "cl", "t"])), "dev": device}}, False
    else:
        bad = pick_bad(draw, _CARAFE_FN_BAD + (_CARAFE_CTOR_BAD if fn in ("CARAFE", "CARAFENaive") else ()))
        case["t"], mixed = draw_tensors(draw, {"features": 4, "masks": 4}, main, device)
    if bad == "dtype":
        case["t"][draw(st.sampled_from(["features", "masks"]))]["dt"] = draw(st.sampled_from(core.NON_FLOATS))
    elif bad == "even_k":
        case["k"] = draw(st.sampled_from([2, 4]))
    elif bad == "groups":
        case["g"] = g = max(g, 2)
        case["c"] = g * draw(st.integers(0, 2)) + draw(st.integers(1, g - 1))
    elif bad in ("kernel_int", "scale_int", "ctor_int"):
        case["arg"] = draw(st.sampled_from(["kernel_size", "group_size", "scale_factor"]))
        if fn == "CARAFEPack":
            case["arg"] = draw(st.sampled_from(sorted(case["ctor"])))
        case["value"] = draw(bad_int())
    elif bad == "ctor_float":
        case["arg"] = draw(st.sampled_from(["kernel_size", "group_size", "scale_factor"]))
        if fn == "CARAFEPack":
            case["arg"] = draw(st.sampled_from(sorted(case["ctor"])))
        case["value"] = draw(st.sampled_from([1.5, "3", None]))
    elif bad == "ctor_even":
        case["arg"], case["value"] = "up_kernel" if fn == "CARAFEPack" else "kernel_size", 4
    elif bad == "ndim":
        case["arg"] = draw(st.sampled_from(["features", "masks"]))
    case["bad"] = bad
    # An int that happens to be valid (bad_int's 0 for a non-negative one, ...) is checked by its range in run().
    case["expect"] = expectation(bad, mixed)
    return case


def _carafe_run(case):
    fn, bad = case["fn"], case["bad"]
    run = Run(
        case,
        names_for(case, "carafe", "carafe_naive", "CARAFE", "CARAFENaive"),
        {
            "features",
            "masks",
            "kernel_size",
            "group_size",
            "scale_factor",
            "channels",
            "up_kernel",
            "up_group",
            "encoder_kernel",
            "encoder_dilation",
            "compressed_channels",
        },
    )
    n, c, h, w, k, g, s = (case[key] for key in "nchwkgs")
    if fn == "CARAFEPack":
        kwargs = dict(case["ctor"])
        if bad:
            kwargs[case["arg"]] = case["value"]
        torch.manual_seed(case["seed"])
        mod = run.construct(lambda: visdet_ops.CARAFEPack(**kwargs))
        if mod is None:
            return
        dt = case["t"]["x"]["dt"]
        mod = mod.to(run.device, core.DTYPES[dt])
        with torch.no_grad():
            mod.content_encoder.weight.normal_(0, 0.3)
        h, w = max(h, 1), max(w, 1)
        a = run.arg("x", run.randn(n, c, h, w))
        x = a.x(grad=True)

        def check(out):
            rl, r = a.ref(grad=True)
            m64 = copy.deepcopy(mod).cpu().double()
            mask = m64.kernel_normalizer(m64.content_encoder(m64.channel_compressor(r)))
            if r.numel():
                want = carafe_reference(r, mask, m64.up_kernel, m64.up_group, m64.scale_factor)
            else:
                want = torch.zeros(n, c, h * s, w * s, dtype=torch.float64)
            assert_close("output", out, want, dt)

        run.outcome(lambda: mod(x), check, expect="ok")
        return
    fshape = [n, c, h, w]
    mshape = [n, k * k * g, h * s, w * s]
    if bad == "mask_channels":
        mshape[1] += 1
    elif bad == "mask_size":
        mshape[2 + case["seed"] % 2] += 1
    elif bad == "ndim":
        if case["arg"] == "features":
            fshape = fshape[1:]
        else:
            mshape = mshape[1:]
    feats = run.arg("features", run.randn(*fshape))
    masks = run.arg("masks", run.rand(*mshape) + 0.1)
    ints = {"kernel_size": k, "group_size": g, "scale_factor": s}
    if bad in ("kernel_int", "scale_int", "ctor_int", "ctor_float", "ctor_even"):
        ints[case["arg"]] = case["value"]
    mixed = case["expect"] == "either"
    dt = worst(feats.dt, masks.dt)
    xf, xm = feats.x(grad=True), masks.x(grad=True)

    if fn in ("CARAFE", "CARAFENaive"):
        # The constructor checks the three ints (type and range); an even kernel_size fails at the forward.
        ctor_bad = bad in ("kernel_int", "scale_int", "ctor_int", "ctor_float")
        mod = run.construct(lambda: getattr(visdet_ops, fn)(*ints.values()), expect="error" if ctor_bad else "ok")
        if mod is None:
            return
        call = lambda: mod(xf, xm)  # noqa: E731
    else:
        call = lambda: getattr(visdet_ops, fn)(xf, xm, *ints.values())  # noqa: E731

    def check(out):
        rfl, rf = feats.ref(grad=True)
        rml, rm = masks.ref(grad=True)
        if rf.numel():
            want = carafe_reference(rf, rm, k, g, s)
        else:  # F.unfold (the reference) takes no empty map
            want = (rf.sum() + rm.sum()) * torch.zeros(n, c, h * s, w * s, dtype=torch.float64)
        assert_close("output", out, want, dt)
        out_dtype_ok(out, feats.dt, mixed)
        if run.grads and out.numel():
            grad = rand_grad(run, out)
            run.backward(out, grad)
            ref_backward(want, grad)
            check_grads([("features", feats, rfl), ("masks", masks, rml)], dt)

    run.outcome(call, check)


family("carafe", ["carafe", "carafe_naive", "CARAFE", "CARAFENaive", "CARAFEPack"], ops=("carafe", "carafe_naive"))(
    (_carafe_case, _carafe_run)
)


# ================================================================= deform_conv

_DCN_FNS = ("deform_conv2d", "modulated_deform_conv2d")
_DCN_MODS = ("DeformConv2d", "DeformConv2dPack", "ModulatedDeformConv2d", "ModulatedDeformConv2dPack")
_DCN_BAD = (
    "offset_channels",
    "offset_size",
    "weight_channels",
    "dg_divide",
    "groups_divide",
    "ndim",
    "dtype",
    "int_arg",
    "bias_v1",
    "mask_shape",
    "bias_shape",
)
_DCN_CTOR_BAD = ("ctor_int", "ctor_divide", "ctor_bias")
_DCN_INTS = ("stride", "padding", "dilation", "groups", "deform_groups")


def _pair_or_int(draw, lo, hi):
    a = draw(st.integers(lo, hi))
    if draw(st.booleans()):
        return a
    return [a, draw(st.integers(lo, hi))]


def _pair(v):
    return (v, v) if isinstance(v, int) else tuple(v)


def _conv_out(size, pad, dil, k, stride):
    return (size + 2 * pad - (dil * (k - 1) + 1)) // stride + 1


@st.composite
def _dcn_case(draw, device):
    fn = draw(st.sampled_from(_DCN_FNS + _DCN_MODS))
    module = fn in _DCN_MODS
    g, dg = draw(st.sampled_from([1, 2])), draw(st.sampled_from([1, 2]))
    lcm = 2 if 2 in (g, dg) else 1
    case = {
        "fn": fn,
        "seed": draw(st.integers(0, 2**31 - 1)),
        "n": draw(st.integers(0, 2)),
        "groups": g,
        "deform_groups": dg,
        "c": lcm * draw(st.integers(0 if not module else 1, 2)),
        "cout": g * draw(st.integers(1, 2)),
        "k": [draw(st.integers(1, 3)), draw(st.integers(1, 3))],
        "stride": _pair_or_int(draw, 1, 2),
        "padding": _pair_or_int(draw, 0, 2),
        "dilation": _pair_or_int(draw, 1, 2),
        "h": draw(st.integers(0 if not module else 1, 6)),
        "w": draw(st.integers(0 if not module else 1, 6)),
        "bias": draw(st.booleans()) if fn != "DeformConv2d" and fn != "DeformConv2dPack" else False,
        "im2col_step": draw(st.sampled_from([None, 1, 2, 0, -1, 5])),
        "reach": draw(st.sampled_from([0.0, 1.5, 4.0])),
    }
    if draw(one_in(10)):  # several im2col chunks, more channels and a larger map
        case.update(
            n=draw(st.integers(3, 5)),
            c=lcm * draw(st.integers(3, 10)),
            h=draw(st.integers(6, 12)),
            w=draw(st.integers(6, 12)),
        )
    if module:
        bad = pick_bad(draw, _DCN_CTOR_BAD if fn != "DeformConv2d" else _DCN_CTOR_BAD + ("offset_channels",))
        if bad == "ctor_bias" and fn not in ("DeformConv2d", "DeformConv2dPack"):
            bad = "ctor_divide"
        case["deformable_kw"] = draw(one_in(6))
        main = draw(st.sampled_from(["f32", "f64"]))
        # No channels_last x for the Pack modules: torch 2.13's CPU conv2d (their conv_offset) segfaults on some
        # channels_last inputs (a torch bug: F.conv2d(torch.randn(2, 4, 2, 1).contiguous(memory_format=
        # torch.channels_last), torch.randn(4, 4, 1, 1), torch.randn(4), stride=2, padding=1, dilation=(1, 2))).
        lay = {
            "x": ["c", "t"] if fn.endswith("Pack") else ["c", "cl", "t"],
            "offset": ["c", "t", "s"],
            "mask": ["c", "s"],
        }
        case["t"], mixed = draw_tensors(draw, {"x": 4, "offset": 4, "mask": 4}, main, device, layouts=lay)
        for o in case["t"].values():
            o["dt"] = main
            if device != "cpu":
                o["dev"] = device
            if device != "cpu":
                o["dev"] = device
        mixed = False
    else:
        v1_only, v2_only = {"bias_v1"}, {"mask_shape", "bias_shape"}
        bad = pick_bad(draw, [b for b in _DCN_BAD if b not in (v2_only if fn == "deform_conv2d" else v1_only)])
        if bad == "bias_shape":
            case["bias"] = True
        main = draw(st.sampled_from(FLOATS))
        case["t"], mixed = draw_tensors(
            draw, {"input": 4, "offset": 4, "mask": 4, "weight": 4, "bias": 1}, main, device
        )
    if bad == "int_arg":
        case["arg"] = draw(st.sampled_from(_DCN_INTS + (("im2col_step",) if fn == "deform_conv2d" else ())))
        case["value"] = draw(bad_int() if case["arg"] != "im2col_step" else st.sampled_from([1.5, "2", 2**63]))
        if case["arg"] == "padding" and case["value"] == 0:
            case["value"] = -1
    elif bad == "ctor_int":
        case["arg"] = draw(st.sampled_from(("in_channels", "out_channels", "kernel_size") + _DCN_INTS))
        case["value"] = draw(bad_int())
        if case["arg"] == "padding" and case["value"] == 0:
            case["value"] = -1
    elif bad == "dtype":
        case["arg"] = draw(st.sampled_from(["input", "offset", "weight"]))
        case["t"][case["arg"]]["dt"] = draw(st.sampled_from(core.NON_FLOATS))
    elif bad == "dg_divide":
        case["c"] = max(case["c"], 2 * g)
        case["deform_groups"] = next(d for d in range(3, 64) if case["c"] % d)
    elif bad in ("groups_divide", "ctor_divide"):
        case["groups"] = 3
        case["c"] = 2 * dg if case["c"] % 3 == 0 else case["c"]
    sh, sw = _pair(case["stride"])
    ph, pw = _pair(case["padding"])
    dh, dw = _pair(case["dilation"])
    if fn.endswith("Pack"):
        # Their conv_offset (an nn.Conv2d, as mmcv's) sees the input first: an input too small for the kernel gets
        # torch's own error from it. Drawn large enough.
        case["h"] = max(case["h"], dh * (case["k"][0] - 1) + 1 - 2 * ph)
        case["w"] = max(case["w"], dw * (case["k"][1] - 1) + 1 - 2 * pw)
    oh = _conv_out(case["h"], ph, dh, case["k"][0], sh)
    ow = _conv_out(case["w"], pw, dw, case["k"][1], sw)
    small = module and (case["h"] < case["k"][0] or case["w"] < case["k"][1])
    case["expect"] = expectation(bad, mixed, borderline=oh <= 0 or ow <= 0 or case["c"] == 0 or small)
    case["bad"] = bad
    return case


def _dcn_shapes(case):
    kh, kw = case["k"]
    sh, sw = _pair(case["stride"])
    ph, pw = _pair(case["padding"])
    dh, dw = _pair(case["dilation"])
    oh = _conv_out(case["h"], ph, dh, kh, sh)
    ow = _conv_out(case["w"], pw, dw, kw, sw)
    return (kh, kw), (sh, sw), (ph, pw), (dh, dw), oh, ow


def _dcn_reference(x, offset, mask, weight, bias, stride, padding, dilation, groups, dg):
    n, _, h, w = x.shape
    if h * w == 0:  # every sample is outside the map: the output is the bias
        kh, kw = weight.shape[2:]
        oh = _conv_out(h, padding[0], dilation[0], kh, stride[0])
        ow = _conv_out(w, padding[1], dilation[1], kw, stride[1])
        out = (x.sum() + offset.sum() + weight.sum()) * torch.zeros(n, weight.size(0), oh, ow, dtype=torch.float64)
        if mask is not None:
            out = out + mask.sum() * 0
        return out if bias is None else out + bias.reshape(1, -1, 1, 1)
    return deform_conv2d_reference(x, offset, mask, weight, bias, stride, padding, dilation, groups, dg)


def _dcn_run(case):
    fn, bad = case["fn"], case["bad"]
    args = {
        "input",
        "offset",
        "mask",
        "weight",
        "bias",
        "stride",
        "padding",
        "dilation",
        "groups",
        "deform_groups",
        "im2col_step",
        "in_channels",
        "out_channels",
        "kernel_size",
        "deformable_groups",
        "x",
    }
    run = Run(case, names_for(case, "deform_conv", *_DCN_FNS, *_DCN_MODS), args)
    (kh, kw), stride, padding, dilation, oh, ow = _dcn_shapes(case)
    n, c, cout, g, dg = case["n"], case["c"], case["cout"], case["groups"], case["deform_groups"]
    kk = kh * kw
    if fn in _DCN_MODS:
        return _dcn_module_run(case, run)
    v2 = fn == "modulated_deform_conv2d"
    ishape = [n, c, case["h"], case["w"]]
    oshape = [n, 2 * dg * kk, max(oh, 0), max(ow, 0)]
    mshape = [n, dg * kk, max(oh, 0), max(ow, 0)]
    wshape = [cout, c // g if c % g == 0 else c // g + 1, kh, kw]
    bshape = [cout]
    if bad == "offset_channels":
        oshape[1] += 2
    elif bad == "offset_size":
        oshape[2 + case["seed"] % 2] += 1
    elif bad == "weight_channels":
        wshape[1] += 1
    elif bad == "ndim":
        ishape = ishape[1:]
    elif bad == "mask_shape":
        mshape[1] += 1
    elif bad == "bias_shape":
        bshape[0] += 1
    a_in = run.arg("input", run.randn(*ishape))
    a_off = run.arg("offset", run.randn(*oshape) * case["reach"])
    a_mask = run.arg("mask", run.rand(*mshape))
    a_w = run.arg("weight", run.randn(*wshape) * 0.5)
    a_b = run.arg("bias", run.randn(*bshape))
    has_bias = v2 and case["bias"]
    used = [("input", a_in), ("offset", a_off), ("weight", a_w)]
    if v2:
        used.append(("mask", a_mask))
    if has_bias:
        used.append(("bias", a_b))
    dt = worst(*(a.dt for _, a in used))
    mixed = case["expect"] == "either"
    xs = {name: a.x(grad=True) for name, a in used}
    ints = {
        "stride": case["stride"],
        "padding": case["padding"],
        "dilation": case["dilation"],
        "groups": g,
        "deform_groups": dg,
    }
    if case["im2col_step"] is not None and not v2:
        ints["im2col_step"] = case["im2col_step"]
    if bad == "int_arg":
        ints[case["arg"]] = case["value"]
    if bad in ("dg_divide", "groups_divide"):
        pass  # the drawn c, groups and deform_groups disagree

    def call():
        if v2:
            return visdet_ops.modulated_deform_conv2d(
                xs["input"], xs["offset"], xs["mask"], xs["weight"], xs.get("bias"), **ints
            )
        return visdet_ops.deform_conv2d(xs["input"], xs["offset"], xs["weight"], bias=bad == "bias_v1", **ints)

    def check(out):
        refs = {name: a.ref(grad=True) for name, a in used}
        want = _dcn_reference(
            refs["input"][1],
            refs["offset"][1],
            refs["mask"][1] if v2 else None,
            refs["weight"][1],
            refs["bias"][1] if has_bias else None,
            stride,
            padding,
            dilation,
            g,
            dg,
        )
        assert_close("output", out, want, dt)
        out_dtype_ok(out, a_in.dt, mixed)
        if run.grads and out.numel():
            grad = rand_grad(run, out)
            run.backward(out, grad)
            ref_backward(want, grad)
            check_grads([(name, a, refs[name][0]) for name, a in used], dt)

    run.outcome(call, check)


def _dcn_module_run(case, run):
    fn, bad = case["fn"], case["bad"]
    (kh, kw), stride, padding, dilation, oh, ow = _dcn_shapes(case)
    n, c, cout, g, dg = case["n"], case["c"], case["cout"], case["groups"], case["deform_groups"]
    kwargs = {
        "in_channels": c,
        "out_channels": cout,
        "kernel_size": [kh, kw] if kh != kw else kh,
        "stride": case["stride"],
        "padding": case["padding"],
        "dilation": case["dilation"],
        "groups": g,
    }
    if case["deformable_kw"]:
        kwargs["deformable_groups"] = dg
    else:
        kwargs["deform_groups"] = dg
    if fn.startswith("Modulated"):
        kwargs["bias"] = case["bias"]
    elif case["im2col_step"] is not None:
        kwargs["im2col_step"] = case["im2col_step"]
    if bad == "ctor_int":
        kwargs[case["arg"]] = case["value"]
    elif bad == "ctor_bias":
        kwargs["bias"] = True
    torch.manual_seed(case["seed"])
    ctor_bad = bad is not None and bad.startswith("ctor")
    mod = run.construct(lambda: getattr(visdet_ops, fn)(**kwargs), expect="error" if ctor_bad else "ok")
    if mod is None:
        return
    dt = case["t"]["x"]["dt"]
    mod = mod.to(run.device, core.DTYPES[dt])
    if hasattr(mod, "conv_offset"):
        with torch.no_grad():
            mod.conv_offset.weight.normal_(0, 0.5)
            mod.conv_offset.bias.normal_(0, 0.5)
    h, w = case["h"], case["w"]
    a_x = run.arg("x", run.randn(n, c, h, w))
    # DeformConv2d pads an input smaller than the kernel at the bottom/right (mmcv): the offset then has the output
    # size of the input as given (stride 1), cropped back the same way.
    ph_small, pw_small = max(kh - h, 0), max(kw - w, 0)
    if fn in ("DeformConv2d", "ModulatedDeformConv2d"):
        oh_p = _conv_out(h + (ph_small if fn == "DeformConv2d" else 0), padding[0], dilation[0], kh, stride[0])
        ow_p = _conv_out(w + (pw_small if fn == "DeformConv2d" else 0), padding[1], dilation[1], kw, stride[1])
        oh_g, ow_g = (oh_p - ph_small, ow_p - pw_small) if fn == "DeformConv2d" else (oh_p, ow_p)
        ochan = 2 * dg * kh * kw + (2 if bad == "offset_channels" else 0)
        a_off = run.arg("offset", run.randn(n, ochan, max(oh_g, 0), max(ow_g, 0)) * case["reach"])
        a_mask = run.arg("mask", run.rand(n, dg * kh * kw, max(oh_g, 0), max(ow_g, 0)))
        inputs = [a_x, a_off] + ([a_mask] if fn.startswith("Modulated") else [])
    else:
        inputs = [a_x]
    xs = [a.x(grad=True) for a in inputs]

    def check(out):
        m64 = copy.deepcopy(mod).cpu().double()
        refs = [a.ref(grad=True) for a in inputs]
        x = refs[0][1]
        if fn == "DeformConv2dPack":
            offset, mask = m64.conv_offset(x), None
        elif fn == "ModulatedDeformConv2dPack":
            o1, o2, mask = torch.chunk(m64.conv_offset(x), 3, dim=1)
            offset, mask = torch.cat((o1, o2), 1), torch.sigmoid(mask)
        else:
            offset, mask = refs[1][1], refs[2][1] if len(refs) > 2 else None
        if fn == "DeformConv2d" and (ph_small or pw_small):
            x = F.pad(x, (0, pw_small, 0, ph_small))
            offset = F.pad(offset, (0, pw_small, 0, ph_small))
        want = _dcn_reference(
            x, offset, mask, m64.weight, m64.bias if fn.startswith("Mod") else None, stride, padding, dilation, g, dg
        )
        if fn == "DeformConv2d" and (ph_small or pw_small):
            want = want[:, :, : want.size(2) - ph_small, : want.size(3) - pw_small]
        assert_close("output", out, want, dt)
        if run.grads and out.numel():
            grad = rand_grad(run, out)
            run.backward(out, grad.to(out.dtype))
            ref_backward(want, grad)
            check_grads([(f"forward arg {i}", a, r[0]) for i, (a, r) in enumerate(zip(inputs, refs, strict=True))], dt)

    run.outcome(lambda: mod(*xs), check)


family("deform_conv", _DCN_FNS + _DCN_MODS, ops=("deform_conv2d",), weight=0.7)((_dcn_case, _dcn_run))


# ================================================================= RoI ops: roi_align, roi_pool, deform_roi_pool

_ROI_BAD = (
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
def _roi_common(draw, device, fn, extra_bad=(), module=False):
    bad = pick_bad(draw, _ROI_BAD + tuple(extra_bad))
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


def _roi_inputs(run: Run, case: dict, distinct: bool = False):
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


def _on_gpu(case: dict, name: str) -> bool:
    return case["t"][name].get("dev", "cpu") != "cpu"


def _roi_unchecked(run: Run, case: dict) -> None:
    """On CUDA without sync checks a bad RoI (batch index outside [0, N), non-finite coordinate) is not refused: its
    output row must be NaN (documented)."""
    # An empty batch makes every RoI's batch index (drawn in [0, 1)) a bad one.
    empty_batch = case["bad"] is None and case["shape"][0] == 0 and case["k"] > 0
    if (case["bad"] in ("bad_index", "nan_roi") or empty_batch) and run.unchecked_values and _on_gpu(case, "rois"):
        run.expect = "either"
        rows = slice(None) if empty_batch else case["k"] // 2

        def check(out):
            if out.size(1) and not torch.isnan(out[rows]).all():
                raise Mismatch(f"a bad RoI on CUDA (rows {rows}) did not give NaN")

        run.unchecked_check = check


def _out_pair(v):
    return (v, v) if isinstance(v, int) else tuple(v)


def _close_up_to_edges(out, want, rois, reference, dt) -> bool:
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


# ----------------------------------------------------------------- roi_align


@st.composite
def _roi_align_case(draw, device):
    fn = draw(st.sampled_from(["roi_align", "RoIAlign"]))
    extra = ("sampling_ratio", "pool_mode") + (("ctor_torchvision",) if fn == "RoIAlign" else ())
    case = draw(_roi_common(device, fn, extra))
    case["sampling_ratio"] = draw(st.sampled_from([0, -1, 1, 2, 3]))
    case["pool_mode"] = draw(st.sampled_from(["avg", "max"]))
    case["aligned"] = draw(st.booleans())
    if fn == "RoIAlign":
        case["old_names"] = draw(one_in(5))
    if case["bad"] == "sampling_ratio":
        case["sampling_ratio"] = draw(st.sampled_from([-2, 129, 2**31, 1.5, "1"]))
    elif case["bad"] == "pool_mode":
        case["pool_mode"] = draw(st.sampled_from(["sum", "Max", ""]))
    elif case["bad"] == "ctor_torchvision":
        case["pool_mode"] = "max"
    return case


def _roi_align_run(case):
    fn, bad = case["fn"], case["bad"]
    run = Run(
        case,
        names_for(case, "roi_align", "RoIAlign"),
        {
            "input",
            "rois",
            "output_size",
            "spatial_scale",
            "sampling_ratio",
            "pool_mode",
            "aligned",
            "out_size",
            "sample_num",
        },
    )
    a_in, a_rois = _roi_inputs(run, case)
    _roi_unchecked(run, case)
    xi, xr = a_in.x(grad=True), a_rois.x()
    args = (case["output_size"], case["spatial_scale"], case["sampling_ratio"], case["pool_mode"], case["aligned"])
    dt = a_in.dt
    if fn == "RoIAlign":
        ctor_bad = bad in ("output_size", "sampling_ratio", "pool_mode", "ctor_torchvision")
        kwargs = dict(
            zip(("output_size", "spatial_scale", "sampling_ratio", "pool_mode", "aligned"), args, strict=True)
        )
        if case.get("old_names"):
            kwargs["out_size"], kwargs["sample_num"] = kwargs.pop("output_size"), kwargs.pop("sampling_ratio")
        if bad == "ctor_torchvision":
            kwargs["use_torchvision"] = True
        mod = run.construct(lambda: visdet_ops.RoIAlign(**kwargs), expect="error" if ctor_bad else "ok")
        if mod is None:
            return
        call = lambda: mod(xi, xr)  # noqa: E731
    else:
        call = lambda: visdet_ops.roi_align(xi, xr, *args)  # noqa: E731

    def check(out):
        rl, r = a_in.ref(grad=True)
        size = _out_pair(case["output_size"])
        want = roi_align_reference(r, a_rois.r(), size, *args[1:])
        edge = _close_up_to_edges(out, want, a_rois.r(), lambda rois: roi_align_reference(r, rois, size, *args[1:]), dt)
        out_dtype_ok(out, dt, False)
        if run.grads and out.numel() and not edge:
            grad = rand_grad(run, out)
            run.backward(out, grad)
            ref_backward(want, grad)
            # max mode: an expanded input has tied samples, whose gradient goes to the first one in each
            # implementation's own rounding: compared only without ties.
            values = case["pool_mode"] == "avg" or a_in.layout != "e"
            check_grads([("input", a_in, rl)], dt, check_values=values)

    run.outcome(call, check)


family("roi_align", ["roi_align", "RoIAlign"])((_roi_align_case, _roi_align_run))


# ----------------------------------------------------------------- roi_pool


@st.composite
def _roi_pool_case(draw, device):
    fn = draw(st.sampled_from(["roi_pool", "RoIPool"]))
    return draw(_roi_common(device, fn))


def _roi_pool_run(case):
    fn, bad = case["fn"], case["bad"]
    run = Run(case, names_for(case, "roi_pool", "RoIPool"), {"input", "rois", "output_size", "spatial_scale"})
    a_in, a_rois = _roi_inputs(run, case, distinct=True)
    _roi_unchecked(run, case)
    xi, xr = a_in.x(grad=True), a_rois.x()
    dt = a_in.dt
    if fn == "RoIPool":
        mod = run.construct(
            lambda: visdet_ops.RoIPool(case["output_size"], case["spatial_scale"]),
            expect="error" if bad == "output_size" else "ok",
        )
        if mod is None:
            return
        call = lambda: mod(xi, xr)  # noqa: E731
    else:
        call = lambda: visdet_ops.roi_pool(xi, xr, case["output_size"], case["spatial_scale"])  # noqa: E731

    def check(out):
        rl, r = a_in.ref(grad=True)
        # The reference computes bin edges in the kernels' compute dtype for the RoIs' own dtype.
        size = _out_pair(case["output_size"])
        if r.size(1):
            want = roi_pool_reference(r, xr.detach().cpu(), size, case["spatial_scale"])
        else:  # the reference's reshape(channels, -1) takes no channel-less map
            want = r.sum() * torch.zeros(xr.size(0), 0, *size, dtype=torch.float64)
        assert_close("output", out, want, dt)
        out_dtype_ok(out, dt, False)
        if run.grads and out.numel():
            grad = rand_grad(run, out)
            run.backward(out, grad)
            ref_backward(want, grad)
            check_grads([("input", a_in, rl)], dt, check_values=a_in.layout != "e")

    run.outcome(call, check)


family("roi_pool", ["roi_pool", "RoIPool"])((_roi_pool_case, _roi_pool_run))


# ----------------------------------------------------------------- deform_roi_pool

_DRP_MODS = ("DeformRoIPool", "DeformRoIPoolPack", "ModulatedDeformRoIPoolPack")


@st.composite
def _drp_case(draw, device):
    fn = draw(st.sampled_from(["deform_roi_pool", *_DRP_MODS]))
    module = fn != "deform_roi_pool"
    extra = ("sampling_ratio", "gamma") + (("offset_shape",) if fn in ("deform_roi_pool", "DeformRoIPool") else ())
    extra += ("channels", "ctor_int") if fn.endswith("Pack") else ()
    case = draw(_roi_common(device, fn, extra, module=fn.endswith("Pack")))
    case["sampling_ratio"] = draw(st.sampled_from([0, -1, 1, 2, 3]))
    case["gamma"] = draw(st.sampled_from([0.0, 0.1, 0.5, -0.3]))
    if case["bad"] == "gamma":
        case["gamma"] = draw(st.sampled_from([float("nan"), float("inf"), -float("inf")]))
    case["offset"] = draw(st.sampled_from(["none", "tensor", "empty"])) if not fn.endswith("Pack") else "none"
    if fn.endswith("Pack"):
        case["shape"][1] = max(case["shape"][1], 1)
        case["deform_fc_channels"] = draw(st.integers(1, 8))
    o_opts, o_mixed = draw_tensors(draw, {"offset": 4}, case["t"]["input"]["dt"], device)
    case["t"]["offset"] = o_opts["offset"]
    if module:
        case["t"]["offset"]["dt"] = case["t"]["input"]["dt"]
    elif o_mixed and case["offset"] == "tensor" and case["expect"] == "ok":
        case["expect"] = "either"
    if case["bad"] == "sampling_ratio":
        case["sampling_ratio"] = draw(st.sampled_from([-2, 129, 2**31, 1.5, "1"]))
    elif case["bad"] == "offset_shape":
        case["offset"] = "tensor"
    elif case["bad"] == "ctor_int":
        case["arg"] = draw(st.sampled_from(["output_channels", "deform_fc_channels"]))
        case["value"] = draw(bad_int())
    return case


def _drp_run(case):
    fn, bad = case["fn"], case["bad"]
    run = Run(
        case,
        names_for(case, "deform_roi_pool", *_DRP_MODS),
        {
            "input",
            "rois",
            "offset",
            "output_size",
            "spatial_scale",
            "sampling_ratio",
            "gamma",
            "output_channels",
            "deform_fc_channels",
        },
    )
    a_in, a_rois = _roi_inputs(run, case)
    _roi_unchecked(run, case)
    ph, pw = _out_pair(case["output_size"]) if bad != "output_size" else (1, 1)
    k = a_rois.shape[0] if len(a_rois.shape) == 2 else 1
    oshape = [k, 2, ph, pw]
    if bad == "offset_shape":
        oshape[case["seed"] % 4] += 1
    a_off = run.arg("offset", run.randn(*oshape) * 0.3)
    xi, xr = a_in.x(grad=True), a_rois.x()
    if case["offset"] == "tensor":
        xo = a_off.x(grad=True)
    elif case["offset"] == "empty":
        xo = torch.empty(0, dtype=xi.dtype, device=xi.device)
    else:
        xo = None
    dt = worst(a_in.dt, a_off.dt) if case["offset"] == "tensor" else a_in.dt
    mixed = case["expect"] == "either"
    geometry = (case["output_size"], case["spatial_scale"], case["sampling_ratio"], case["gamma"])
    if fn == "deform_roi_pool":
        call = lambda: visdet_ops.deform_roi_pool(xi, xr, xo, *geometry)  # noqa: E731
    else:
        ctor_bad = bad in ("output_size", "sampling_ratio", "ctor_int")
        kwargs = dict(zip(("output_size", "spatial_scale", "sampling_ratio", "gamma"), geometry, strict=True))
        if fn.endswith("Pack"):
            kwargs["output_channels"] = case["shape"][1] + (1 if bad == "channels" else 0)
            kwargs["deform_fc_channels"] = case["deform_fc_channels"]
            if bad == "ctor_int":
                kwargs[case["arg"]] = case["value"]
        torch.manual_seed(case["seed"])
        mod = run.construct(lambda: getattr(visdet_ops, fn)(**kwargs), expect="error" if ctor_bad else "ok")
        if mod is None:
            return
        if a_in.floating:
            mod = mod.to(run.device, core.DTYPES[a_in.dt])
        if fn.endswith("Pack"):
            with torch.no_grad():  # the last layers start at zero (mmcv): non-zero offsets and masks
                mod.offset_fc[-1].weight.normal_(0, 0.1)
            if hasattr(mod, "mask_fc"):
                with torch.no_grad():
                    mod.mask_fc[2].weight.normal_(0, 0.1)
            call = lambda: mod(xi, xr)  # noqa: E731
        else:
            call = lambda: mod(xi, xr, xo)  # noqa: E731

    def check(out):
        rl, r = a_in.ref(grad=True)
        rol, ro = a_off.ref(grad=True)
        size, scale, ratio, gamma = (ph, pw), *geometry[1:]
        m64 = copy.deepcopy(mod).cpu().double() if fn.endswith("Pack") else None

        def reference(rois):
            if m64 is None:
                return deform_roi_pool_reference(
                    r, rois, ro if case["offset"] == "tensor" else None, size, scale, ratio, gamma
                )
            first = deform_roi_pool_reference(r, rois, None, size, scale, ratio, gamma).flatten(1)
            want = deform_roi_pool_reference(
                r, rois, m64.offset_fc(first).view(rois.size(0), 2, ph, pw), size, scale, ratio, gamma
            )
            if hasattr(m64, "mask_fc"):
                want = want * m64.mask_fc(first).view(rois.size(0), 1, ph, pw)
            return want

        want = reference(a_rois.r())
        edge = _close_up_to_edges(out, want, a_rois.r(), reference, dt)
        out_dtype_ok(out, a_in.dt, mixed)
        if run.grads and out.numel() and not edge:
            grad = rand_grad(run, out)
            run.backward(out, grad)
            ref_backward(want, grad)
            pairs = [("input", a_in, rl)] + ([("offset", a_off, rol)] if case["offset"] == "tensor" else [])
            check_grads(pairs, dt)

    run.outcome(call, check)


family("deform_roi_pool", ["deform_roi_pool", *_DRP_MODS], weight=0.7)((_drp_case, _drp_run))


# ================================================================= focal_loss

_FOCAL_FNS = ("sigmoid_focal_loss", "softmax_focal_loss")
_FOCAL_MODS = ("SigmoidFocalLoss", "SoftmaxFocalLoss")
_FOCAL_BAD = (
    "gamma",
    "alpha",
    "target_range",
    "target_dtype",
    "target_ndim",
    "target_len",
    "weight_size",
    "input_ndim",
    "reduction",
    "input_dtype",
    "weight_grad",
)


@st.composite
def _focal_case(draw, device):
    fn = draw(st.sampled_from(_FOCAL_FNS + _FOCAL_MODS))
    bad = pick_bad(draw, _FOCAL_BAD)
    main = draw(st.sampled_from(FLOATS))
    case = {
        "fn": fn,
        "seed": draw(st.integers(0, 2**31 - 1)),
        "n": size(draw, 1, 8) if not draw(one_in(10)) else draw(st.integers(9, 64)),
        "c": size(draw, 1, 5) if not draw(one_in(10)) else draw(st.integers(6, 100)),
        "gamma": draw(st.sampled_from([2.0, 0.0, 0.5, 1.0, 3.5])),
        "alpha": draw(st.sampled_from([0.25, 0.0, 0.5, 1.0])),
        "weight": draw(st.booleans()),
        "reduction": draw(st.sampled_from(["mean", "none", "sum"])),
        "values": draw(st.sampled_from(["randn", "large", "special"])),
        "override": fn in _FOCAL_MODS and draw(one_in(3)),
        "bad": bad,
    }
    case["t"], mixed = draw_tensors(
        draw, {"input": 2, "target": 1, "weight": 1}, main, device, floating=("input", "weight")
    )
    if bad == "target_dtype":
        case["t"]["target"]["dt"] = draw(st.sampled_from(["i32", "f32", "u8", "bool"]))
    elif bad == "input_dtype":
        case["t"]["input"]["dt"] = draw(st.sampled_from(core.NON_FLOATS))
    elif bad in ("weight_size", "weight_grad"):
        case["weight"] = True
    elif bad == "reduction":
        case["reduction"] = draw(st.sampled_from(["avg", "Mean", ""]))
    elif bad == "gamma":
        case["gamma"] = draw(st.sampled_from([-1.0, float("nan"), float("inf")]))
    elif bad == "alpha":
        case["alpha"] = draw(st.sampled_from([float("nan"), float("inf"), -float("inf")]))
    elif bad == "target_range":
        case["n"] = max(case["n"], 1)
        case["t"]["target"]["lay"] = "c"  # expanded, every target would be target[0]
    case["expect"] = expectation(bad, mixed, borderline=case["c"] == 0)
    return case


def _focal_run(case):
    fn, bad = case["fn"], case["bad"]
    softmax = "oftmax" in fn
    run = Run(
        case,
        names_for(case, "focal_loss", *_FOCAL_FNS, *_FOCAL_MODS),
        {"input", "target", "gamma", "alpha", "weight", "reduction"},
    )
    n, c = case["n"], case["c"]
    ishape = [n, c]
    if bad == "input_ndim":
        ishape = [n * c] if case["seed"] % 2 else [n, c, 1]
    base = run.randn(*ishape) * (3 if case["values"] == "randn" else 30)
    if case["values"] == "special" and base.numel():
        base.view(-1)[:: max(1, base.numel() // 2)] = [float("nan"), float("inf"), -float("inf")][case["seed"] % 3]
    lo, hi = (-1, c) if softmax else (0, c + 1)
    target = run.randint(lo, max(hi, lo + 1), n)
    if bad == "target_range" and n:
        target[n // 2] = c if softmax else (c + 1 if case["seed"] % 2 else -1)  # softmax: < 0 means ignored
    elif bad == "target_ndim":
        target = target[:, None]
    elif bad == "target_len":
        target = torch.cat([target, target[:1] if n else torch.zeros(1)])
    wshape = [c + 1] if bad == "weight_size" else [c]
    a_in, a_t, a_w = run.arg("input", base), run.arg("target", target), run.arg("weight", run.rand(*wshape) + 0.5)
    xi, xt = a_in.x(grad=True), a_t.x()
    xw = a_w.x(grad=bad == "weight_grad") if case["weight"] else None
    dt = worst(a_in.dt, a_w.dt) if case["weight"] else a_in.dt
    mixed = case["expect"] == "either"
    if bad == "weight_grad" and not run.grads:
        run.expect = "either"  # no gradient is recorded, so none is lost
    if bad == "target_range" and run.unchecked_values and _on_gpu(case, "target"):
        run.expect = "either"  # CUDA without sync checks: NaN rows (documented)

        def nan_rows(out):
            row = out[n // 2] if case["reduction"] == "none" else out
            if not torch.isnan(row).all():
                raise Mismatch("a bad target on CUDA did not give a NaN loss")

        run.unchecked_check = nan_rows
    if fn in _FOCAL_FNS:
        call = lambda: getattr(visdet_ops, fn)(xi, xt, case["gamma"], case["alpha"], xw, case["reduction"])  # noqa: E731
    else:
        ctor_bad = bad == "reduction"
        ctor_weight = None if case["override"] else xw
        mod = run.construct(
            lambda: getattr(visdet_ops, fn)(case["gamma"], case["alpha"], ctor_weight, case["reduction"]),
            expect="error" if ctor_bad else "ok",
        )
        if mod is None:
            return
        call = lambda: mod(xi, xt, xw) if case["override"] else mod(xi, xt)  # noqa: E731

    def check(out):
        rl, r = a_in.ref(grad=True)
        ref = softmax_focal_loss_reference if softmax else sigmoid_focal_loss_reference
        want = ref(
            r, xt.detach().cpu(), case["gamma"], case["alpha"], a_w.r() if case["weight"] else None, case["reduction"]
        )
        assert_close("loss", out, want, dt)
        out_dtype_ok(out, a_in.dt, mixed, "loss")
        # Gradients at infinite logits are limits the reference's autograd gives as NaN: compared for finite ones.
        if run.grads and out.numel() and case["values"] != "special":
            grad = rand_grad(run, out)
            run.backward(out, grad)
            ref_backward(want, grad)
            check_grads([("input", a_in, rl)], dt)

    run.outcome(call, check)


family("focal_loss", _FOCAL_FNS + _FOCAL_MODS, ops=_FOCAL_FNS)((_focal_case, _focal_run))


# ================================================================= masked_conv

_MASKED_BAD = (
    "stride",
    "mask_ndim",
    "mask_batch",
    "mask_size",
    "weight_channels",
    "bias_size",
    "input_ndim",
    "input_dtype",
    "padding",
    "weight_ndim",
)
_MASKED_CTOR_BAD = ("ctor_int", "masked_stride", "masked_dilation", "masked_groups", "same_padding")


@st.composite
def _masked_case(draw, device):
    fn = draw(st.sampled_from(["masked_conv2d", "MaskedConv2d"]))
    module = fn == "MaskedConv2d"
    bad = pick_bad(draw, _MASKED_CTOR_BAD if module else _MASKED_BAD)
    main = draw(st.sampled_from(FLOATS if not module else ("f32", "f64")))
    n = size(draw, 1, 2)
    case = {
        "fn": fn,
        "seed": draw(st.integers(0, 2**31 - 1)),
        "n": n,
        "cin": size(draw, 1, 3) if not module else draw(st.integers(1, 3)),
        "cout": draw(st.integers(1, 3)),
        "h": size(draw, 1, 6) if not draw(one_in(10)) else draw(st.integers(7, 16)),
        "w": size(draw, 1, 6) if not draw(one_in(10)) else draw(st.integers(7, 16)),
        "k": [draw(st.integers(1, 3)), draw(st.integers(1, 3))],
        "padding": _pair_or_int(draw, 0, 2),
        "bias": draw(st.booleans()),
        "mask_batch": draw(st.sampled_from([1, n])),
        "mask_dt": draw(st.sampled_from(["bool", "f32", "f64", "i64", "u8", "f16"])),
        "mask_lay": draw(st.sampled_from(["c", "t", "s", "e"])),
        "mask_size": "same" if bad != "mask_size" else draw(st.sampled_from(["bigger", "smaller"])),
        "no_mask": module and draw(one_in(4)),
        "bad": bad,
    }
    case["t"], mixed = draw_tensors(draw, {"features": 4, "weight": 4, "bias": 1}, main, device)
    if module:
        for o in case["t"].values():
            o["dt"] = main
            if device != "cpu":
                o["dev"] = device
        mixed = False
    if case["no_mask"] and (
        case["h"] + 2 * _pair(case["padding"])[0] < case["k"][0]
        or case["w"] + 2 * _pair(case["padding"])[1] < case["k"][1]
        or case["h"] * case["w"] == 0
    ):
        case["no_mask"] = False  # the plain nn.Conv2d forward, with torch's own errors for an empty or small map
    if bad in _MASKED_CTOR_BAD[1:]:
        case["no_mask"] = False  # what these mutations break is the masked forward
    if bad == "input_dtype":
        case["t"]["features"]["dt"] = draw(st.sampled_from(core.NON_FLOATS))
    elif bad == "padding":
        case["padding"] = draw(st.sampled_from([-1, 2**31, 2**17, [0, -1], 1.5]))
    elif bad == "stride":
        case["stride"] = draw(st.sampled_from([2, [1, 2], 0]))
    elif bad == "bias_size":
        case["bias"] = True
    elif bad == "mask_batch":
        case["mask_batch"] = n + 1 if n != 0 else 2
    elif bad == "ctor_int":
        case["arg"] = draw(
            st.sampled_from(["in_channels", "out_channels", "kernel_size", "stride", "padding", "dilation", "groups"])
        )
        case["value"] = draw(bad_int())
        if case["arg"] == "padding" and case["value"] == 0:
            case["value"] = -1
    oh = case["h"] + 2 * _pair(case["padding"])[0] - case["k"][0] + 1 if bad != "padding" else 1
    ow = case["w"] + 2 * _pair(case["padding"])[1] - case["k"][1] + 1 if bad != "padding" else 1
    borderline = oh <= 0 or ow <= 0 or case["cin"] == 0
    case["expect"] = expectation(bad, mixed, borderline)
    return case


def _masked_run(case):
    fn, bad = case["fn"], case["bad"]
    run = Run(
        case,
        names_for(case, "masked_conv", "masked_conv2d", "MaskedConv2d"),
        {
            "features",
            "mask",
            "weight",
            "bias",
            "padding",
            "stride",
            "in_channels",
            "out_channels",
            "kernel_size",
            "dilation",
            "groups",
        },
    )
    n, cin, cout, h, w = case["n"], case["cin"], case["cout"], case["h"], case["w"]
    kh, kw = case["k"]
    ph, pw = _pair(case["padding"]) if bad != "padding" else (0, 0)
    fshape = [n, cin, h, w] if bad != "input_ndim" else [cin, h, w]
    wshape = [cout, cin + (bad == "weight_channels"), kh, kw] if bad != "weight_ndim" else [cout, cin, kh]
    hm, wm = {"same": (h, w), "bigger": (h + 2, w + 1), "smaller": (h - 1 if h else 1, w)}[case["mask_size"]]
    mshape = [case["mask_batch"], hm, wm] if bad != "mask_ndim" else [hm, wm]
    a_f = run.arg("features", run.randn(*fshape))
    a_w = run.arg("weight", run.randn(*wshape) * 0.5)
    a_b = run.arg("bias", run.randn(cout + (bad == "bias_size")))
    mask = core.Arg(run.randn(*mshape), case["mask_dt"], case["mask_lay"], a_f.device, expand_dim=case["seed"])
    xf, xw = a_f.x(grad=True), a_w.x(grad=True)
    xb = a_b.x(grad=True) if case["bias"] else None
    xm = mask.x()
    used = [("features", a_f), ("weight", a_w)] + ([("bias", a_b)] if case["bias"] else [])
    dt = worst(*(a.dt for _, a in used))
    mixed = case["expect"] == "either"
    masked = not case["no_mask"]
    if fn == "MaskedConv2d":
        kwargs = {
            "in_channels": cin,
            "out_channels": cout,
            "kernel_size": (kh, kw),
            "padding": case["padding"],
            "bias": case["bias"],
        }
        if bad == "ctor_int":
            kwargs[case["arg"]] = case["value"]
        elif bad == "masked_stride":
            kwargs["stride"] = 2
        elif bad == "masked_dilation":
            kwargs["dilation"] = 2
        elif bad == "masked_groups":
            kwargs["groups"] = cin if cin > 1 else 1
            kwargs["in_channels"] = kwargs["out_channels"] = cin
            kwargs["groups"] = cin
        elif bad == "same_padding":
            kwargs["padding"] = "same"
        torch.manual_seed(case["seed"])
        mod = run.construct(lambda: visdet_ops.MaskedConv2d(**kwargs), expect="error" if bad == "ctor_int" else "ok")
        if mod is None:
            return
        mod = mod.to(run.device, core.DTYPES[a_f.dt])
        if bad == "masked_groups" and kwargs["groups"] == 1:
            run.expect = "either"  # a valid call after all
        xf = a_f.x(grad=True) if kwargs["in_channels"] == cin else xf
        call = lambda: mod(xf, xm) if masked else mod(xf)  # noqa: E731
    else:
        kw_ = {"stride": case["stride"]} if bad == "stride" else {}
        call = lambda: visdet_ops.masked_conv2d(xf, xm, xw, xb, case["padding"], **kw_)  # noqa: E731

    def check(out):
        rfl, rf = a_f.ref(grad=True)
        if out.numel() == 0 or rf.numel() == 0:  # F.conv2d (the reference) takes no empty map
            oh, ow = h + 2 * ph - kh + 1, w + 2 * pw - kw + 1
            channels = mod.out_channels if fn == "MaskedConv2d" else cout
            want = torch.zeros(n, channels, max(oh, 0), max(ow, 0), dtype=torch.float64)
            if case["bias"] and fn == "masked_conv2d" and want.numel():  # the bias where the mask is active
                m = mask.r()
                hh, ww = min(m.size(1), oh), min(m.size(2), ow)
                active = torch.zeros(n, oh, ow, dtype=torch.float64)
                active[:, :hh, :ww] = (m[:, :hh, :ww] > 0).double().expand(n, hh, ww)
                want = want + a_b.r().reshape(1, -1, 1, 1) * active[:, None]
            assert_close("output", out, want, dt)
            return
        if fn == "MaskedConv2d":
            m64 = copy.deepcopy(mod).cpu().double()
            if masked:
                want = masked_conv2d_reference(rf, mask.r(), m64.weight, m64.bias, m64.padding)
            else:
                want = m64(rf)
            assert_close("output", out, want, dt)
            return
        refs = {name: a.ref(grad=True) for name, a in used}
        want = masked_conv2d_reference(
            rf, mask.r(), refs["weight"][1], refs["bias"][1] if case["bias"] else None, (ph, pw)
        )
        assert_close("output", out, want, dt)
        out_dtype_ok(out, a_f.dt, mixed)
        if run.grads and out.numel():
            grad = rand_grad(run, out)
            run.backward(out, grad)
            ref_backward(want, grad)
            refs["features"] = (rfl, rf)
            check_grads([(name, a, refs[name][0]) for name, a in used], dt)

    run.outcome(call, check)


family("masked_conv", ["masked_conv2d", "MaskedConv2d"], ops=("masked_conv2d",))((_masked_case, _masked_run))


# ================================================================= multi_scale_deform_attn

_MSDA_FNS = ("multi_scale_deformable_attn", "MultiScaleDeformableAttnFunction", "multi_scale_deformable_attn_pytorch")
_MSDA_BAD = (
    "keys_mismatch",
    "start_len",
    "start_out",
    "shapes_dtype",
    "shapes_negative",
    "loc_ndim",
    "attn_shape",
    "heads_mismatch",
    "step",
    "step_divide",
    "value_dtype",
    "value_ndim",
)
_MSDA_MOD_BAD = ("ctor_int", "ctor_divide", "ref_dim", "missing")


@st.composite
def _msda_case(draw, device):
    fn = draw(st.sampled_from((*_MSDA_FNS, "MultiScaleDeformableAttention")))
    module = fn == "MultiScaleDeformableAttention"
    if fn == "multi_scale_deformable_attn_pytorch":  # the reference itself: no level_start_index, no im2col_step
        bad = pick_bad(draw, ("loc_ndim", "heads_mismatch", "keys_mismatch"))
    else:
        bad = pick_bad(draw, _MSDA_MOD_BAD if module else _MSDA_BAD + ("start_shift",))
    main = draw(st.sampled_from(FLOATS if not module else ("f32", "f64")))
    levels = draw(st.integers(1, 3 if not module else 2))
    case = {
        "fn": fn,
        "seed": draw(st.integers(0, 2**31 - 1)),
        "bs": size(draw, 1, 2),
        "shapes": [[size(draw, 1, 4), size(draw, 1, 4)] for _ in range(levels)],
        "heads": draw(st.integers(1, 3)),
        "dim": size(draw, 1, 4) if not module else draw(st.integers(1, 3)),
        "q": size(draw, 1, 4) if not draw(one_in(10)) else draw(st.integers(5, 20)),
        "points": draw(st.integers(1, 3)),
        "im2col_step": draw(st.sampled_from([64, 1, 2])),
        "shapes_dt": draw(st.sampled_from(["i64", "i64", "i32"])),
        "tables_as": draw(st.sampled_from(["tensor", "tensor", "list"]))
        if fn != "multi_scale_deformable_attn_pytorch"
        else "tensor",
        "bad": bad,
    }
    if not module and draw(one_in(10)):  # the CUDA kernels' vector paths: head_dim 32, 64 (and 33)
        case["dim"] = draw(st.sampled_from([32, 33, 64]))
        case["shapes"] = [[draw(st.integers(1, 8)), draw(st.integers(1, 8))] for _ in range(levels)]
    names = {"value": 4, "sampling_locations": 6, "attention_weights": 5}
    case["t"], mixed = draw_tensors(draw, names, main, device)
    # sampling_locations and attention_weights of another float dtype are cast (documented): not a mixed call.
    mixed = any(o.get("dev", "cpu") != case["t"]["value"].get("dev", "cpu") for o in case["t"].values())
    if module:
        for o in case["t"].values():
            o["dt"] = main
            if device != "cpu":
                o["dev"] = device
        case.update(
            batch_first=draw(st.booleans()),
            ref_dim=draw(st.sampled_from([2, 4])),
            value_proj_ratio=draw(st.sampled_from([1.0, 0.5])),
            key_padding_mask=draw(st.booleans()),
            identity=draw(st.booleans()),
            query_pos=draw(st.booleans()),
            num_value_same=draw(st.booleans()),
        )
        if case["value_proj_ratio"] != 1.0 and (case["heads"] * case["dim"]) % (2 * case["heads"]):
            case["value_proj_ratio"] = 1.0
        if bad == "ctor_int":
            case["arg"] = draw(st.sampled_from(["embed_dims", "num_heads", "num_levels", "num_points", "im2col_step"]))
            # im2col_step takes any positive int64
            case["value"] = draw(bad_int() if case["arg"] != "im2col_step" else st.sampled_from([0, -1, 1.5, "2"]))
        elif bad == "ref_dim":
            case["ref_dim"] = 3
    if bad == "step":
        case["im2col_step"] = draw(st.sampled_from([0, -1, 1.5, "2"]))
    elif bad == "step_divide":
        case["bs"], case["im2col_step"] = 3, 2
    elif bad == "value_dtype":
        case["t"]["value"]["dt"] = draw(st.sampled_from(core.NON_FLOATS))
    elif bad == "shapes_dtype":
        case["shapes_dt"] = draw(st.sampled_from(["f32", "f64"]))
        case["tables_as"] = "tensor"
    elif bad in ("shapes_negative", "start_len", "start_out", "start_shift"):
        case["tables_as"] = "tensor"
    if bad == "start_shift" and levels < 2:
        case["shapes"].append([1, 1])
    empty = any(h * w == 0 for h, w in case["shapes"])
    # start_shift: levels whose start index is in range but not where the level lies: the op reads the keys there
    # (no error is promised); its result must then be the reference's for those starts.
    case["expect"] = expectation(bad if bad != "start_shift" else None, mixed, borderline=empty or bool(bad))
    return case


def _msda_tables(case):
    shapes = torch.tensor(case["shapes"], dtype=torch.int64)
    sizes = (shapes[:, 0] * shapes[:, 1]).tolist()
    starts = [0]
    for s_ in sizes[:-1]:
        starts.append(starts[-1] + s_)
    return shapes, torch.tensor(starts, dtype=torch.int64), sizes


def _msda_reference(value, shapes, starts, loc, attn):
    """mmcv's grid_sample function, with each level read from its start index (the op's semantics)."""
    parts = [value[:, s_ : s_ + h * w] for s_, (h, w) in zip(starts.tolist(), shapes.tolist(), strict=True)]
    if any(h * w == 0 for h, w in shapes.tolist()):  # grid_sample takes no empty map: such a level samples zeros
        keep = [i for i, (h, w) in enumerate(shapes.tolist()) if h * w]
        if not keep:
            bs, _, heads, dim = value.shape
            return (value.sum() + loc.sum() + attn.sum()) * torch.zeros(
                bs, loc.size(1), heads * dim, dtype=torch.float64
            )
        shapes, parts = shapes[keep], [parts[i] for i in keep]
        loc, attn = loc[:, :, :, keep], attn[:, :, :, keep]
    return multi_scale_deformable_attn_reference(torch.cat(parts, 1), shapes, loc, attn)


def _msda_run(case):
    fn, bad = case["fn"], case["bad"]
    run = Run(
        case,
        names_for(
            case, "multi_scale_deform_attn", "multi_scale_deformable_attn", *_MSDA_FNS, "MultiScaleDeformableAttention"
        ),
        {
            "value",
            "value_spatial_shapes",
            "value_level_start_index",
            "sampling_locations",
            "attention_weights",
            "im2col_step",
            "embed_dims",
            "num_heads",
            "num_levels",
            "num_points",
            "reference_points",
            "spatial_shapes",
            "level_start_index",
        },
    )
    if fn == "MultiScaleDeformableAttention":
        return _msda_module_run(case, run)
    bs, heads, dim, q, points = case["bs"], case["heads"], case["dim"], case["q"], case["points"]
    shapes, starts, sizes = _msda_tables(case)
    levels = len(sizes)
    keys = sum(sizes) + (1 if bad == "keys_mismatch" else 0)
    vshape = [bs, keys, heads, dim] if bad != "value_ndim" else [bs, keys, heads * dim]
    lshape = [bs, q, heads + (bad == "heads_mismatch"), levels, points, 2]
    if bad == "loc_ndim":
        lshape = lshape[:-1]
    ashape = [bs, q, heads, levels, points + (bad == "attn_shape")]
    a_v = run.arg("value", run.randn(*vshape))
    a_l = run.arg("sampling_locations", run.rand(*lshape) * 1.4 - 0.2)
    a_a = run.arg("attention_weights", run.rand(*ashape))
    if bad == "shapes_negative":
        shapes[0] = torch.tensor([-shapes[0, 0] - 1, shapes[0, 1]])
    elif bad == "start_len":
        starts = torch.cat([starts, starts[-1:]])
    elif bad == "start_out":
        starts[-1] = keys + 1
    elif bad == "start_shift":
        starts[-1] = 0  # in range, but the last level now reads the first level's keys
    dev = case["t"]["value"].get("dev", "cpu")
    if bad in ("start_out", "shapes_negative", "keys_mismatch", "shapes_dtype") and run.unchecked_values:
        if case["tables_as"] == "tensor" and dev != "cpu":
            # Level tables on the GPU are not read on the host (documented): a level outside value's keys gives NaN.
            run.expect, run.unchecked_check = "either", lambda out: None
    if case["tables_as"] == "list":
        xs, xst = shapes.tolist(), starts.tolist()
    else:
        xs = core.cast(shapes.double(), case["shapes_dt"]).to(dev)
        xst = core.cast(starts.double(), case["shapes_dt"] if case["shapes_dt"].startswith("i") else "i64").to(dev)
    xv, xl, xa = a_v.x(grad=True), a_l.x(grad=True), a_a.x(grad=True)
    dt = a_v.dt
    if fn == "multi_scale_deformable_attn_pytorch":
        # mmcv's pure-PyTorch function: its errors are torch's (grid_sample's), and it casts nothing.
        run.any_message = True
        if len({a_v.dt, a_l.dt, a_a.dt}) > 1 or any(h * w == 0 for h, w in case["shapes"]):
            run.expect = "either"
        if bad:  # it checks no shapes (mmcv's code): torch may or may not notice; a result is not judged
            run.expect = "either"
        call = lambda: visdet_ops.multi_scale_deformable_attn_pytorch(xv, xs, xl, xa)  # noqa: E731
    elif fn == "MultiScaleDeformableAttnFunction":
        call = lambda: visdet_ops.MultiScaleDeformableAttnFunction.apply(  # noqa: E731
            xv, xs, xst, xl, xa, case["im2col_step"]
        )
    else:
        call = lambda: visdet_ops.multi_scale_deformable_attn(xv, xs, xst, xl, xa, case["im2col_step"])  # noqa: E731

    def check(out):
        if fn == "multi_scale_deformable_attn_pytorch" and bad:
            return
        refs = [a.ref(grad=True) for a in (a_v, a_l, a_a)]
        want = _msda_reference(refs[0][1], shapes, starts, refs[1][1], refs[2][1])
        assert_close("output", out, want, worst(dt, a_l.dt, a_a.dt))
        out_dtype_ok(out, dt, run.expect == "either")
        if run.grads and out.numel():
            grad = rand_grad(run, out)
            run.backward(out, grad)
            ref_backward(want, grad)
            pairs = [
                (name, a, r[0])
                for name, a, r in zip(
                    ("value", "sampling_locations", "attention_weights"), (a_v, a_l, a_a), refs, strict=True
                )
            ]
            check_grads(pairs, worst(dt, a_l.dt, a_a.dt))

    run.outcome(call, check)


def _msda_module_run(case, run):
    from visdet_ops.ops import multi_scale_deform_attn as msda_module

    bad = case["bad"]
    bs, heads, q, points = case["bs"], case["heads"], case["q"], case["points"]
    embed = heads * case["dim"] if bad != "ctor_divide" else heads * case["dim"] + 1
    if bad == "ctor_divide" and heads == 1:
        heads = case["heads"] = 2
        embed = 2 * case["dim"] + 1
    shapes, starts, sizes = _msda_tables(case)
    levels = len(sizes)
    kwargs = {
        "embed_dims": embed,
        "num_heads": heads,
        "num_levels": levels,
        "num_points": points,
        "im2col_step": case["im2col_step"],
        "dropout": 0.0,
        "batch_first": case["batch_first"],
        "value_proj_ratio": case["value_proj_ratio"],
    }
    if bad == "ctor_int":
        kwargs[case["arg"]] = case["value"]
    torch.manual_seed(case["seed"])
    ctor_bad = bad in ("ctor_int", "ctor_divide")
    mod = run.construct(
        lambda: visdet_ops.MultiScaleDeformableAttention(**kwargs), expect="error" if ctor_bad else "ok"
    )
    if mod is None:
        return
    dt = case["t"]["value"]["dt"]
    mod = mod.to(run.device, core.DTYPES[dt]).eval()
    with torch.no_grad():
        mod.sampling_offsets.weight.normal_(0, 0.2)
        mod.attention_weights.weight.normal_(0, 0.2)
    nv = sum(sizes)
    qshape = [bs, q, embed] if case["batch_first"] else [q, bs, embed]
    vshape = [bs, nv, embed] if case["batch_first"] else [nv, bs, embed]
    dev = run.device
    a_q = core.Arg(run.randn(*qshape), dt, case["t"]["value"]["lay"], dev)
    a_v = core.Arg(run.randn(*vshape), dt, "c", dev)
    a_pos = core.Arg(run.randn(*qshape), dt, "c", dev)
    a_ref = core.Arg(run.rand(bs, q, levels, case["ref_dim"]), dt, "c", dev)
    mask = (run.rand(bs, nv) > 0.7).to(dev)
    kwargs = {
        "value": a_v.x(),
        "reference_points": a_ref.x(),
        "spatial_shapes": shapes.to(dev),
        "level_start_index": starts.to(dev),
    }
    if bad == "missing":
        kwargs["spatial_shapes"] = None
    if case["query_pos"]:
        kwargs["query_pos"] = a_pos.x()
    if case["key_padding_mask"]:
        kwargs["key_padding_mask"] = mask
    if case["identity"]:
        kwargs["identity"] = a_pos.x()
    xq = a_q.x(grad=True)

    def check(out):
        m64 = copy.deepcopy(mod).cpu().double()
        ref_kwargs = {
            k: (
                v.detach().cpu().double()
                if isinstance(v, torch.Tensor) and v.is_floating_point()
                else v.cpu()
                if isinstance(v, torch.Tensor)
                else v
            )
            for k, v in kwargs.items()
        }
        rql, rq = a_q.ref(grad=True)
        original = msda_module.multi_scale_deformable_attn
        msda_module.multi_scale_deformable_attn = lambda v, s, st_, lo, at, step: _msda_reference(v, s, st_, lo, at)
        try:
            want = m64(rq, **ref_kwargs)
        finally:
            msda_module.multi_scale_deformable_attn = original
        assert_close("output", out, want, dt)
        if run.grads and out.numel():
            grad = rand_grad(run, out)
            run.backward(out, grad)
            ref_backward(want, grad)
            check_grads([("query", a_q, rql)], dt)

    run.outcome(lambda: mod(xq, **kwargs), check)


family("multi_scale_deform_attn", (*_MSDA_FNS, "MultiScaleDeformableAttention"))((_msda_case, _msda_run))


# ================================================================= nms: nms, batched_nms, nms_match; soft_nms

# Dyadic thresholds: IoU comparisons of boxes on the 1/8 grid are then exact in float32 and float64 alike.
_IOU = [0.5, 0.25, 0.75, 0.0, 1.0, 0.375]
_NMS_BAD = (
    "boxes_cols",
    "scores_len",
    "scores_ndim",
    "offset",
    "boxes_dtype",
    "max_num",
    "boxes_list",
    "both_names",
    "iou_nan",
)
_BATCHED_BAD = (
    "cfg_type",
    "cfg_unknown",
    "cfg_missing",
    "cfg_both",
    "idxs_len",
    "cfg_method",
    "cfg_offset",
    "cfg_int",
    "boxes_cols",
    "scores_len",
)
_MATCH_BAD = ("dets_cols", "dets_ndim", "dets_dtype", "iou_nan")


@st.composite
def _nms_case(draw, device):
    fn = draw(st.sampled_from(["nms", "batched_nms", "nms_match"]))
    bad = pick_bad(draw, {"nms": _NMS_BAD, "batched_nms": _BATCHED_BAD, "nms_match": _MATCH_BAD}[fn])
    main = draw(st.sampled_from(FLOATS))
    case = {
        "fn": fn,
        "seed": draw(st.integers(0, 2**31 - 1)),
        "n": size(draw, 1, 70) if not draw(one_in(10)) else draw(st.integers(71, 300)),
        "iou": draw(st.sampled_from(_IOU)) if bad != "iou_nan" else float("nan"),
        "ties": draw(one_in(4)),
        "special": draw(one_in(10)),
        "numpy": HAS_NUMPY and fn != "batched_nms" and draw(one_in(6)),
        "bad": bad,
    }
    lay = {
        "boxes": ["c", "t", "p", "s", "e"],
        "scores": ["c", "s", "e"],
        "idxs": ["c", "s", "e"],
        "dets": ["c", "t", "s", "e"],
    }
    names = {
        "nms": {"boxes": 2, "scores": 1},
        "batched_nms": {"boxes": 2, "scores": 1, "idxs": 1},
        "nms_match": {"dets": 2},
    }[fn]
    case["t"], mixed = draw_tensors(draw, names, main, device, floating={"boxes", "scores", "dets"}, layouts=lay)
    if case["numpy"]:  # NumPy has no bfloat16
        for o in case["t"].values():
            o["dt"] = (main if main != "bf16" else "f32") if o["dt"] in FLOATS else o["dt"]
            o.pop("dev", None)
        mixed = False
    if fn == "nms":
        case.update(
            offset=draw(st.sampled_from([0, 1])),
            score_threshold=draw(st.sampled_from([0, 0, 0.25, 0.5, 0.875])),
            max_num=draw(st.sampled_from([-1, -1, 0, 1, 5, 100])),
            alias=draw(one_in(5)),
        )
        if bad == "offset":
            case["offset"] = draw(st.sampled_from([2, -1, 0.5]))
        elif bad == "max_num":
            case["max_num"] = draw(st.sampled_from([1.5, "2", None]))
        elif bad == "boxes_dtype":
            case["t"]["boxes"]["dt"] = draw(st.sampled_from(core.NON_FLOATS))
    elif fn == "batched_nms":
        # floating idxs are classes by value, as mmcv's idxs.to(boxes) (issue 39)
        case["idxs_dt"] = draw(st.sampled_from(["i64", "i64", "i32", "i16", "u8", "f32", "f64"]))
        case["classes"] = draw(st.integers(1, 4))
        case["class_agnostic"] = draw(st.booleans())
        kind = draw(st.sampled_from(["nms", "nms", "soft_nms", "none"]))
        if kind == "none":
            cfg = None
        elif kind == "nms":
            cfg = {"iou_threshold": case["iou"]}
            for key, values in (
                ("offset", [0, 1]),
                ("score_threshold", [0, 0.25, 0.5]),
                ("max_num", [-1, 0, 3, 50]),
                ("split_thr", [10000, 1, 5, 0]),
                ("class_agnostic", [False, True]),
                ("type", ["nms"]),
            ):
                if draw(one_in(3)):
                    cfg[key] = draw(st.sampled_from(values))
            if draw(one_in(6)):
                cfg["iou_thr"] = cfg.pop("iou_threshold")
        else:
            cfg = {"type": "soft_nms"}
            for key, values in (
                ("iou_threshold", _IOU),
                ("sigma", [0.5, 1.0]),
                ("min_score", [1e-3, 0.0, 0.25]),
                ("method", ["linear", "naive", "gaussian"]),
                ("offset", [0, 1]),
                ("max_num", [-1, 3]),
            ):
                if draw(one_in(2)):
                    cfg[key] = draw(st.sampled_from(values))
        if bad and bad.startswith("cfg") and cfg is None:
            cfg = {"iou_threshold": case["iou"]}
        if bad == "cfg_type":
            cfg["type"] = draw(st.sampled_from(["softer_nms", "NMS", ""]))
        elif bad == "cfg_unknown":
            cfg[draw(st.sampled_from(["sigma", "iou", "thr"] if cfg.get("type") != "soft_nms" else ["thr"]))] = 0.5
        elif bad == "cfg_missing":
            cfg.pop("iou_threshold", None), cfg.pop("iou_thr", None), cfg.pop("type", None)
        elif bad == "cfg_both":
            cfg["iou_thr"], cfg["iou_threshold"] = case["iou"], case["iou"]
        elif bad == "cfg_method":
            cfg["type"], cfg["method"] = "soft_nms", draw(st.sampled_from(["cubic", "", "Linear"]))
            cfg.pop("iou_thr", None), cfg.pop("split_thr", None), cfg.pop("score_threshold", None)
            cfg.pop("class_agnostic", None)
        elif bad == "cfg_offset":
            cfg["offset"] = draw(st.sampled_from([2, -1, 0.5]))
        elif bad == "cfg_int":
            cfg[draw(st.sampled_from(["max_num", "split_thr"]))] = draw(st.sampled_from([1.5, "2"]))
        case["cfg"] = cfg
        agnostic = cfg is None or cfg.get("class_agnostic", case["class_agnostic"])
        if bad == "idxs_len" and agnostic:
            case["expect"] = "either"  # idxs is not used then
    else:
        if bad == "dets_dtype":
            case["t"]["dets"]["dt"] = draw(st.sampled_from(core.NON_FLOATS))
        case["empty1d"] = bad is None and draw(one_in(10))
    if case.get("expect") != "either":
        case["expect"] = expectation(bad, mixed, borderline=case["special"])
    return case


def _nms_values(run: Run, case: dict, n: int):
    boxes = core.grid_boxes(run, n)
    scores = core.f32_scores(run, n, ties=case["ties"])
    if case["special"] and n:
        boxes[n // 2, case["seed"] % 4] = float("nan")
        scores[(n - 1) // 3] = [float("nan"), float("inf"), -float("inf")][case["seed"] % 3]
    return boxes, scores


def _check_keep(inds, dets, boxes, scores, n):
    """The structure of an (dets, inds) answer: int64 indices in range without repeats, dets = [boxes, score]."""
    if inds.dtype != torch.long or inds.dim() != 1:
        raise Mismatch(f"indices: {inds.dtype} with shape {list(inds.shape)}")
    lst = inds.tolist()
    if len(set(lst)) != len(lst) or any(not 0 <= i < n for i in lst):
        raise Mismatch(f"indices out of range or repeated: {lst[:20]}")
    if list(dets.shape) != [len(lst), 5]:
        raise Mismatch(f"dets shape {list(dets.shape)} for {len(lst)} indices")
    if len(lst):
        got_boxes = dets[:, :4].detach().cpu().double()
        want_boxes = boxes.detach().cpu().double()[inds.cpu()]
        if not torch.equal(got_boxes.nan_to_num(-7.0), want_boxes.nan_to_num(-7.0)):
            raise Mismatch("dets[:, :4] are not boxes[inds]")


def _nms_run(case):
    fn, bad = case["fn"], case["bad"]
    run = Run(
        case,
        names_for(case, "nms", "nms", "batched_nms", "nms_match", "soft_nms"),
        {
            "boxes",
            "scores",
            "idxs",
            "nms_cfg",
            "iou_threshold",
            "iou_thr",
            "offset",
            "score_threshold",
            "max_num",
            "dets",
            "split_thr",
            "class_agnostic",
            "method",
        },
    )
    n = case["n"]
    boxes, scores = _nms_values(run, case, n)
    if fn == "nms_match":
        return _nms_match_run(case, run, boxes, scores)
    if bad == "boxes_cols":
        boxes = torch.cat([boxes, scores[:, None]], 1)
    a_b = run.arg("boxes", boxes)
    sshape_scores = scores
    if bad == "scores_len":
        sshape_scores = torch.cat([scores, scores[:1] if n else torch.zeros(1)])
    elif bad == "scores_ndim":
        sshape_scores = scores[:, None]
    a_s = run.arg("scores", sshape_scores)
    xb, xs = a_b.x(), a_s.x()
    if case["numpy"]:
        xb, xs = xb.numpy(), xs.numpy()
    if bad == "boxes_list":
        xb = xb.tolist()
    rb, rs = a_b.r(), a_s.r()
    structural = case["special"] or case["expect"] == "either"
    if fn == "nms":
        kwargs = {
            "iou_thr" if case["alias"] else "iou_threshold": case["iou"],
            "offset": case["offset"],
            "score_threshold": case["score_threshold"],
            "max_num": case["max_num"],
        }
        if bad == "both_names":
            kwargs["iou_thr"] = kwargs["iou_threshold"] = case["iou"]
        call = lambda: visdet_ops.nms(xb, xs, **kwargs)  # noqa: E731

        def check(result):
            dets, inds = result
            if case["numpy"]:
                import numpy as np

                if not isinstance(dets, np.ndarray) or not isinstance(inds, np.ndarray):
                    raise Mismatch(f"NumPy in, {type(dets).__name__} out")
                dets, inds = torch.from_numpy(dets), torch.from_numpy(inds)
            _check_keep(inds, dets, rb, rs, n)
            if structural:
                return
            thr = case["score_threshold"]
            valid = torch.nonzero(rs > thr).squeeze(1) if thr > 0 else torch.arange(n)
            want = valid[nms_reference(rb[valid], rs[valid], case["iou"], case["offset"])]
            if case["max_num"] > 0:
                want = want[: case["max_num"]]
            if inds.tolist() != want.tolist():
                raise Mismatch(f"nms kept {inds.tolist()[:30]}, the reference {want.tolist()[:30]}")
            if not torch.equal(dets[:, 4].detach().cpu().double(), rs[want]):
                raise Mismatch("dets[:, 4] are not the kept scores")

        run.outcome(call, check)
        return
    # batched_nms
    cfg = case["cfg"]
    idxs = run.randint(0, case["classes"], n + (bad == "idxs_len"))
    a_i = core.Arg(
        idxs,
        case["idxs_dt"],
        case["t"]["idxs"]["lay"],
        case["t"]["idxs"].get("dev", "cpu"),
        case["t"]["idxs"].get("ed", 0),
    )
    xi = a_i.x()
    cfg_in = None if cfg is None else dict(cfg)
    call = lambda: visdet_ops.batched_nms(xb, xs, xi, cfg_in, case["class_agnostic"])  # noqa: E731

    def check(result):
        dets, keep = result
        if cfg_in != cfg:
            raise Mismatch(f"batched_nms changed its nms_cfg: {cfg} -> {cfg_in}")
        _check_keep(keep, dets, rb, rs, n)
        if structural:
            return
        ri = xi.detach().cpu()
        if cfg is None:
            want = torch.sort(rs, descending=True, stable=True).indices
            want_scores = rs[want]
        elif cfg.get("type") == "soft_nms":
            agnostic = bool(cfg.get("class_agnostic", case["class_agnostic"]))
            want, want_scores = soft_nms_reference(
                rb,
                rs,
                cfg.get("iou_threshold", 0.3),
                cfg.get("sigma", 0.5),
                cfg.get("min_score", 1e-3),
                cfg.get("method", "linear"),
                cfg.get("offset", 0),
                None if agnostic else ri,
            )
            if a_b.dt != "f64" or a_s.dt != "f64":
                return  # decayed scores in float32: near ties may take another order (soft_nms family's rule)
        else:
            agnostic = bool(cfg.get("class_agnostic", case["class_agnostic"]))
            thr = cfg.get("score_threshold", 0)
            valid = torch.nonzero(rs > thr).squeeze(1) if thr > 0 else torch.arange(n)
            iou = cfg.get("iou_threshold", cfg.get("iou_thr"))
            want = valid[
                nms_reference(rb[valid], rs[valid], iou, cfg.get("offset", 0), None if agnostic else ri[valid])
            ]
            want_scores = rs[want]
        if cfg is not None and cfg.get("max_num", -1) > 0:
            want, want_scores = want[: cfg["max_num"]], want_scores[: cfg["max_num"]]
        if keep.tolist() != want.tolist():
            raise Mismatch(f"batched_nms kept {keep.tolist()[:30]}, the reference {want.tolist()[:30]}")
        assert_close("dets[:, 4]", dets[:, 4], want_scores, worst(a_b.dt, a_s.dt))

    run.outcome(call, check)


def _nms_match_run(case, run, boxes, scores):
    bad = case["bad"]
    dets = torch.cat([boxes, scores[:, None]], 1)
    if bad == "dets_cols":
        dets = dets[:, :4]
    elif bad == "dets_ndim":
        dets = dets[None]
    a_d = run.arg("dets", dets)
    xd = a_d.x()
    if case["empty1d"]:
        xd = torch.empty(0, dtype=xd.dtype, device=xd.device)
    if case["numpy"]:
        xd = xd.numpy()

    def check(groups):
        if not isinstance(groups, list):
            raise Mismatch(f"nms_match returned a {type(groups).__name__}, not a list")
        got = [list(map(int, g.tolist())) for g in groups]
        if case["empty1d"]:
            if got:
                raise Mismatch(f"empty 1-D dets gave {got}")
            return
        members = sorted(i for g in got for i in g)
        if members != list(range(case["n"])):
            raise Mismatch("nms_match groups are not a partition of the boxes")
        if case["special"] or case["expect"] == "either":
            return
        want = nms_match_reference(a_d.r(), case["iou"])
        if got != want:
            raise Mismatch(f"nms_match gave {got[:10]}, the reference {want[:10]}")

    run.outcome(lambda: visdet_ops.nms_match(xd, case["iou"]), check)


family("nms", ["nms", "batched_nms", "nms_match"], ops=("nms", "batched_nms", "nms_match", "soft_nms"))(
    (_nms_case, _nms_run)
)


_SOFT_BAD = (
    "method",
    "offset",
    "sigma0",
    "min_score_nan",
    "boxes_cols",
    "scores_len",
    "both_names",
    "boxes_dtype",
    "iou_nan",
)


@st.composite
def _soft_case(draw, device):
    bad = pick_bad(draw, _SOFT_BAD)
    main = draw(st.sampled_from(FLOATS))
    case = {
        "fn": "soft_nms",
        "seed": draw(st.integers(0, 2**31 - 1)),
        "n": size(draw, 1, 40) if not draw(one_in(10)) else draw(st.integers(41, 200)),
        "iou": draw(st.sampled_from([0.3, 0.5, 0.0, 0.75])),
        "sigma": draw(st.sampled_from([0.5, 1.0, 0.1])),
        "min_score": draw(st.sampled_from([1e-3, 0.01, 0.0, 0.3])),
        "method": draw(st.sampled_from(["linear", "naive", "gaussian"])),
        "offset": draw(st.sampled_from([0, 1])),
        "ties": draw(one_in(4)),
        "special": draw(one_in(10)),
        "numpy": HAS_NUMPY and draw(one_in(6)),
        "alias": draw(one_in(5)),
        "bad": bad,
    }
    lay = {"boxes": ["c", "t", "p", "s", "e"], "scores": ["c", "s", "e"]}
    case["t"], mixed = draw_tensors(draw, {"boxes": 2, "scores": 1}, main, device, layouts=lay)
    if case["numpy"]:  # NumPy has no bfloat16
        for o in case["t"].values():
            o["dt"] = (main if main != "bf16" else "f32") if o["dt"] in FLOATS else o["dt"]
            o.pop("dev", None)
        mixed = False
    if bad == "method":
        case["method"] = draw(st.sampled_from(["cubic", "", 1]))
    elif bad == "offset":
        case["offset"] = draw(st.sampled_from([2, -1, 0.5]))
    elif bad == "sigma0":
        case["method"], case["sigma"] = "gaussian", draw(st.sampled_from([0.0, -1.0]))
    elif bad == "min_score_nan":
        case["min_score"] = float("nan")
    elif bad == "iou_nan":
        case["iou"] = float("nan")
    elif bad == "boxes_dtype":
        case["t"]["boxes"]["dt"] = draw(st.sampled_from(core.NON_FLOATS))
    case["expect"] = expectation(bad, mixed, borderline=case["special"])
    return case


def _soft_run(case):
    bad, n = case["bad"], case["n"]
    run = Run(
        case, {"soft_nms"}, {"boxes", "scores", "iou_threshold", "iou_thr", "sigma", "min_score", "method", "offset"}
    )
    boxes, scores = _nms_values(run, case, n)
    if bad == "boxes_cols":
        boxes = torch.cat([boxes, scores[:, None]], 1)
    elif bad == "scores_len":
        scores = torch.cat([scores, scores[:1] if n else torch.zeros(1)])
    a_b, a_s = run.arg("boxes", boxes), run.arg("scores", scores)
    xb, xs = a_b.x(), a_s.x()
    if case["numpy"]:
        xb, xs = xb.numpy(), xs.numpy()
    rb, rs = a_b.r(), a_s.r()
    kwargs = {
        "iou_thr" if case["alias"] else "iou_threshold": case["iou"],
        "sigma": case["sigma"],
        "min_score": case["min_score"],
        "method": case["method"],
        "offset": case["offset"],
    }
    if bad == "both_names":
        kwargs["iou_thr"] = kwargs["iou_threshold"] = case["iou"]
    exact = a_b.dt == "f64" and a_s.dt == "f64" and not case["special"] and case["expect"] == "ok"

    def check(result):
        dets, inds = result
        if case["numpy"]:
            dets, inds = torch.from_numpy(dets), torch.from_numpy(inds)
        _check_keep(inds, dets, rb, rs, n)
        got_scores = dets[:, 4].detach().cpu().double()
        if not exact:
            # Decayed scores are computed in float32 (below float64): a near tie may take another pick order, so
            # only the structure is checked: descending scores, none above its box's own score, none below
            # min_score (bar rounding).
            if case["special"]:
                return
            slack = 1e-2 if {a_b.dt, a_s.dt} & {"f16", "bf16"} else 1e-5
            if len(got_scores) > 1 and not (got_scores[1:] <= got_scores[:-1] + slack).all():
                raise Mismatch(f"soft_nms scores are not descending: {got_scores.tolist()[:20]}")
            if not (got_scores <= rs[inds.cpu()] + slack).all():
                raise Mismatch("a soft_nms score grew above its box's own score")
            # (the first pick is not held to min_score: mmcv filters only the scores after each pick)
            if not (got_scores[1:] >= case["min_score"] - slack).all():
                raise Mismatch(f"a soft_nms score below min_score {case['min_score']}")
            return
        want, want_scores = soft_nms_reference(
            rb, rs, case["iou"], case["sigma"], case["min_score"], case["method"], case["offset"]
        )
        if inds.tolist() != want.tolist():
            raise Mismatch(f"soft_nms kept {inds.tolist()[:30]}, the reference {want.tolist()[:30]}")
        assert_close("dets[:, 4]", got_scores, want_scores, "f64", tol=1e-10)

    run.outcome(lambda: visdet_ops.soft_nms(xb, xs, **kwargs), check)


family("soft_nms", ["soft_nms"])((_soft_case, _soft_run))


# ================================================================= known bugs


@dataclass(frozen=True)
class KnownBug:
    """A bug the fuzzing found, not fixed yet. `matches(case)` picks the cases it spoils; skip: do not run them
    (a crash or a hang), else run them and let them fail. `repro` is a minimal reproducer (Python source, run by
    `fuzz_worker.py --known-bug <name>`), which must raise or crash while the bug is there."""

    name: str
    family: str
    reason: str
    repro: str
    matches: Callable[[dict], bool] = field(compare=False)
    skip: bool = False

    def reproduce(self) -> None:
        exec(compile(self.repro, f"<known bug {self.name}>", "exec"), {"torch": torch, "visdet_ops": visdet_ops})


KNOWN_BUGS: list[KnownBug] = []
# None at present. The six the fuzzing found first (float16 bbox_overlaps backward NaN on eps-clamped unions; the
# deform_conv output size truncating a negative numerator; nms / batched_nms indexing before their shape checks;
# CARAFEPack and MultiScaleDeformableAttention on an empty batch; both deform_groups names accepted) are fixed, each
# with a regression test in its tests/ops/test_<family>.py.
