"""mmcv 2.2.0's pure-PyTorch point_sample, rel_roi_point_to_rel_img_point and SimpleRoIAlign, copied from
open-mmlab/mmcv (mmcv/ops/point_sample.py, Apache-2.0, itself from detectron2's PointRend) with its asserts and
comments left out (and bilinear_grid_sample's clipping written as clamp): the definition
visdet_ops.composite.point_sample is tested against (in float64) and the peer the benchmark times
(benchmarks/point_sample.py). bilinear_grid_sample is mmcv's own gather-based bilinear sampling, an
oracle independent of F.grid_sample."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.nn.modules.utils import _pair


def bilinear_grid_sample(im, grid, align_corners=False):
    n, c, h, w = im.shape
    gn, gh, gw, _ = grid.shape
    x = grid[:, :, :, 0]
    y = grid[:, :, :, 1]
    if align_corners:
        x = ((x + 1) / 2) * (w - 1)
        y = ((y + 1) / 2) * (h - 1)
    else:
        x = ((x + 1) * w - 1) / 2
        y = ((y + 1) * h - 1) / 2
    x = x.view(n, -1)
    y = y.view(n, -1)
    x0 = torch.floor(x).long()
    y0 = torch.floor(y).long()
    x1 = x0 + 1
    y1 = y0 + 1
    wa = ((x1 - x) * (y1 - y)).unsqueeze(1)
    wb = ((x1 - x) * (y - y0)).unsqueeze(1)
    wc = ((x - x0) * (y1 - y)).unsqueeze(1)
    wd = ((x - x0) * (y - y0)).unsqueeze(1)
    im_padded = F.pad(im, pad=[1, 1, 1, 1], mode="constant", value=0)
    padded_h = h + 2
    padded_w = w + 2
    x0, x1, y0, y1 = x0 + 1, x1 + 1, y0 + 1, y1 + 1
    x0 = x0.clamp(0, padded_w - 1)
    x1 = x1.clamp(0, padded_w - 1)
    y0 = y0.clamp(0, padded_h - 1)
    y1 = y1.clamp(0, padded_h - 1)
    im_padded = im_padded.view(n, c, -1)
    x0_y0 = (x0 + y0 * padded_w).unsqueeze(1).expand(-1, c, -1)
    x0_y1 = (x0 + y1 * padded_w).unsqueeze(1).expand(-1, c, -1)
    x1_y0 = (x1 + y0 * padded_w).unsqueeze(1).expand(-1, c, -1)
    x1_y1 = (x1 + y1 * padded_w).unsqueeze(1).expand(-1, c, -1)
    ia = torch.gather(im_padded, 2, x0_y0)
    ib = torch.gather(im_padded, 2, x0_y1)
    ic = torch.gather(im_padded, 2, x1_y0)
    id_ = torch.gather(im_padded, 2, x1_y1)
    return (ia * wa + ib * wb + ic * wc + id_ * wd).reshape(n, c, gh, gw)


def generate_grid(num_grid, size, device):
    affine_trans = torch.tensor([[[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]], device=device)
    grid = F.affine_grid(affine_trans, torch.Size((1, 1, *size)), align_corners=False)
    grid = (grid + 1.0) / 2.0
    return grid.view(1, -1, 2).expand(num_grid, -1, -1)


def rel_roi_point_to_abs_img_point(rois, rel_roi_points):
    with torch.no_grad():
        if rois.size(1) == 5:
            rois = rois[:, 1:]
        abs_img_points = rel_roi_points.clone()
        xs = abs_img_points[:, :, 0] * (rois[:, None, 2] - rois[:, None, 0])
        ys = abs_img_points[:, :, 1] * (rois[:, None, 3] - rois[:, None, 1])
        xs += rois[:, None, 0]
        ys += rois[:, None, 1]
        abs_img_points = torch.stack([xs, ys], dim=2)
    return abs_img_points


def abs_img_point_to_rel_img_point(abs_img_points, img, spatial_scale=1.0):
    if isinstance(img, tuple):
        h, w = img
        scale = torch.tensor([w, h], dtype=torch.float, device=abs_img_points.device)
        scale = scale.view(1, 1, 2)
    else:
        scale = torch.tensor(img.shape[2:]).flip(0).view(1, 1, 2).to(img.device).float()
    return abs_img_points / scale * spatial_scale


def rel_roi_point_to_rel_img_point(rois, rel_roi_points, img, spatial_scale=1.0):
    abs_img_point = rel_roi_point_to_abs_img_point(rois, rel_roi_points)
    return abs_img_point_to_rel_img_point(abs_img_point, img, spatial_scale)


def point_sample(input, points, align_corners=False, **kwargs):
    add_dim = False
    if points.dim() == 3:
        add_dim = True
        points = points.unsqueeze(2)
    output = F.grid_sample(input, points * 2.0 - 1.0, align_corners=align_corners, **kwargs)
    if add_dim:
        output = output.squeeze(3)
    return output


def simple_roi_align(features, rois, output_size, spatial_scale, aligned=True):
    """mmcv's SimpleRoIAlign(output_size, spatial_scale, aligned).forward(features, rois)."""
    output_size = _pair(output_size)
    num_imgs = features.size(0)
    num_rois = rois.size(0)
    rel_roi_points = generate_grid(num_rois, output_size, device=rois.device)
    point_feats = []
    for batch_ind in range(num_imgs):
        feat = features[batch_ind].unsqueeze(0)
        inds = rois[:, 0].long() == batch_ind
        if inds.any():
            rel_img_points = rel_roi_point_to_rel_img_point(
                rois[inds], rel_roi_points[inds], feat, spatial_scale
            ).unsqueeze(0)
            point_feat = point_sample(feat, rel_img_points, align_corners=not aligned)
            point_feat = point_feat.squeeze(0).transpose(0, 1)
            point_feats.append(point_feat)
    point_feats_t = torch.cat(point_feats, dim=0)
    channels = features.size(1)
    return point_feats_t.reshape(num_rois, channels, *output_size)
