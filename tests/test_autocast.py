"""The autocast checks that span ops, and the two tests every op's autocast cases run through: each op's test file,
tests/ops/test_<module>.py, declares its cases (AUTOCAST_CASES: a float32 comparison of every public op and module
under torch.autocast; AUTOCAST_OPCHECKS: opcheck of its autocast path), collected here by family, over the harness in
tests/autocast_harness.py (its docstring: what is compared, and the tolerances)."""

from __future__ import annotations

import importlib
import math

import pytest
import torch
from torch import nn

import visdet_ops
from visdet_ops import _loader
from visdet_ops.ops import EXAMPLES

from . import autocast_harness as amp
from .conftest import declarations, op_test_module


def test_every_public_op_and_module_has_a_case():
    """A public name of an op module must get an autocast case in the module's test file, or an entry in its
    AUTOCAST_COVERED_OTHERWISE saying what covers it."""
    missing = {}
    for family in sorted(EXAMPLES):
        tests = op_test_module(family)
        covered = set(getattr(tests, "AUTOCAST_CASES", {})) | set(getattr(tests, "AUTOCAST_COVERED_OTHERWISE", {}))
        lacking = sorted(set(importlib.import_module(f"visdet_ops.ops.{family}").__all__) - covered)
        if lacking:
            missing[f"tests/ops/test_{family}.py"] = lacking
    assert not missing, f"no autocast case for {missing}"


def test_every_op_with_an_autocast_rule_has_an_opcheck():
    """A registered op with an autocast kernel (register_autocast) gets an AUTOCAST_OPCHECKS entry in its family's
    test file. A private backward op `_<op>_backward` is covered by `<op>`'s entry: opcheck's autograd checks under
    autocast run the backward op through its autocast kernel too (counted for deform_conv2d and masked_conv2d)."""
    opchecks = set()
    for family in sorted(EXAMPLES):
        opchecks |= set(getattr(op_test_module(family), "AUTOCAST_OPCHECKS", {}))
    ruled = [
        q.split("::")[1] for q in _loader.op_names() if torch._C._dispatch_has_kernel_for_dispatch_key(q, "AutocastCPU")
    ]
    forward_of = {op: op[1 : -len("_backward")] for op in ruled if op.startswith("_") and op.endswith("_backward")}
    missing = sorted(op for op in ruled if op not in opchecks and forward_of.get(op) not in opchecks)
    assert not missing, f"registered ops with an autocast rule and no AUTOCAST_OPCHECKS entry: {missing}"
    stray = sorted(opchecks - set(ruled))
    assert not stray, f"AUTOCAST_OPCHECKS entries of ops without an autocast rule: {stray}"


def _declared(name: str) -> list:
    """A pytest param per entry of every family's `name` declaration, its id `<family>-<entry>`."""
    return [
        pytest.param(family, key, id=f"{family}-{key}") for family, table in declarations(name).items() for key in table
    ]


@pytest.mark.parametrize("family, name", _declared("AUTOCAST_CASES"))
@pytest.mark.parametrize("device_name, dtype", amp.AMP)
def test_op_under_autocast_matches_float32(rng, family, name, device_name, dtype):
    """Each family's AUTOCAST_CASES under autocast against float32 (tests/autocast_harness.py)."""
    case = declarations("AUTOCAST_CASES", [family])[family][name]
    amp.check_case(name, case, amp.device_for(device_name), dtype, rng)


@pytest.mark.parametrize("family, name", _declared("AUTOCAST_OPCHECKS"))
@pytest.mark.parametrize("device_name, dtype", amp.AMP)
def test_opcheck_under_autocast(rng, family, name, device_name, dtype):
    """Each family's AUTOCAST_OPCHECKS: torch.library.opcheck under autocast."""
    make = declarations("AUTOCAST_OPCHECKS", [family])[family][name]
    amp.check_opcheck(make, amp.device_for(device_name), dtype, rng)


def test_gradients_come_back_in_each_inputs_dtype(rng):
    """Under autocast the 16-bit feature map gets a 16-bit gradient, float32 RoIs,
    offsets and weights float32 ones (the casts are autograd ops)."""
    img = torch.randn(2, 3, 16, 16, generator=rng)
    conv = nn.Conv2d(3, 8, 3, padding=1)
    dcn = visdet_ops.ModulatedDeformConv2dPack(8, 8, 3, padding=1)
    rois = amp.rois(rng, 5, 2, 60)
    offset = torch.randn(5, 2, 7, 7, generator=rng).mul_(0.1).requires_grad_()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        x = conv(img)
        x.retain_grad()
        y = dcn(x)
        z = visdet_ops.deform_roi_pool(y, rois, offset, 7, 0.25, 2)
    assert x.dtype == y.dtype == z.dtype == torch.bfloat16
    z.float().sum().backward()
    assert x.grad.dtype == torch.bfloat16
    assert offset.grad.dtype == torch.float32 and dcn.weight.grad.dtype == torch.float32
    assert conv.weight.grad.dtype == torch.float32


# ---------------------------------------------------------------- a small detector step


class TinyDetector(nn.Module):
    """A DCN backbone block -> RoIAlign head -> focal-loss classifier."""

    def __init__(self, classes: int = 5):
        super().__init__()
        self.stem = nn.Conv2d(3, 16, 3, padding=1)
        self.dcn = visdet_ops.ModulatedDeformConv2dPack(16, 16, 3, padding=1, deform_groups=2)
        nn.init.normal_(self.dcn.conv_offset.weight, std=0.01)
        self.roi = visdet_ops.RoIAlign(7, 0.25, 2)
        self.cls = nn.Linear(16 * 7 * 7, classes)

    def forward(self, img, rois):
        x = torch.relu(self.stem(img))
        x = torch.relu(self.dcn(x))
        return self.cls(self.roi(x, rois).flatten(1))


class ReduceOverheadHead(nn.Module):
    """ModulatedDeformConv2dPack -> roi_align -> a linear classifier -> sigmoid focal loss: the detector head that
    tests/test_cuda_graphs.py trains under torch.compile(mode="reduce-overhead") (the small detector models live
    here, the one central test file that names families for them)."""

    def __init__(self):
        super().__init__()
        self.dcn = visdet_ops.ModulatedDeformConv2dPack(8, 8, 3, padding=1)
        self.roi = visdet_ops.RoIAlign(4, 0.25, 2)
        self.cls = nn.Linear(8 * 4 * 4, 5)

    def forward(self, x, rois, labels):
        feats = self.roi(torch.relu(self.dcn(x)), rois)
        return visdet_ops.sigmoid_focal_loss(self.cls(feats.flatten(1)), labels, 2.0, 0.25, None, "mean")


@pytest.mark.parametrize("device_name, dtype", amp.AMP)
def test_detector_step_trains_under_grad_scaler(rng, device_name, dtype):
    device = amp.device_for(device_name)
    torch.manual_seed(int(torch.randint(0, 2**31 - 1, (1,), generator=rng)))
    model = TinyDetector().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9)
    scaler = torch.amp.GradScaler(device.type)
    img = torch.randn(2, 3, 64, 80, generator=rng).to(device)
    rois = amp.rois(rng, 32, 2, 256).to(device)
    target = torch.randint(0, 6, (32,), generator=rng).to(device)  # 5 = background
    losses, skipped = [], 0
    for _ in range(3):
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=dtype):
            logits = model(img, rois)
            assert logits.dtype == dtype
            loss = visdet_ops.sigmoid_focal_loss(logits, target, 2.0, 0.25, None, "mean")
        assert loss.dtype == torch.float32
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        grads = {n: p.grad for n, p in model.named_parameters()}
        assert all(g is not None for g in grads.values()), [n for n, g in grads.items() if g is None]
        # GradScaler skips a step whose scaled gradients overflowed (and lowers the
        # scale): allowed once, as its first steps may; every other step must be finite.
        if not all(torch.isfinite(g).all() for g in grads.values()):
            skipped += 1
        else:
            assert model.dcn.conv_offset.weight.grad.abs().sum() > 0
        scaler.step(opt)
        scaler.update()
        losses.append(loss.item())
    assert all(math.isfinite(v) for v in losses), losses
    assert skipped <= 1, f"{skipped} of 3 steps had non-finite gradients"


def test_the_sanitize_sweeps_autocast_pass_runs():
    """tests/sanitize_sweep.py's autocast pass (what compute-sanitizer runs on the GPU: every op's autocast path with
    AMP's mixed dtypes) on the CPU, for the family of issue 25's report (DeformConv2dPack, float32 input inside
    autocast) and roi_align: the script imports the test files' cases and checks their answers."""
    from . import sanitize_sweep

    assert sanitize_sweep.main(["--device", "cpu", "--pass", "autocast", "deform_conv", "roi_align"]) == 0
    # and its cuBLAS probe (initcheck's reports of reads of a 16-bit GEMM's output, with no code of ours)
    assert sanitize_sweep.main(["--device", "cpu", "--pass", "cublas-probe"]) == 0


def test_initialized_products_route_every_product_through_a_zero_filled_output():
    """sanitize_sweep.initialise_products (the initcheck run's `--initialized-products`), on the CPU's kernels: mm,
    bmm, addmm and baddbmm, from Python and from our C++ (DCN's GEMMs), give the same results, each through its out=
    overload after a zero fill; the overrides end with their Library, and the sweep runs under them."""
    from torch.profiler import ProfilerActivity, profile

    from . import sanitize_sweep

    gen = torch.Generator().manual_seed(0)
    a, b = torch.randn(5, 7, generator=gen), torch.randn(7, 3, generator=gen)
    ba, bb = torch.randn(2, 5, 7, generator=gen), torch.randn(2, 7, 3, generator=gen)
    bias, bbias = torch.randn(3, generator=gen), torch.randn(2, 5, 3, generator=gen)
    calls = (
        lambda: torch.mm(a, b),
        lambda: torch.bmm(ba, bb),
        lambda: torch.addmm(bias, a, b, beta=0.5, alpha=2.0),
        lambda: torch.baddbmm(bbias, ba, bb, beta=0.5, alpha=2.0),
    )
    want = [f() for f in calls]
    lib = sanitize_sweep.initialise_products("CPU")
    try:
        for f, w in zip(calls, want, strict=True):
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                got = f()
            torch.testing.assert_close(got, w)
            assert "aten::new_zeros" in {e.key for e in prof.key_averages()}, "the product did not take the override"
        x = torch.randn(1, 4, 6, 6, generator=gen, requires_grad=True)
        offset = torch.randn(1, 18, 6, 6, generator=gen) * 0.3
        weight = torch.randn(3, 4, 3, 3, generator=gen, requires_grad=True)
        out = visdet_ops.deform_conv2d(x, offset, weight, 1, 1)
        out.sum().backward()
    finally:
        lib._destroy()
    # The sweep under its own overrides (one Library of them at a time: torch 2.11 refuses a second override of a
    # kernel that Python already overrides), which end when it returns.
    assert sanitize_sweep.main(["--device", "cpu", "--pass", "examples", "--initialized-products", "deform"]) == 0
    x2, w2 = x.detach().requires_grad_(), weight.detach().requires_grad_()
    ref = visdet_ops.deform_conv2d(x2, offset, w2, 1, 1)
    ref.sum().backward()
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(x.grad, x2.grad)
    torch.testing.assert_close(weight.grad, w2.grad)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        torch.mm(a, b)
    assert "aten::new_zeros" not in {e.key for e in prof.key_averages()}, "the overrides outlived their Library"
