"""Every public op and module under torch.autocast, fed what an AMP step produces.

Each case is a small model: float32 nn.Conv2d / nn.Linear layers make the op's 16-bit
inputs under autocast (features, offsets from `conv_offset`, logits, values), while
RoIs, boxes, targets, reference points and the op's own weights stay float32. The
model runs under torch.autocast(device, dtype), then in float32 with every Conv2d /
Linear output set to the value it had under autocast (gradients flow in float32):
the op sees the same values both times, so the comparison measures the op's
precision policy (docs/ops.md, "Precision under autocast"), not the rounding of
torch's own 16-bit layers. Compared: the output, the gradient of every such
activation (the op's inputs and what feeds them) and of every parameter.

Tolerances, with what was measured on the CPU (bfloat16 and float16 autocast, 5 seeds,
worst case) in brackets:
- output: max |amp - f32| <= OUT_TOL * max |f32|: float16 5e-3 [8e-4], bfloat16 2e-2
  [6e-3] (the output's own 16-bit rounding, 2^-11 / 2^-8, plus sums of rounded terms);
- activation gradients: ||amp - f32|| <= GRAD_TOL * ||f32||: float16 5e-3 [7e-4],
  bfloat16 3e-2 [5e-3];
- parameter gradients (sums over many positions, so more cancellation): float16
  1.5e-2 [2.3e-3], bfloat16 6e-2 [1.4e-2].
On CUDA deform_conv2d and masked_conv2d keep the im2col columns and the GEMM operands
in the 16-bit dtype (float32 accumulation), one more rounding than the CPU's float32
path: their tolerances there are GEMM_FACTOR (4) times larger, as in their own 16-bit
tests. Discrete ops (the NMS family) must give the same indices as the float32 op on
the same values (the 16-bit scores upcast), and float32 outputs.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

import visdet_ops

from .conftest import require_cuda

AMP = [
    pytest.param("cpu", torch.bfloat16, id="cpu-bf16"),
    pytest.param("cuda", torch.float16, marks=pytest.mark.cuda, id="cuda-f16"),
    pytest.param("cuda", torch.bfloat16, marks=pytest.mark.cuda, id="cuda-bf16"),
]
OUT_TOL = {torch.float16: 5e-3, torch.bfloat16: 2e-2}
GRAD_TOL = {torch.float16: 5e-3, torch.bfloat16: 3e-2}
PARAM_GRAD_TOL = {torch.float16: 1.5e-2, torch.bfloat16: 6e-2}
GEMM_FACTOR = 4.0

LOW = "low"  # the output has the autocast dtype (the op computes on the 16-bit input)
F32 = "f32"  # the output is float32 (the op promotes: losses, IoUs)


def _device(name: str) -> torch.device:
    if name == "cuda":
        require_cuda()
    return torch.device(name)


def _rois(gen: torch.Generator, k: int, batch: int, size: float) -> torch.Tensor:
    """float32 RoIs in image coordinates (a 1333-pixel-like range when size is large)."""
    x1 = torch.rand(k, generator=gen) * size * 0.7
    y1 = torch.rand(k, generator=gen) * size * 0.7
    w = torch.rand(k, generator=gen) * size * 0.3 + 4
    h = torch.rand(k, generator=gen) * size * 0.3 + 4
    b = torch.randint(0, batch, (k,), generator=gen).float()
    return torch.stack([b, x1, y1, x1 + w, y1 + h], 1)


def _randomize(module: nn.Module, gen: torch.Generator, scale: float = 0.1) -> nn.Module:
    """Non-zero weights everywhere (the Pack modules zero-initialise their offset
    branches, which would make the offsets, and their gradients, trivially exact)."""
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * scale)
    return module


class Stem(nn.Module):
    """img [N, 3, H, W] -> features [N, C, H, W] through a float32 conv (16-bit under autocast)."""

    def __init__(self, channels: int, gen: torch.Generator):
        super().__init__()
        self.conv = _randomize(nn.Conv2d(3, channels, 3, padding=1), gen, 0.3)

    def forward(self, img):
        return self.conv(img)


class Case(nn.Module):
    def __init__(self, body, inputs, out_kind, gemm=False, **modules):
        super().__init__()
        self.body = body
        self.inputs = inputs
        self.out_kind = out_kind
        self.gemm = gemm  # a 16-bit im2col + GEMM on CUDA (GEMM_FACTOR)
        self.parts = nn.ModuleDict(modules)

    def forward(self, *inputs):
        return self.body(self.parts, *inputs)


def _img(gen, n=2, h=24, w=28):
    return torch.randn(n, 3, h, w, generator=gen)


# ---------------------------------------------------------------- the cases


def case_roi_align(gen, mode="avg", module=False):
    rois = _rois(gen, 12, 2, 4 * 28)
    layer = visdet_ops.RoIAlign(7, 0.25, 2, mode, True)

    def body(p, img, rois):
        x = p["stem"](img)
        if module:
            return p["layer"](x, rois)
        return visdet_ops.roi_align(x, rois, 7, 0.25, 2, mode, True)

    return Case(body, (_img(gen), rois), LOW, stem=Stem(8, gen), layer=layer)


def case_roi_pool(gen, module=False):
    rois = _rois(gen, 12, 2, 4 * 28)

    def body(p, img, rois):
        x = p["stem"](img)
        return visdet_ops.RoIPool(5, 0.25)(x, rois) if module else visdet_ops.roi_pool(x, rois, 5, 0.25)

    return Case(body, (_img(gen), rois), LOW, stem=Stem(8, gen))


def case_deform_roi_pool(gen, kind="fn"):
    rois = _rois(gen, 10, 2, 4 * 28)
    if kind in ("fn", "module"):
        offset_param = nn.Linear(1, 10 * 2 * 7 * 7)
        _randomize(offset_param, gen, 0.1)

        def body(p, img, rois):
            x = p["stem"](img)
            # A float32 offset (from a float32 parameter) beside 16-bit features.
            offset = p["offset"].weight.view(10, 2, 7, 7)
            if kind == "module":
                return visdet_ops.DeformRoIPool(7, 0.25, 2, 0.1)(x, rois, offset)
            return visdet_ops.deform_roi_pool(x, rois, offset, 7, 0.25, 2, 0.1)

        return Case(body, (_img(gen), rois), LOW, stem=Stem(8, gen), offset=offset_param)
    cls = {"pack": visdet_ops.DeformRoIPoolPack, "mpack": visdet_ops.ModulatedDeformRoIPoolPack}[kind]
    layer = _randomize(cls(7, 8, deform_fc_channels=32, spatial_scale=0.25, sampling_ratio=2), gen, 0.05)

    def body(p, img, rois):
        return p["layer"](p["stem"](img), rois)

    return Case(body, (_img(gen), rois), LOW, stem=Stem(8, gen), layer=layer)


def case_deform_conv(gen, kind):
    c = 8
    if kind in ("pack", "mpack"):
        cls = visdet_ops.DeformConv2dPack if kind == "pack" else visdet_ops.ModulatedDeformConv2dPack
        layer = cls(c, 8, 3, padding=1, deform_groups=2)
        _randomize(layer, gen, 0.1)

        def body(p, img):
            return p["layer"](p["stem"](img))

        return Case(body, (_img(gen),), LOW, gemm=True, stem=Stem(c, gen), layer=layer)
    modulated = kind in ("mfn", "mmodule")
    conv_offset = _randomize(nn.Conv2d(c, (3 if modulated else 2) * 2 * 9, 3, padding=1), gen, 0.1)
    if kind in ("module", "mmodule"):
        cls = visdet_ops.ModulatedDeformConv2d if modulated else visdet_ops.DeformConv2d
        layer = _randomize(cls(c, 8, 3, padding=1, deform_groups=2), gen, 0.1)
    else:
        layer = _randomize(nn.Conv2d(c, 8, 3, padding=1), gen, 0.1)  # holds weight and bias

    def body(p, img):
        x = p["stem"](img)
        out = p["conv_offset"](x)
        if modulated:
            offset, mask = out[:, : 2 * 2 * 9], out[:, 2 * 2 * 9 :].sigmoid()
            if kind == "mmodule":
                return p["layer"](x, offset, mask)
            w, b = p["layer"].weight, p["layer"].bias
            return visdet_ops.modulated_deform_conv2d(x, offset, mask, w, b, 1, 1, 1, 1, 2)
        if kind == "module":
            return p["layer"](x, out)
        return visdet_ops.deform_conv2d(x, out, p["layer"].weight, 1, 1, 1, 1, 2)

    return Case(body, (_img(gen),), LOW, gemm=True, stem=Stem(c, gen), conv_offset=conv_offset, layer=layer)


def case_masked_conv(gen, module=False):
    layer = _randomize(visdet_ops.MaskedConv2d(8, 6, 3, padding=1), gen, 0.1)
    mask = torch.rand(2, 24, 28, generator=gen) > 0.4

    def body(p, img, mask):
        x = p["stem"](img)
        if module:
            return p["layer"](x, mask)
        return visdet_ops.masked_conv2d(x, mask, p["layer"].weight, p["layer"].bias, 1)

    return Case(body, (_img(gen), mask), LOW, gemm=True, stem=Stem(8, gen), layer=layer)


def case_focal(gen, kind, module=False):
    classes = 6
    head = _randomize(nn.Linear(8, classes), gen, 0.5)
    weight = torch.rand(classes, generator=gen) + 0.5
    rows = 2 * 24 * 28
    if kind == "sigmoid":
        target = torch.randint(0, classes + 1, (rows,), generator=gen)
    else:
        target = torch.randint(0, classes, (rows,), generator=gen)

    def body(p, img, target, weight):
        x = p["stem"](img).permute(0, 2, 3, 1).reshape(rows, 8)
        logits = p["head"](x)
        if module:
            cls = visdet_ops.SigmoidFocalLoss if kind == "sigmoid" else visdet_ops.SoftmaxFocalLoss
            return cls(2.0, 0.25, weight, "mean")(logits, target)
        fn = visdet_ops.sigmoid_focal_loss if kind == "sigmoid" else visdet_ops.softmax_focal_loss
        return fn(logits, target, 2.0, 0.25, weight, "none")

    return Case(body, (_img(gen), target, weight), F32, stem=Stem(8, gen), head=head)


def case_carafe(gen, kind):
    if kind == "pack":
        layer = _randomize(visdet_ops.CARAFEPack(8, 2, up_kernel=3, up_group=1, encoder_kernel=3), gen, 0.1)

        def body(p, img):
            return p["layer"](p["stem"](img))

        return Case(body, (_img(gen, h=12, w=14),), LOW, stem=Stem(8, gen), layer=layer)
    k, g, s = 3, 2, 2
    encoder = _randomize(nn.Conv2d(8, k * k * g * s * s, 3, padding=1), gen, 0.1)

    def body(p, img):
        x = p["stem"](img)
        m = nn.functional.pixel_shuffle(p["encoder"](x), s)
        n, _, h, w = m.shape
        # softmax under autocast gives float32 masks beside 16-bit features.
        m = m.view(n, g, k * k, h, w).softmax(2).view(n, g * k * k, h, w)
        fn = {
            "fn": visdet_ops.carafe,
            "naive": visdet_ops.carafe_naive,
            "module": visdet_ops.CARAFE(k, g, s),
            "naive_module": visdet_ops.CARAFENaive(k, g, s),
        }[kind]
        return fn(x, m, k, g, s) if kind in ("fn", "naive") else fn(x, m)

    return Case(body, (_img(gen, h=12, w=14),), LOW, stem=Stem(8, gen), encoder=encoder)


def case_corner_pool(gen, mode):
    def body(p, img):
        x = p["stem"](img)
        if mode == "module":
            return visdet_ops.CornerPool("left")(x)
        fn = {
            "top": visdet_ops.top_pool,
            "bottom": visdet_ops.bottom_pool,
            "left": visdet_ops.left_pool,
            "right": visdet_ops.right_pool,
        }.get(mode)
        return fn(x) if fn is not None else visdet_ops.corner_pool(x, "bottom")

    return Case(body, (_img(gen),), LOW, stem=Stem(8, gen))


def _levels():
    shapes = torch.tensor([[12, 14], [6, 7]])
    start = torch.tensor([0, 12 * 14])
    return shapes, start


def case_msda(gen, module=False):
    shapes, start = _levels()
    keys = int((shapes[:, 0] * shapes[:, 1]).sum())
    embed, heads, levels, points, queries = 32, 4, 2, 3, 20
    if module:
        layer = visdet_ops.MultiScaleDeformableAttention(embed, heads, levels, points, dropout=0.0, batch_first=True)
        _randomize(layer, gen, 0.1)
        value_src = torch.randn(2, keys, embed, generator=gen)
        query = torch.randn(2, queries, embed, generator=gen)
        ref = torch.rand(2, queries, levels, 2, generator=gen)

        def body(p, query, value_src, ref, shapes, start):
            return p["layer"](
                query,
                value=value_src,
                reference_points=ref,
                spatial_shapes=shapes,
                level_start_index=start,
            )

        return Case(body, (query, value_src, ref, shapes, start), F32, layer=layer)
    proj = _randomize(nn.Linear(embed, embed), gen, 0.2)
    loc_head = _randomize(nn.Linear(embed, heads * levels * points * 2), gen, 0.2)
    attn_head = _randomize(nn.Linear(embed, heads * levels * points), gen, 0.2)
    value_src = torch.randn(2, keys, embed, generator=gen)
    query = torch.randn(2, queries, embed, generator=gen)

    ref = torch.rand(2, queries, 1, levels, 1, 2, generator=gen) * 0.8 + 0.1

    def body(p, query, value_src, ref, shapes, start):
        value = p["proj"](value_src).view(2, keys, heads, embed // heads)  # 16-bit under autocast
        # Deformable DETR: float32 reference points + 16-bit offsets -> float32 locations.
        offsets = p["loc"](query).view(2, queries, heads, levels, points, 2)
        loc = ref + offsets / shapes.flip(-1).view(1, 1, 1, levels, 1, 2).float()
        attn = p["attn"](query).view(2, queries, heads, levels * points).softmax(-1)  # float32
        attn = attn.view(2, queries, heads, levels, points)
        return visdet_ops.multi_scale_deformable_attn(value, shapes, start, loc, attn, 64)

    return Case(body, (query, value_src, ref, shapes, start), LOW, proj=proj, loc=loc_head, attn=attn_head)


class Producer(nn.Module):
    """A layer whose output the float32 run takes from the autocast run (like every
    Conv2d and Linear output, see _run)."""


class BoxHead(Producer):
    """A DETR-style head: normalised (x1, y1, x2, y2) boxes in the autocast dtype."""

    def __init__(self, gen: torch.Generator):
        super().__init__()
        self.fc = _randomize(nn.Linear(16, 4), gen, 0.5)

    def forward(self, feats):
        c = self.fc(feats).sigmoid()
        return torch.cat([c[:, :2] - c[:, 2:] / 4, c[:, :2] + c[:, 2:] / 4], 1)


def case_bbox_overlaps(gen, mode):
    # 16-bit predicted boxes against float32 ground truth in the same [0, 1] frame.
    feats = torch.randn(30, 16, generator=gen)
    target = _rois(gen, 20, 1, 1.0)[:, 1:] * 0.8

    def body(p, feats, target):
        return visdet_ops.bbox_overlaps(p["head"](feats), target, mode)

    return Case(body, (feats, target), F32, head=BoxHead(gen))


CASES = {
    "roi_align": lambda g: case_roi_align(g),
    "roi_align_max": lambda g: case_roi_align(g, "max"),
    "RoIAlign": lambda g: case_roi_align(g, module=True),
    "roi_pool": lambda g: case_roi_pool(g),
    "RoIPool": lambda g: case_roi_pool(g, module=True),
    "deform_roi_pool": lambda g: case_deform_roi_pool(g),
    "DeformRoIPool": lambda g: case_deform_roi_pool(g, "module"),
    "DeformRoIPoolPack": lambda g: case_deform_roi_pool(g, "pack"),
    "ModulatedDeformRoIPoolPack": lambda g: case_deform_roi_pool(g, "mpack"),
    "deform_conv2d": lambda g: case_deform_conv(g, "fn"),
    "DeformConv2d": lambda g: case_deform_conv(g, "module"),
    "DeformConv2dPack": lambda g: case_deform_conv(g, "pack"),
    "modulated_deform_conv2d": lambda g: case_deform_conv(g, "mfn"),
    "ModulatedDeformConv2d": lambda g: case_deform_conv(g, "mmodule"),
    "ModulatedDeformConv2dPack": lambda g: case_deform_conv(g, "mpack"),
    "masked_conv2d": lambda g: case_masked_conv(g),
    "MaskedConv2d": lambda g: case_masked_conv(g, module=True),
    "sigmoid_focal_loss": lambda g: case_focal(g, "sigmoid"),
    "SigmoidFocalLoss": lambda g: case_focal(g, "sigmoid", module=True),
    "softmax_focal_loss": lambda g: case_focal(g, "softmax"),
    "SoftmaxFocalLoss": lambda g: case_focal(g, "softmax", module=True),
    "carafe": lambda g: case_carafe(g, "fn"),
    "carafe_naive": lambda g: case_carafe(g, "naive"),
    "CARAFE": lambda g: case_carafe(g, "module"),
    "CARAFENaive": lambda g: case_carafe(g, "naive_module"),
    "CARAFEPack": lambda g: case_carafe(g, "pack"),
    "top_pool": lambda g: case_corner_pool(g, "top"),
    "bottom_pool": lambda g: case_corner_pool(g, "bottom"),
    "left_pool": lambda g: case_corner_pool(g, "left"),
    "right_pool": lambda g: case_corner_pool(g, "right"),
    "corner_pool": lambda g: case_corner_pool(g, "fn"),
    "CornerPool": lambda g: case_corner_pool(g, "module"),
    "multi_scale_deformable_attn": lambda g: case_msda(g),
    "MultiScaleDeformableAttention": lambda g: case_msda(g, module=True),
    "bbox_overlaps": lambda g: case_bbox_overlaps(g, "iou"),
    "bbox_overlaps_giou": lambda g: case_bbox_overlaps(g, "giou"),
}
DISCRETE = ("nms", "batched_nms", "soft_nms", "nms_match")


def _run(case: Case, device: torch.device, dtype: torch.dtype, grad_seed: torch.Tensor, amp_values=None):
    """Forward and backward of a case. Returns the output, the gradients of every
    activation a Conv2d/Linear produced (the op's inputs and what feeds them), the
    parameters' gradients and the activations themselves.

    amp_values=None: the autocast run. Else the float32 run, in which each Conv2d/Linear
    output takes the value it had under autocast (gradients flow as in float32): the
    ops see exactly the 16-bit values an AMP step gives them, so what is compared is
    the ops' precision policy, not the rounding of torch's own convs and matmuls."""
    inputs = [t.to(device) for t in case.inputs]
    activations = []

    def keep(module, args, out):
        if amp_values is not None:
            out = out + (amp_values[len(activations)].to(out.dtype) - out).detach()
        out.retain_grad()
        activations.append(out)
        return out

    layers = [m for m in case.modules() if isinstance(m, (nn.Conv2d, nn.Linear, Producer))]
    hooks = [m.register_forward_hook(keep) for m in layers]
    try:
        with torch.autocast(device.type, dtype=dtype, enabled=amp_values is None):
            out = case(*inputs)
    finally:
        for h in hooks:
            h.remove()
    params = [p for p in case.parameters() if p.requires_grad]
    (out.float() * grad_seed.to(device)).sum().backward(inputs=params + activations)
    grads = [None if p.grad is None else p.grad.float().cpu() for p in params]
    act_grads = [None if a.grad is None else a.grad.float().cpu() for a in activations]
    for p in params:
        p.grad = None
    return out, act_grads, grads, [a.detach() for a in activations]


def _relative_max(got: torch.Tensor, want: torch.Tensor) -> float:
    scale = want.abs().max().item()
    return (got - want).abs().max().item() / max(scale, 1e-12)


def _relative_norm(got: torch.Tensor, want: torch.Tensor) -> float:
    return ((got - want).norm() / want.norm().clamp_min(1e-12)).item()


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("device_name, dtype", AMP)
def test_op_under_autocast_matches_float32(rng, name, device_name, dtype):
    device = _device(device_name)
    case = CASES[name](rng).to(device)
    with torch.no_grad():
        shape = case(*[t.to(device) for t in case.inputs]).shape
    grad_seed = torch.randn(shape, generator=rng)
    got, got_acts, got_params, amp_values = _run(case, device, dtype, grad_seed)
    want, want_acts, want_params, _ = _run(case, device, dtype, grad_seed, amp_values)

    factor = GEMM_FACTOR if case.gemm and device.type == "cuda" else 1.0
    out_tol, grad_tol, param_tol = (factor * t[dtype] for t in (OUT_TOL, GRAD_TOL, PARAM_GRAD_TOL))
    expected_dtype = dtype if case.out_kind == LOW else torch.float32
    assert got.dtype == expected_dtype, f"{name}: output {got.dtype}, policy says {expected_dtype}"
    assert want.dtype == torch.float32
    assert any(a.dtype == dtype for a in amp_values), f"{name}: no 16-bit activation under autocast"
    err = _relative_max(got.detach().float().cpu(), want.detach().cpu())
    assert err <= out_tol, f"{name}: output max error {err:.3g} x max|f32| > {out_tol}"

    for i, (g, w) in enumerate(zip(got_acts, want_acts, strict=True)):
        assert (g is None) == (w is None), f"{name}: activation {i} gradient present in one run only"
        if w is None or w.norm() == 0:
            continue
        rel = _relative_norm(g, w)
        assert rel <= grad_tol, f"{name}: activation {i} gradient error {rel:.3g} > {grad_tol}"
    named = [n for n, p in case.named_parameters() if p.requires_grad]
    checked = 0
    for pname, g, w in zip(named, got_params, want_params, strict=True):
        if w is None or w.norm() == 0:
            # Parameters the loss does not reach (DCNv1 has no bias).
            assert g is None or g.norm() == 0, f"{name}: {pname} has a gradient only under autocast"
            continue
        assert g is not None and g.dtype == torch.float32, f"{name}: {pname} lost its float32 gradient"
        assert torch.isfinite(g).all(), f"{name}: {pname} gradient not finite"
        rel = _relative_norm(g, w)
        assert rel <= param_tol, f"{name}: {pname} gradient error {rel:.3g} > {param_tol}"
        checked += 1
    assert checked > 0, f"{name}: no gradient was compared"


def test_every_public_op_and_module_has_a_case():
    """A new public op or module must get an autocast case (or a discrete-op test)."""
    # MultiScaleDeformableAttnFunction.apply is multi_scale_deformable_attn;
    # multi_scale_deformable_attn_pytorch is plain PyTorch (grid_sample), autocast's own.
    covered = set(CASES) | set(DISCRETE)
    covered |= {"MultiScaleDeformableAttnFunction", "multi_scale_deformable_attn_pytorch"}
    public = {n for n in visdet_ops.__all__ if n != "BUILD_INFO" and not n.startswith("_")}
    public = {n for n in public if callable(getattr(visdet_ops, n, None))}
    missing = sorted(public - covered)
    assert not missing, f"no autocast case for {missing}"


def test_gradients_come_back_in_each_inputs_dtype(rng):
    """Under autocast the 16-bit feature map gets a 16-bit gradient, float32 RoIs,
    offsets and weights float32 ones (the casts are autograd ops)."""
    img = torch.randn(2, 3, 16, 16, generator=rng)
    conv = nn.Conv2d(3, 8, 3, padding=1)
    dcn = visdet_ops.ModulatedDeformConv2dPack(8, 8, 3, padding=1)
    rois = _rois(rng, 5, 2, 60)
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


def _boxes_and_scores(gen, n=300, classes=4):
    xy = torch.rand(n, 2, generator=gen) * 1200
    wh = torch.rand(n, 2, generator=gen) * 120 + 8
    boxes = torch.cat([xy, xy + wh], 1)
    feats = torch.randn(n, 16, generator=gen)
    head = _randomize(nn.Linear(16, 1), gen, 0.5)
    idxs = torch.randint(0, classes, (n,), generator=gen)
    return boxes, feats, head, idxs


@pytest.mark.parametrize("op", DISCRETE)
@pytest.mark.parametrize("device_name, dtype", AMP)
def test_nms_family_under_autocast(rng, op, device_name, dtype):
    """float32 boxes beside 16-bit scores (a Linear's output under autocast): the same
    indices as the float32 op on the same score values, float32 outputs."""
    device = _device(device_name)
    boxes, feats, head, idxs = (t.to(device) for t in _boxes_and_scores(rng))
    with torch.autocast(device.type, dtype=dtype):
        scores = head(feats).sigmoid().squeeze(1)
    assert scores.dtype == dtype and boxes.dtype == torch.float32
    exact = scores.float()

    def call(s, amp):
        with torch.autocast(device.type, dtype=dtype, enabled=amp):
            if op == "nms":
                return visdet_ops.nms(boxes, s, 0.5)
            if op == "soft_nms":
                return visdet_ops.soft_nms(boxes, s, 0.3, 0.5, 0.05, "linear")
            if op == "batched_nms":
                return visdet_ops.batched_nms(boxes, s, idxs, dict(iou_threshold=0.5))
            return torch.ops.visdet_ops.nms_match(torch.cat([boxes, s[:, None].to(boxes.dtype)], 1), 0.5), None

    (got_dets, got_inds), (want_dets, want_inds) = call(scores, True), call(exact, False)
    assert got_inds is None or got_inds.dtype == torch.long
    if op == "nms_match":
        assert torch.equal(got_dets, want_dets)
        return
    assert torch.equal(got_inds, want_inds)
    assert got_dets.dtype == torch.float32
    torch.testing.assert_close(got_dets, want_dets, rtol=1e-6, atol=1e-6)
    # The raw ops promote under autocast too (boxes never rounded to 16 bits).
    with torch.autocast(device.type, dtype=dtype):
        raw = torch.ops.visdet_ops.nms(boxes.to(dtype), scores, 0.5)
    assert raw.dtype == torch.long


# ---------------------------------------------------------------- opcheck of the autocast path


def _opcheck_cases(device, dtype, gen):
    x = torch.randn(2, 4, 10, 12, generator=gen).to(device, dtype).requires_grad_()
    rois = _rois(gen, 5, 2, 40).to(device)
    offset = (torch.randn(2, 18, 10, 12, generator=gen) * 0.3).to(device, dtype).requires_grad_()
    mask = torch.rand(2, 9, 10, 12, generator=gen).to(device, dtype).requires_grad_()
    weight = torch.randn(6, 4, 3, 3, generator=gen).to(device).requires_grad_()
    bias = torch.randn(6, generator=gen).to(device).requires_grad_()
    boxes = _rois(gen, 30, 1, 200)[:, 1:].to(device)
    scores = torch.rand(30, generator=gen).to(device, dtype)
    classes = torch.randint(0, 3, (30,), generator=gen).to(device)
    logits = torch.randn(20, 5, generator=gen).to(device, dtype).requires_grad_()
    target = torch.randint(0, 5, (20,), generator=gen).to(device)
    masks = torch.rand(2, 18, 20, 24, generator=gen).to(device).requires_grad_()
    shapes, start = _levels()
    value = torch.randn(2, 12 * 14 + 6 * 7, 2, 8, generator=gen).to(device, dtype).requires_grad_()
    loc = torch.rand(2, 5, 2, 2, 3, 2, generator=gen).to(device, dtype).requires_grad_()
    attn = torch.rand(2, 5, 2, 2, 3, generator=gen).to(device).requires_grad_()
    doff = (torch.randn(5, 2, 3, 3, generator=gen) * 0.1).to(device).requires_grad_()
    ops = torch.ops.visdet_ops
    return {
        "roi_align": (ops.roi_align.default, (x, rois, 3, 3, 0.5, 2, "avg", True)),
        "roi_pool": (ops.roi_pool.default, (x, rois, 3, 3, 0.5)),
        "deform_roi_pool": (ops.deform_roi_pool.default, (x, rois, doff, 3, 3, 0.5, 2, 0.1)),
        "deform_conv2d": (ops.deform_conv2d.default, (x, offset, mask, weight, bias, 1, 1, 1, 1, 1, 1, 1, 1, 1)),
        "masked_conv2d": (ops.masked_conv2d.default, (x, x.detach()[:, 0] > 0, weight, bias, 1, 1)),
        "bbox_overlaps": (ops.bbox_overlaps.default, (boxes.to(dtype), boxes, 0, False, 0)),
        "nms": (ops.nms.default, (boxes, scores, 0.5, 0)),
        "batched_nms": (ops.batched_nms.default, (boxes, scores, classes, 0.5, 0)),
        "soft_nms": (ops.soft_nms.default, (boxes, scores, 0.3, 0.5, 1e-3, "linear", 0, classes)),
        "nms_match": (ops.nms_match.default, (torch.cat([boxes, scores[:, None].float()], 1).to(dtype), 0.5)),
        "sigmoid_focal_loss": (ops.sigmoid_focal_loss.default, (logits, target, 2.0, 0.25, None, "mean")),
        "softmax_focal_loss": (ops.softmax_focal_loss.default, (logits, target, 2.0, 0.25, None, "none")),
        "carafe": (ops.carafe.default, (x, masks, 3, 2, 2)),
        "carafe_naive": (ops.carafe_naive.default, (x, masks, 3, 2, 2)),
        "multi_scale_deformable_attn": (
            ops.multi_scale_deformable_attn.default,
            (value, shapes.to(device), start.to(device), loc, attn, 64),
        ),
    }


@pytest.mark.parametrize(
    "name",
    [
        "roi_align",
        "roi_pool",
        "deform_roi_pool",
        "deform_conv2d",
        "masked_conv2d",
        "bbox_overlaps",
        "nms",
        "batched_nms",
        "soft_nms",
        "nms_match",
        "sigmoid_focal_loss",
        "softmax_focal_loss",
        "carafe",
        "carafe_naive",
        "multi_scale_deformable_attn",
    ],
)
@pytest.mark.parametrize("device_name, dtype", AMP)
def test_opcheck_under_autocast(rng, name, device_name, dtype):
    device = _device(device_name)
    op, args = _opcheck_cases(device, dtype, rng)[name]
    with torch.autocast(device.type, dtype=dtype):
        torch.library.opcheck(op, args)


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


@pytest.mark.parametrize("device_name, dtype", AMP)
def test_detector_step_trains_under_grad_scaler(rng, device_name, dtype):
    device = _device(device_name)
    torch.manual_seed(int(torch.randint(0, 2**31 - 1, (1,), generator=rng)))
    model = TinyDetector().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9)
    scaler = torch.amp.GradScaler(device.type)
    img = torch.randn(2, 3, 64, 80, generator=rng).to(device)
    rois = _rois(rng, 32, 2, 256).to(device)
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
