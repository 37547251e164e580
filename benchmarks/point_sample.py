"""point_sample and SimpleRoIAlign (visdet_ops/composite/point_sample.py) against mmcv 2.2.0's pure-PyTorch code
(visdet_ops/reference/point_sample.py, copied from open-mmlab/mmcv, Apache-2.0) on the CPU or a GPU (issue 39).

  python benchmarks/point_sample.py [--device cpu|cuda] [--threads 0] [--rounds 21] [--out FILE.json]

Shapes: Mask2Former's loss and matcher (point_sample of one-channel mask logits at 12544 points per query, 100
queries; the matcher's queries x targets points), PointRend's SimpleRoIAlign (14 x 14 over 256 channels, 100 RoIs
per image, 2 images). Forward, and forward + backward where the loss takes gradients. Each case times ours and
mmcv's alternately (bench.alternating_medians) and reports the medians and ratio = mmcv / ours (>= 1: ours is as
fast or faster). On CUDA each call is timed between events after a device sync.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from bench import alternating_medians, timed_calls  # benchmarks/bench.py: the harness's timing

import visdet_ops
from visdet_ops.reference import point_sample as mmcv


def cases(device: torch.device, gen: torch.Generator):
    """(name, ours, mmcv's) of each case."""

    def rand(*shape, grad=False):
        return torch.rand(shape, generator=gen).to(device).requires_grad_(grad)

    # Mask2Former's loss: mask_point_preds = point_sample(mask_preds.unsqueeze(1), points_coords).squeeze(1)
    preds, points = rand(100, 1, 128, 128, grad=True), rand(100, 12544, 2)

    def loss(fn):
        return lambda: torch.autograd.grad(fn(preds, points).sum(), preds)

    yield "point_sample 100x1x128x128, 12544 pts, fwd+bwd", loss(visdet_ops.point_sample), loss(mmcv.point_sample)
    # Mask2Former's matcher: point_sample(mask_pred.unsqueeze(1), point_coords.repeat(num_queries, 1, 1)), no grad
    coords = rand(1, 12544, 2).repeat(100, 1, 1)
    pred = preds.detach()
    yield (
        "point_sample 100x1x128x128, 12544 pts, fwd",
        lambda: visdet_ops.point_sample(pred, coords),
        lambda: mmcv.point_sample(pred, coords),
    )
    feats = rand(2, 64, 96, 96)
    many = rand(2, 4096, 2)
    yield (
        "point_sample 2x64x96x96, 4096 pts, fwd",
        lambda: visdet_ops.point_sample(feats, many),
        lambda: mmcv.point_sample(feats, many),
    )
    # PointRend's mask RoI extractor: SimpleRoIAlign(14, 1 / 4) on a stride-4 map
    x = rand(2, 256, 200, 200, grad=True)
    xy = torch.rand(200, 2, generator=gen) * 700
    wh = torch.rand(200, 2, generator=gen) * 100 + 8
    batch = torch.arange(2).repeat_interleave(100)[:, None].float()
    rois = torch.cat([batch, xy, xy + wh], 1).to(device)
    ours_m = visdet_ops.SimpleRoIAlign(14, 0.25)
    for grad in (False, True):
        if grad:
            ours = lambda: torch.autograd.grad(ours_m(x, rois).sum(), x)  # noqa: E731
            peer = lambda: torch.autograd.grad(mmcv.simple_roi_align(x, rois, 14, 0.25).sum(), x)  # noqa: E731
        else:
            ours = lambda: ours_m(x.detach(), rois)  # noqa: E731
            peer = lambda: mmcv.simple_roi_align(x.detach(), rois, 14, 0.25)  # noqa: E731
        yield f"SimpleRoIAlign 14x14, 2x256x200x200, 200 RoIs, {'fwd+bwd' if grad else 'fwd'}", ours, peer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: torch's default)")
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    timer = lambda fn: timed_calls(fn, 1, device.type == "cuda")[0]  # noqa: E731
    rows = []
    for name, ours, peer in cases(device, torch.Generator().manual_seed(0)):
        ours(), peer()  # warm-up
        ours_ms, peer_ms = alternating_medians(ours, peer, args.rounds, timer)
        rows.append({"case": name, "ours_ms": ours_ms, "mmcv_ms": peer_ms, "ratio": peer_ms / ours_ms})
        print(f"{name:58s} ours {ours_ms:9.3f} ms  mmcv {peer_ms:9.3f} ms  ratio {peer_ms / ours_ms:5.2f}")
    if args.out:
        env = {"device": str(device), "torch": torch.__version__, "threads": torch.get_num_threads()}
        args.out.write_text(json.dumps({"env": env, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
