"""Whole steps of real models with our ops swapped in, against the same models with their own ops (issue 24).

  python benchmarks/e2e.py [--device cuda|cpu] [--only fasterrcnn maskrcnn msda] [--amp] [--rounds 5]
                           [--steps 3] [--batch 2] [--size 800 1088] [--threads N] [--json OUT]

- torchvision's Faster R-CNN and Mask R-CNN (R50-FPN, random weights, seed 0, the same weights and inputs for
  both runs): one training step (forward with targets, loss.backward(), fresh gradients through
  zero_grad(set_to_none=True)) and one predict (eval, no_grad). "ours" swaps visdet_ops.roi_align into
  MultiScaleRoIAlign (box and mask heads) and visdet_ops.nms into torchvision.ops.boxes.nms (batched_nms of the
  RPN and the box head); "theirs" is torchvision as shipped.
- A Deformable-DETR-style stack (6 encoder layers of MultiScaleDeformableAttention + FFN over 4 levels, bs 2):
  one training step with our MSDA kernel against the same modules on the pure-PyTorch grid_sample formulation.

Rounds alternate ours and theirs; each round times `--steps` steps (after one warm-up step per side) and the
table gives the median step over rounds and ratio = theirs / ours (> 1: ours is faster). cudnn.benchmark stays
off (the mask head's changing shapes would re-tune it every step). On CUDA the step is timed between
synchronisations (wall clock: host and device). --amp runs the steps under torch.autocast(float16) with a
GradScaler. Needs torchvision.
"""

from __future__ import annotations

import argparse
import contextlib
import sys

import torch
from bench import alternating_medians, device_kernels, wall_time_per_call, write_json  # benchmarks/bench.py: timing

import visdet_ops


def _our_roi_align(input, boxes, output_size, spatial_scale=1.0, sampling_ratio=-1, aligned=False):
    """torchvision.ops.roi_align's signature on visdet_ops.roi_align (MultiScaleRoIAlign passes [K, 5] rois)."""
    if isinstance(boxes, list | tuple):
        from torchvision.ops._utils import convert_boxes_to_roi_format

        boxes = convert_boxes_to_roi_format(boxes)
    return visdet_ops.roi_align(input, boxes, output_size, spatial_scale, sampling_ratio, "avg", aligned)


def _our_nms(boxes, scores, iou_threshold):
    """torchvision.ops.nms's contract (keep indices by decreasing score) from visdet_ops.nms (mmcv's: dets, keep)."""
    return visdet_ops.nms(boxes, scores, iou_threshold)[1]


@contextlib.contextmanager
def _swapped(ours: bool):
    """torchvision's detection models with our roi_align and nms (ours=True), or as shipped."""
    import torchvision.ops.boxes as tv_boxes
    import torchvision.ops.poolers as tv_poolers

    saved = tv_poolers.roi_align, tv_boxes.nms
    if ours:
        tv_poolers.roi_align, tv_boxes.nms = _our_roi_align, _our_nms
    try:
        yield
    finally:
        tv_poolers.roi_align, tv_boxes.nms = saved


def _detection_inputs(args, gen: torch.Generator, masks: bool):
    h, w = args.size
    images = [torch.rand(3, h, w, generator=gen).to(args.device) for _ in range(args.batch)]
    targets = []
    for _ in range(args.batch):
        n = 8
        xy = torch.rand(n, 2, generator=gen) * torch.tensor([w * 0.7, h * 0.7])
        wh = torch.rand(n, 2, generator=gen) * torch.tensor([w * 0.3, h * 0.3]) + 16
        target = {
            "boxes": torch.cat([xy, xy + wh], 1).to(args.device),
            "labels": torch.randint(1, 91, (n,), generator=gen).to(args.device),
        }
        if masks:
            target["masks"] = (torch.rand(n, h, w, generator=gen) > 0.5).to(torch.uint8).to(args.device)
        targets.append(target)
    return images, targets


def _detection_cases(args, name: str):
    import torchvision

    torch.manual_seed(0)
    build = {
        "fasterrcnn": torchvision.models.detection.fasterrcnn_resnet50_fpn,
        "maskrcnn": torchvision.models.detection.maskrcnn_resnet50_fpn,
    }[name]
    h, w = args.size
    model = build(weights=None, weights_backbone=None, min_size=min(h, w), max_size=max(h, w)).to(args.device)
    images, targets = _detection_inputs(args, torch.Generator().manual_seed(0), masks=name == "maskrcnn")
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-4)
    scaler = torch.amp.GradScaler(args.device, enabled=args.amp)
    amp = torch.autocast(args.device, dtype=torch.float16) if args.amp else contextlib.nullcontext()

    def train_step(ours: bool):
        def step():
            model.train()
            with _swapped(ours):
                optimizer.zero_grad(set_to_none=True)
                with amp:
                    loss = sum(model(images, targets).values())
                scaler.scale(loss).backward()
            # No optimizer step: both sides keep the same weights, so they time the same computation.

        return step

    def predict(ours: bool):
        def step():
            model.eval()
            with _swapped(ours), torch.no_grad(), amp:
                model(images)

        return step

    yield f"{name} train step", train_step(True), train_step(False)
    yield f"{name} predict", predict(True), predict(False)


def _msda_cases(args):
    from torch import nn

    import visdet_ops.ops.multi_scale_deform_attn as msda_module
    from visdet_ops import MultiScaleDeformableAttention
    from visdet_ops.reference.multi_scale_deform_attn import multi_scale_deformable_attn_reference

    torch.manual_seed(0)
    dims, layers, bs = 256, 6, 2
    shapes = torch.tensor([[100, 150], [50, 75], [25, 38], [13, 19]], device=args.device)
    if args.device == "cpu":
        shapes = torch.div(shapes, 4, rounding_mode="floor")
    sizes = shapes.prod(1)
    start = torch.cat([sizes.new_zeros(1), sizes.cumsum(0)[:-1]])
    keys = int(sizes.sum())

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.attn = MultiScaleDeformableAttention(dims, num_levels=4, batch_first=True)
            self.norm1, self.norm2 = nn.LayerNorm(dims), nn.LayerNorm(dims)
            self.ffn = nn.Sequential(nn.Linear(dims, 1024), nn.ReLU(), nn.Linear(1024, dims))

        def forward(self, x, ref):
            # mmcv's module adds its identity (x) itself.
            x = self.norm1(self.attn(x, value=x, reference_points=ref, spatial_shapes=shapes,
                                     level_start_index=start))  # fmt: skip
            return self.norm2(x + self.ffn(x))

    stack = nn.ModuleList(Layer() for _ in range(layers)).to(args.device)
    x0 = torch.randn(bs, keys, dims, device=args.device)
    ref = torch.rand(bs, keys, 4, 2, device=args.device)
    ours_fn = msda_module.multi_scale_deformable_attn

    def pytorch_msda(value, value_spatial_shapes, value_level_start_index, sampling_locations, attention_weights,
                     im2col_step=64):  # fmt: skip
        return multi_scale_deformable_attn_reference(value, value_spatial_shapes, sampling_locations, attention_weights)

    def train_step(ours: bool):
        def step():
            msda_module.multi_scale_deformable_attn = ours_fn if ours else pytorch_msda
            try:
                stack.zero_grad(set_to_none=True)
                x = x0.detach().requires_grad_()
                for layer in stack:
                    x = layer(x, ref)
                x.square().mean().backward()
            finally:
                msda_module.multi_scale_deformable_attn = ours_fn

        return step

    yield (
        f"MSDA encoder stack train step ({layers} layers, bs {bs}, {keys} queries)",
        train_step(True),
        train_step(False),
    )


def _print_profile(who: str, step, top: int) -> None:
    """One step's device time in all and its `top` costliest kernels (bench.device_kernels): the split of a step
    that the ratio alone does not give."""
    kernels = device_kernels(step)
    total_us = sum(us for _, us, _ in kernels)
    print(f"|   {who}: device time {total_us / 1e3:.2f} ms in {sum(n for _, _, n in kernels)} kernels | | | |")
    for name, us, calls in kernels[:top]:
        print(f"|   {who}: {name[:100]} | {us / 1e3:.3f} ms | x{calls} | |")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--only", nargs="*", choices=["fasterrcnn", "maskrcnn", "msda"])
    parser.add_argument("--amp", action="store_true", help="torch.autocast(float16) and a GradScaler")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--size", type=int, nargs=2, default=None, help="image height width (default 800 1088)")
    parser.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: torch's default)")
    parser.add_argument("--json", help="write the rows here")
    parser.add_argument(
        "--profile", type=int, default=0, metavar="N",
        help="after timing, profile one step of each side (torch.profiler) and list its N costliest device kernels",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if args.profile and args.device != "cuda":
        parser.error(f"--profile lists device kernels: it needs --device cuda, got --device {args.device}")
    if args.size is None:
        args.size = [800, 1088]
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.backends.cudnn.benchmark = False
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)
    families = args.only or ["fasterrcnn", "maskrcnn", "msda"]
    import torchvision

    device_name = torch.cuda.get_device_name() if args.device == "cuda" else f"CPU, {torch.get_num_threads()} threads"
    print(f"# {device_name}; torch {torch.__version__}, torchvision {torchvision.__version__}, visdet_ops "
          f"{visdet_ops.__version__}; batch {args.batch} at {args.size[0]}x{args.size[1]}"
          f"{', AMP float16' if args.amp else ''}; median of {args.rounds} rounds x {args.steps} steps")  # fmt: skip
    print("| case | ours ms | theirs ms | theirs / ours |\n|---|---|---|---|")
    rows = []
    for family in families:
        cases = _msda_cases(args) if family == "msda" else _detection_cases(args, family)
        for name, ours, theirs in cases:
            ours(), theirs()  # warm-up (and lazy initialisation) of both sides
            ours_ms, theirs_ms = alternating_medians(
                ours, theirs, args.rounds, lambda fn: wall_time_per_call(fn, args.steps, sync) * 1e3
            )
            row = {"case": name, "ours_ms": ours_ms, "theirs_ms": theirs_ms}
            row["ratio"] = row["theirs_ms"] / row["ours_ms"]
            rows.append(row)
            print(f"| {name} | {row['ours_ms']:.1f} | {row['theirs_ms']:.1f} | {row['ratio']:.3f}x |", flush=True)
            if args.profile:
                for who, fn in (("ours", ours), ("theirs", theirs)):
                    _print_profile(who, fn, args.profile)
    write_json(args.json, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
