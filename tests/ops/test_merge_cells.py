"""merge_cells (visdet_ops/composite/merge_cells.py) against mmcv 2.2.0's cells (mmcv/ops/merge_cells.py): forward
written out here from mmcv's source in float64, state-dict keys, initialisation, bad arguments."""

from __future__ import annotations

import math
import sys

import pytest
import torch
import torch.nn.functional as F

import visdet_ops
from visdet_ops.composite.merge_cells import BaseMergeCell
from visdet_ops.ops import _args

from ._composite import docs_section_names_every_public_name


def _mmcv_resize(x, size, mode):
    # mmcv's BaseMergeCell._resize
    if x.shape[-2:] == size:
        return x
    if x.shape[-2:] < size:
        return F.interpolate(x, size=size, mode=mode)
    if x.shape[-2] % size[-2] != 0 or x.shape[-1] % size[-1] != 0:
        h, w = x.shape[-2:]
        pad_h = math.ceil(h / size[0]) * size[0] - h
        pad_w = math.ceil(w / size[1]) * size[1] - w
        x = F.pad(x, (pad_w // 2, pad_w - pad_w // 2, pad_h // 2, pad_h - pad_h // 2), mode="constant", value=0.0)
    k = (x.shape[-2] // size[-2], x.shape[-1] // size[-1])
    return F.max_pool2d(x, kernel_size=k, stride=k)


def _mmcv_forward(cell, x1, x2, out_size=None):
    """mmcv's forward with the cell's own weights: out_conv = ConvModule(order act, conv, norm)."""
    out_size = out_size or max(x1.size()[2:], x2.size()[2:])
    x1 = _mmcv_resize(x1, out_size, cell.upsample_mode)
    x2 = _mmcv_resize(x2, out_size, cell.upsample_mode)
    if isinstance(cell, visdet_ops.SumCell):
        x = x1 + x2
    elif isinstance(cell, visdet_ops.ConcatCell):
        x = torch.cat([x1, x2], 1)
    else:
        x = x2 + F.adaptive_avg_pool2d(x2, 1).sigmoid() * x1
    if cell.with_out_conv:
        conv = cell.out_conv.conv
        x = F.conv2d(F.relu(x), conv.weight, conv.bias, conv.stride, conv.padding, conv.dilation, conv.groups)
        if cell.out_conv.with_norm:
            bn = cell.out_conv.bn
            x = F.batch_norm(x, bn.running_mean, bn.running_var, bn.weight, bn.bias, False, 0.0, bn.eps)
    return x


CELLS = {
    "SumCell": lambda: visdet_ops.SumCell(4, 4, out_norm_cfg={"type": "BN"}),
    "GlobalPoolingCell": lambda: visdet_ops.GlobalPoolingCell(4, 4, out_norm_cfg={"type": "BN"}),
    "ConcatCell": lambda: visdet_ops.ConcatCell(4, 6, upsample_mode="bilinear"),
    "SumCell-no-out-conv": lambda: visdet_ops.SumCell(4, 4, with_out_conv=False),
}


@pytest.mark.parametrize("name", sorted(CELLS))
@pytest.mark.parametrize("sizes", [((8, 8), (4, 4), None), ((7, 9), (16, 12), None), ((10, 10), (10, 10), (3, 4))])
def test_cells_match_mmcv(name, sizes, rng):
    cell = CELLS[name]().double().eval()
    s1, s2, out = sizes
    x1 = torch.randn(2, 4, *s1, generator=rng, dtype=torch.float64)
    x2 = torch.randn(2, 4, *s2, generator=rng, dtype=torch.float64)
    with torch.no_grad():
        for p in cell.parameters():
            p.copy_(torch.randn(p.shape, generator=rng, dtype=torch.float64))
    got = cell(x1, x2, out)
    torch.testing.assert_close(got, _mmcv_forward(cell, x1, x2, out))


@pytest.mark.parametrize("name", sorted(CELLS))
def test_gradcheck(name, rng):
    cell = CELLS[name]().double().eval()
    x1 = torch.randn(1, 4, 2, 3, generator=rng, dtype=torch.float64, requires_grad=True)
    x2 = torch.randn(1, 4, 4, 5, generator=rng, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(cell, (x1, x2))


def test_state_dict_keys_and_init():
    cell = visdet_ops.GlobalPoolingCell(in_channels=8, out_channels=8, out_norm_cfg={"type": "BN"})
    assert list(cell.state_dict()) == [
        "out_conv.conv.weight",
        "out_conv.conv.bias",
        "out_conv.bn.weight",
        "out_conv.bn.bias",
        "out_conv.bn.running_mean",
        "out_conv.bn.running_var",
        "out_conv.bn.num_batches_tracked",
    ]  # out_conv_cfg's bias=True: a conv bias beside the norm, as in mmcv
    assert list(visdet_ops.SumCell(8, 8).state_dict()) == ["out_conv.conv.weight", "out_conv.conv.bias"]
    cell = visdet_ops.SumCell(64, 64, with_input1_conv=True, out_norm_cfg={"type": "GN", "num_groups": 8})
    assert {"input1_conv.conv.weight", "input1_conv.conv.bias", "out_conv.gn.weight"} <= set(cell.state_dict())
    assert isinstance(cell.input2_conv, torch.nn.Sequential) and len(cell.input2_conv) == 0
    w = cell.out_conv.conv.weight
    want = math.sqrt(2.0 / (w.size(0) * w.size(2) * w.size(3)))  # kaiming normal, fan_out, relu
    assert abs(w.std().item() - want) < 0.1 * want and torch.equal(cell.out_conv.conv.bias, torch.zeros(64))
    assert torch.equal(cell.out_conv.gn.weight, torch.ones(64))
    assert issubclass(visdet_ops.ConcatCell, BaseMergeCell)
    assert sys.modules["visdet_ops.merge_cells"].GlobalPoolingCell is visdet_ops.GlobalPoolingCell


def test_empty_and_noncontiguous(rng):
    cell = visdet_ops.SumCell(3, 3).eval()
    assert cell(torch.randn(0, 3, 4, 4), torch.randn(0, 3, 8, 8)).shape == (0, 3, 8, 8)
    x1 = torch.randn(2, 4, 4, 3, generator=rng).permute(0, 3, 1, 2)
    x2 = torch.randn(2, 8, 8, 3, generator=rng).permute(0, 3, 1, 2)
    torch.testing.assert_close(cell(x1, x2), cell(x1.contiguous(), x2.contiguous()))


def test_bad_arguments():
    with pytest.raises(
        _args.ArgumentError, match=r"SumCell: upsample_mode must be one of \['nearest', 'bilinear'\], got 'area'"
    ):
        visdet_ops.SumCell(4, 4, upsample_mode="area")
    with pytest.raises(_args.ArgumentError, match="SumCell: norm_cfg type 'NoSuchNorm' is not one of"):
        visdet_ops.SumCell(4, 4, out_norm_cfg={"type": "NoSuchNorm"})
    with pytest.raises(_args.ArgumentError, match="norm_cfg of type GN needs num_groups"):
        visdet_ops.SumCell(4, 4, out_norm_cfg={"type": "GN"})
    cell = visdet_ops.SumCell(4, 4)
    with pytest.raises(_args.ShapeError, match=r"SumCell: x1 and x2 must be \[N, C, H, W\] with the same N and C"):
        cell(torch.randn(1, 4, 4, 4), torch.randn(1, 3, 4, 4))
    with pytest.raises(_args.ArgumentError, match=r"SumCell: out_size must be None or \(h, w\), got \(3,\)"):
        cell(torch.randn(1, 4, 4, 4), torch.randn(1, 4, 4, 4), (3,))


def test_docs_section():
    docs_section_names_every_public_name("merge_cells")
