"""SAConv2d (visdet_ops/composite/saconv.py) against mmcv 2.2.0's (mmcv/ops/saconv.py over mmcv.cnn.ConvAWS2d):
forward written out here from mmcv's source in float64 (the deformable branch against the float64 DCN reference),
state-dict keys, initialisation, checkpoint loading."""

from __future__ import annotations

import sys

import pytest
import torch
import torch.nn.functional as F

import visdet_ops
from visdet_ops.ops import _args
from visdet_ops.reference.deform_conv import deform_conv2d_reference

from ._composite import docs_section_names_every_public_name


def _aws(m, weight):
    flat = weight.view(weight.size(0), -1)
    mean = flat.mean(dim=1).view(-1, 1, 1, 1)
    std = torch.sqrt(flat.var(dim=1) + 1e-5).view(-1, 1, 1, 1)
    return m.weight_gamma * ((weight - mean) / std) + m.weight_beta


def _mmcv_forward(m, x):
    x = x + m.pre_context(F.adaptive_avg_pool2d(x, 1)).expand_as(x)
    avg_x = F.avg_pool2d(F.pad(x, (2, 2, 2, 2), mode="reflect"), 5, 1, 0)
    switch = m.switch(avg_x)
    weight = _aws(m, m.weight)
    zero = torch.zeros(m.out_channels, dtype=weight.dtype)
    big_p, big_d = tuple(3 * p for p in m.padding), tuple(3 * d for d in m.dilation)
    if m.use_deform:
        out_s = deform_conv2d_reference(
            x, m.offset_s(avg_x), None, weight, None, m.stride, m.padding, m.dilation, m.groups, 1
        )
        out_l = deform_conv2d_reference(
            x, m.offset_l(avg_x), None, weight + m.weight_diff, None, m.stride, big_p, big_d, m.groups, 1
        )
    else:
        out_s = F.conv2d(x, weight, zero, m.stride, m.padding, m.dilation, m.groups)
        out_l = F.conv2d(x, weight + m.weight_diff, zero, m.stride, big_p, big_d, m.groups)
    out = switch * out_s + (1 - switch) * out_l
    return out + m.post_context(F.adaptive_avg_pool2d(out, 1)).expand_as(out)


def _randomise(m, gen, scale=0.3):
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(torch.randn(p.shape, generator=gen, dtype=p.dtype) * scale)
        m.weight_gamma.copy_(torch.rand(m.weight_gamma.shape, generator=gen, dtype=m.weight_gamma.dtype) + 0.5)
        m.weight_beta.copy_(torch.randn(m.weight_beta.shape, generator=gen, dtype=m.weight_beta.dtype) * 0.1)
    return m


@pytest.mark.parametrize("use_deform", [False, True])
@pytest.mark.parametrize(
    "geometry", [{"padding": 1}, {"padding": 1, "stride": 2, "groups": 2}, {"padding": 2, "dilation": 2}]
)
def test_matches_mmcv(use_deform, geometry, rng):
    m = _randomise(visdet_ops.SAConv2d(4, 6, 3, use_deform=use_deform, **geometry).double(), rng)
    x = torch.randn(2, 4, 11, 10, generator=rng, dtype=torch.float64)
    with torch.no_grad():
        torch.testing.assert_close(m(x), _mmcv_forward(m, x))


def test_gradcheck(rng):
    for use_deform in (False, True):
        m = _randomise(visdet_ops.SAConv2d(2, 2, 3, padding=1, use_deform=use_deform).double(), rng)
        x = torch.randn(1, 2, 5, 6, generator=rng, dtype=torch.float64, requires_grad=True)
        assert torch.autograd.gradcheck(m, (x,))


def test_state_dict_init_and_loading(rng):
    m = visdet_ops.SAConv2d(4, 8, 3, padding=1, use_deform=True)
    assert list(m.state_dict()) == [
        "weight", "bias", "weight_diff", "weight_gamma", "weight_beta", "switch.weight", "switch.bias",
        "pre_context.weight", "pre_context.bias", "post_context.weight", "post_context.bias",
        "offset_s.weight", "offset_s.bias", "offset_l.weight", "offset_l.bias",
    ]  # fmt: skip
    assert torch.equal(m.switch.bias, torch.ones(1)) and not m.switch.weight.any() and not m.weight_diff.any()
    assert not any(t.any() for t in (m.pre_context.weight, m.post_context.weight, m.offset_s.weight, m.offset_l.bias))
    assert "SAConv2d" in visdet_ops.__all__ and sys.modules["visdet_ops.saconv"].SAConv2d is visdet_ops.SAConv2d
    # A checkpoint without weight_gamma / weight_beta (a plain conv's): mmcv fills them with its weights' mean and
    # std, so that the standardised weight is the checkpoint's weight again.
    state = {k: v for k, v in _randomise(visdet_ops.SAConv2d(4, 8, 3, padding=1), rng).state_dict().items()}
    del state["weight_gamma"], state["weight_beta"]
    fresh = visdet_ops.SAConv2d(4, 8, 3, padding=1)
    missing = fresh.load_state_dict(state, strict=False).missing_keys
    assert missing == []
    torch.testing.assert_close(fresh._get_weight(fresh.weight), state["weight"], rtol=1e-4, atol=1e-5)


def test_empty_and_noncontiguous(rng):
    m = visdet_ops.SAConv2d(3, 4, 3, padding=1)
    assert m(torch.randn(0, 3, 6, 6)).shape == (0, 4, 6, 6)
    x = torch.randn(2, 7, 6, 3, generator=rng).permute(0, 3, 1, 2)
    torch.testing.assert_close(m(x), m(x.contiguous()))


def test_bad_arguments():
    with pytest.raises(_args.ArgumentError, match="SAConv2d: in_channels must be positive, got 0"):
        visdet_ops.SAConv2d(0, 4, 3)
    with pytest.raises(_args.ArgumentError, match="SAConv2d: kernel_size must be positive"):
        visdet_ops.SAConv2d(4, 4, 0)


def test_docs_section():
    docs_section_names_every_public_name("saconv")
