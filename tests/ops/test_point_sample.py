"""point_sample, rel_roi_point_to_rel_img_point and SimpleRoIAlign (visdet_ops/composite/point_sample.py) against
mmcv 2.2.0's own code (visdet_ops/reference/point_sample.py) and mmcv's gather-based bilinear sampling, in float64."""

from __future__ import annotations

import pytest
import torch

import visdet_ops
from visdet_ops.ops import _args
from visdet_ops.reference import point_sample as mmcv

from ._composite import docs_section_names_every_public_name


def _rois(k, n, h, w, gen, sort=True):
    xy = torch.rand(k, 2, generator=gen, dtype=torch.float64) * torch.tensor([w, h]) * 0.8
    wh = torch.rand(k, 2, generator=gen, dtype=torch.float64) * torch.tensor([w, h]) * 0.6 + 0.5
    idx = torch.randint(0, n, (k, 1), generator=gen).double()
    if sort:
        idx = idx.sort(0).values
    return torch.cat([idx, xy, xy + wh], 1)


def test_module_path_and_exports():
    import sys

    assert visdet_ops.point_sample is visdet_ops.composite.point_sample.point_sample
    module = sys.modules["visdet_ops.point_sample"]
    assert module.point_sample is visdet_ops.point_sample and module.SimpleRoIAlign is visdet_ops.SimpleRoIAlign
    assert module.rel_roi_point_to_rel_img_point is visdet_ops.rel_roi_point_to_rel_img_point


@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("grid", [False, True], ids=["points3d", "points4d"])
def test_point_sample_matches_mmcv(device, dtype, align_corners, grid, rng):
    x = torch.randn(2, 3, 9, 11, generator=rng, dtype=dtype).to(device)
    shape = (2, 4, 5, 2) if grid else (2, 17, 2)
    p = (torch.rand(shape, generator=rng, dtype=dtype) * 1.2 - 0.1).to(device)  # some outside [0, 1]
    got = visdet_ops.point_sample(x, p, align_corners)
    assert torch.equal(got, mmcv.point_sample(x, p, align_corners)), "not mmcv's result bit for bit"
    p4 = p if grid else p.unsqueeze(2)
    want = mmcv.bilinear_grid_sample(x.double(), p4.double() * 2 - 1, align_corners)
    want = want if grid else want.squeeze(3)
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)


def test_point_sample_kwargs_and_16bit():
    x = torch.randn(1, 2, 6, 7)
    p = torch.rand(1, 9, 2) * 1.4 - 0.2
    for kwargs in ({"mode": "nearest"}, {"padding_mode": "border"}, {"mode": "bilinear", "padding_mode": "reflection"}):
        assert torch.equal(visdet_ops.point_sample(x, p, **kwargs), mmcv.point_sample(x, p, **kwargs)), kwargs
    got = visdet_ops.point_sample(x.bfloat16(), p.bfloat16())
    assert got.dtype == torch.bfloat16 and torch.equal(got, mmcv.point_sample(x.bfloat16(), p.bfloat16()))


def test_point_sample_gradcheck():
    x = torch.randn(2, 2, 5, 6, dtype=torch.float64, requires_grad=True)
    p = (torch.rand(2, 7, 2, dtype=torch.float64) * 0.9 + 0.05).requires_grad_()
    assert torch.autograd.gradcheck(lambda a, b: visdet_ops.point_sample(a, b), (x, p))
    assert torch.autograd.gradcheck(lambda a, b: visdet_ops.point_sample(a, b, True), (x, p))


def test_point_sample_empty_and_noncontiguous():
    x = torch.randn(2, 3, 8, 8)
    assert visdet_ops.point_sample(x, torch.rand(2, 0, 2)).shape == (2, 3, 0)
    assert visdet_ops.point_sample(x[:0], torch.rand(0, 4, 2)).shape == (0, 3, 4)
    xt = torch.randn(2, 8, 8, 3).permute(0, 3, 1, 2)
    pt = torch.rand(2, 2, 5).transpose(1, 2)
    assert not xt.is_contiguous() and not pt.is_contiguous()
    assert torch.equal(visdet_ops.point_sample(xt, pt), mmcv.point_sample(xt.contiguous(), pt.contiguous()))


def test_point_sample_bad_inputs():
    x, p = torch.randn(2, 3, 8, 8), torch.rand(2, 5, 2)
    with pytest.raises(_args.ShapeError, match=r"point_sample: input must have shape \[N, C, H, W\], got \[3, 8, 8\]"):
        visdet_ops.point_sample(x[0], p)
    with pytest.raises(_args.ShapeError, match=r"point_sample: points must have shape .* got \[2, 5, 3\]"):
        visdet_ops.point_sample(x, torch.rand(2, 5, 3))
    with pytest.raises(_args.ShapeError, match=r"N = input.size\(0\) = 2, got \[1, 5, 2\]"):
        visdet_ops.point_sample(x, p[:1])
    with pytest.raises(_args.ShapeError, match=r"points must have shape \[N, P, 2\] or \[N, Hg, Wg, 2\], got \[5, 2\]"):
        visdet_ops.point_sample(x, p[0])
    with pytest.raises(TypeError, match="point_sample: points must be a Tensor, got list"):
        visdet_ops.point_sample(x, [[0.5, 0.5]])


@pytest.mark.parametrize("img", ["tuple", "tensor"])
@pytest.mark.parametrize("columns", [4, 5])
def test_rel_roi_point_to_rel_img_point_matches_mmcv(device, img, columns, rng):
    rois = _rois(6, 2, 30, 40, rng)[:, 5 - columns :].to(device)
    rel = torch.rand(6, 9, 2, generator=rng, dtype=torch.float64).to(device)
    size = (30, 40) if img == "tuple" else torch.zeros(1, 1, 30, 40, device=device)
    for scale in (1.0, 0.25):
        got = visdet_ops.rel_roi_point_to_rel_img_point(rois, rel, size, scale)
        want = mmcv.rel_roi_point_to_rel_img_point(rois, rel, size, scale)
        assert got.dtype == want.dtype and torch.equal(got, want)
    half = visdet_ops.rel_roi_point_to_rel_img_point(rois.half(), rel.half(), size)
    assert half.dtype == mmcv.rel_roi_point_to_rel_img_point(rois.half(), rel.half(), size).dtype == torch.float32


def test_rel_roi_point_to_rel_img_point_bad_inputs():
    rois, rel = torch.rand(3, 5), torch.rand(3, 4, 2)
    op = visdet_ops.rel_roi_point_to_rel_img_point
    with pytest.raises(
        _args.ShapeError, match=r"rel_roi_points must have shape \[K, P, 2\] with K = rois.size\(0\) = 3"
    ):
        op(rois, rel[:2], (5, 5))
    with pytest.raises(_args.ShapeError, match=r"rois must have shape \[K, 4\] or \[K, 5\], got \[3, 6\]"):
        op(torch.rand(3, 6), rel, (5, 5))
    with pytest.raises(
        _args.ArgumentError, match=r"img must be an \(h, w\) tuple or an \[N, C, H, W\] tensor, got \[5, 5\]"
    ):
        op(rois, rel, torch.zeros(5, 5))


@pytest.mark.parametrize("aligned", [True, False])
@pytest.mark.parametrize("images", [1, 3])
def test_simple_roi_align_matches_mmcv(device, dtype, aligned, images, rng):
    x = torch.randn(images, 4, 12, 15, generator=rng, dtype=dtype).to(device)
    rois = _rois(9, images, 48, 60, rng).to(device, dtype)
    for size, scale in ((7, 0.25), ((3, 5), 0.25)):
        got = visdet_ops.SimpleRoIAlign(size, scale, aligned)(x, rois)
        want = mmcv.simple_roi_align(x, rois, size, scale, aligned)
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6 if dtype == torch.float32 else 1e-12)


def test_simple_roi_align_rows_follow_the_rois(rng):
    """mmcv returns the rows in image order, which is the RoIs' order only when they are sorted by image (as mmdet's
    bbox2roi makes them); here row k is always rois[k]'s."""
    x = torch.randn(3, 2, 10, 10, generator=rng, dtype=torch.float64)
    rois = _rois(8, 3, 40, 40, rng, sort=False)
    rois[:3, 0] = torch.tensor([2.0, 0.0, 1.0])
    got = visdet_ops.SimpleRoIAlign(4, 0.25)(x, rois)
    for k in range(8):
        torch.testing.assert_close(got[k : k + 1], mmcv.simple_roi_align(x, rois[k : k + 1], 4, 0.25))
    order = torch.argsort(rois[:, 0], stable=True)
    torch.testing.assert_close(got[order], mmcv.simple_roi_align(x, rois, 4, 0.25))


def test_simple_roi_align_gradcheck_empty_and_an_image_without_rois(rng):
    x = torch.randn(3, 2, 6, 7, generator=rng, dtype=torch.float64, requires_grad=True)
    rois = _rois(4, 3, 24, 28, rng)
    rois[:, 0] = torch.tensor([0.0, 0.0, 2.0, 2.0])  # image 1 has none
    m = visdet_ops.SimpleRoIAlign(3, 0.25)
    assert torch.autograd.gradcheck(lambda f: m(f, rois), (x,))
    assert m(x, rois[:0]).shape == (0, 2, 3, 3)
    xt = x.detach().permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2)
    torch.testing.assert_close(m(xt, rois.t().contiguous().t()), m(x.detach(), rois))


def test_simple_roi_align_16bit_features():
    """Half or bfloat16 features with float32 RoIs (mmcv: grid_sample refuses the float32 grid beside them)."""
    x = torch.randn(1, 2, 8, 8)
    rois = torch.tensor([[0.0, 1, 1, 20, 25]])
    got = visdet_ops.SimpleRoIAlign(4, 0.25)(x.bfloat16(), rois)
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got.float(), mmcv.simple_roi_align(x, rois, 4, 0.25), rtol=0.02, atol=0.02)


def test_simple_roi_align_bad_inputs():
    x = torch.randn(2, 2, 8, 8)
    m = visdet_ops.SimpleRoIAlign(2, 1.0)
    with pytest.raises(_args.ShapeError, match=r"SimpleRoIAlign: rois must have shape \[K, 5\], got \[1, 4\]"):
        m(x, torch.rand(1, 4))
    for index in (2.0, -1.0):
        with pytest.raises(_args.ShapeError, match=r"SimpleRoIAlign: rois' batch indices .* in \[0, 2\) for 2 images"):
            m(x, torch.tensor([[0.0, 1, 1, 3, 3], [index, 1, 1, 3, 3]]))
    with pytest.raises(_args.ShapeError, match=r"in \[0, 1\) for 1 images"):
        m(x[:1], torch.tensor([[1.0, 1, 1, 3, 3]]))
    with pytest.raises(_args.ShapeError, match=r"SimpleRoIAlign: features must have shape \[N, C, H, W\]"):
        m(x[0], torch.rand(1, 5))
    with pytest.raises(_args.ArgumentError, match=r"SimpleRoIAlign: output_size must be positive, got 0"):
        visdet_ops.SimpleRoIAlign((0, 3), 1.0)
    assert repr(m) == "SimpleRoIAlign(output_size=(2, 2), spatial_scale=1.0"  # mmcv's text


def test_docs_section():
    docs_section_names_every_public_name("point_sample")
