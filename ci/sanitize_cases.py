"""Launches every CUDA kernel of visdet-ops once (forward and backward, each
dtype) on small inputs, for compute-sanitizer. Exits non-zero on a wrong result,
so a sanitizer run also checks the answers."""

from __future__ import annotations

import sys

import torch

import visdet_ops
from visdet_ops.reference.nms import nms_reference
from visdet_ops.reference.roi_align import roi_align_reference


def main() -> int:
    gen = torch.Generator().manual_seed(1)
    for dtype in (torch.float32, torch.float64):
        # nms: several 64-box blocks, so both the mask and the walk kernel
        # cross block boundaries.
        n = 300
        xy = (torch.rand(n, 2, generator=gen, dtype=torch.float64) * 96 * 8).round() / 8
        wh = (torch.rand(n, 2, generator=gen, dtype=torch.float64) * 30 * 8 + 4).round() / 8
        boxes = torch.cat([xy, xy + wh], 1)
        scores = torch.rand(n, generator=gen, dtype=torch.float64)
        keep = visdet_ops.nms(boxes.cuda().to(dtype), scores.cuda().to(dtype), 0.5)[1]
        if keep.tolist() != nms_reference(boxes, scores, 0.5).tolist():
            print(f"nms {dtype}: wrong result", file=sys.stderr)
            return 1
        # roi_align: both pool modes, forward and backward.
        x = torch.randn(2, 3, 9, 11, generator=gen, dtype=torch.float64)
        rois = torch.tensor(
            [[0, 1, 1, 7, 6], [1, -2, 0, 12, 9], [1, 3, 3, 3.5, 4], [0, 20, 20, 30, 30]], dtype=torch.float64
        )
        for mode in ("avg", "max"):
            xc = x.cuda().to(dtype).requires_grad_()
            out = visdet_ops.roi_align(xc, rois.cuda().to(dtype), 3, 1.0, 0, mode, True)
            out.sum().backward()
            torch.cuda.synchronize()
            want = roi_align_reference(x, rois, (3, 3), 1.0, 0, mode, True)
            if not torch.allclose(out.detach().cpu().double(), want, rtol=1e-4, atol=1e-4):
                print(f"roi_align {mode} {dtype}: wrong result", file=sys.stderr)
                return 1
    print("sanitize cases: every kernel launched, results correct")
    return 0


if __name__ == "__main__":
    sys.exit(main())
