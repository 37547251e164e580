"""CPU timings of the ops torchvision also has, against torchvision's CPU kernels, in one process (issue 24).

  python benchmarks/cpu.py [--threads 1] [--rounds 11] [--only roi_align nms ...] [--out FILE.json]

Each case times ours and torchvision's alternately, `--rounds` rounds of one call each after a warm-up, and
reports the median of each and ratio = torchvision / ours (>= 1: ours is as fast or faster). Forward + backward
cases give fresh leaf gradients every call, as a training step after zero_grad(set_to_none=True) does. Shapes are
the issue's: a detector's RoI head at stride 8 and its NMS stages. `--threads 0` keeps torch's default (all
cores). Needs torchvision with its C++ ops.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path

import torch
from bench import alternating_medians  # benchmarks/bench.py: the harness's timing

import visdet_ops

CASES: dict[str, Callable] = {}


def case(family: str):
    def register(fn):
        CASES.setdefault(family, []).append(fn)
        return fn

    return register


def _rois(gen: torch.Generator, k: int, batch: int, height: float, width: float, scale: float) -> torch.Tensor:
    """k RoIs in image coordinates (feature map size / scale), random corners, at least 2 pixels wide."""
    x1 = torch.rand(k, generator=gen) * (width / scale) * 0.8
    y1 = torch.rand(k, generator=gen) * (height / scale) * 0.8
    w = 2 + torch.rand(k, generator=gen) * (width / scale) * 0.3
    h = 2 + torch.rand(k, generator=gen) * (height / scale) * 0.3
    b = torch.randint(0, batch, (k,), generator=gen).float()
    return torch.stack([b, x1, y1, x1 + w, y1 + h], 1)


def _boxes(gen: torch.Generator, n: int, size: float = 800.0) -> tuple[torch.Tensor, torch.Tensor]:
    xy = torch.rand(n, 2, generator=gen) * size
    wh = 8 + torch.rand(n, 2, generator=gen) * size * 0.15
    return torch.cat([xy, xy + wh], 1), torch.rand(n, generator=gen)


def _fwd_bwd(fn, x: torch.Tensor, *args):
    leaf = x.detach().requires_grad_()  # a fresh leaf: its .grad is written, not accumulated into
    out = fn(leaf, *args)
    out = out[0] if isinstance(out, tuple) else out
    out.backward(torch.ones_like(out))
    return leaf.grad


@case("roi_align")
def roi_align_cases(gen, tv):
    x = torch.randn(2, 256, 100, 152, generator=gen)
    rois = _rois(gen, 512, 2, 100, 152, 1 / 8)
    for mode in ("avg", "max"):
        ours = lambda t, m=mode: visdet_ops.roi_align(t, rois, 7, 1 / 8, 2, m, True)  # noqa: E731
        peer = (lambda t: tv.roi_align(t, rois, 7, 1 / 8, 2, True)) if mode == "avg" else None
        yield f"forward {mode}, 2x256x100x152, K=512, 7x7, sr 2", lambda o=ours: o(x), peer and (lambda: peer(x))
        yield (
            f"fwd+bwd {mode}, the same",
            lambda o=ours: _fwd_bwd(o, x),
            peer and (lambda: _fwd_bwd(peer, x)),
        )


@case("roi_pool")
def roi_pool_cases(gen, tv):
    x = torch.randn(2, 256, 100, 152, generator=gen)
    rois = _rois(gen, 512, 2, 100, 152, 1 / 8)
    ours = lambda t: visdet_ops.roi_pool(t, rois, 7, 1 / 8)  # noqa: E731
    peer = lambda t: tv.roi_pool(t, rois, 7, 1 / 8)  # noqa: E731
    yield "forward, 2x256x100x152, K=512, 7x7", lambda: ours(x), lambda: peer(x)
    yield "fwd+bwd, the same", lambda: _fwd_bwd(ours, x), lambda: _fwd_bwd(peer, x)


@case("nms")
def nms_cases(gen, tv):
    for n in (1000, 5000):
        boxes, scores = _boxes(gen, n)
        yield (
            f"nms {n} boxes, iou 0.5",
            lambda b=boxes, s=scores: visdet_ops.nms(b, s, 0.5),
            (lambda b=boxes, s=scores: tv.nms(b, s, 0.5)),
        )
    for n, classes in ((20000, 80), (80000, 80)):
        boxes, scores = _boxes(gen, n)
        idxs = torch.randint(0, classes, (n,), generator=gen)
        cfg = {"type": "nms", "iou_threshold": 0.5}
        yield (
            f"batched_nms {n} boxes in {classes} classes",
            (lambda b=boxes, s=scores, i=idxs: visdet_ops.batched_nms(b, s, i, dict(cfg))),
            lambda b=boxes, s=scores, i=idxs: tv.batched_nms(b, s, i, 0.5),
        )


@case("deform_conv")
def deform_conv_cases(gen, tv):
    x = torch.randn(2, 64, 32, 32, generator=gen)
    weight = torch.randn(64, 64, 3, 3, generator=gen) * 0.05
    offset = torch.randn(2, 18, 32, 32, generator=gen)
    mask = torch.rand(2, 9, 32, 32, generator=gen)
    yield (
        "DCNv2 forward, 2x64x32x32, 3x3",
        (lambda: visdet_ops.modulated_deform_conv2d(x, offset, mask, weight, None, 1, 1, 1, 1, 1)),
        lambda: tv.deform_conv2d(x, offset, weight, None, padding=(1, 1), mask=mask),
    )


def _time(fn) -> float:
    started = time.perf_counter()
    fn()
    return (time.perf_counter() - started) * 1e3


def run(families: list[str], rounds: int) -> list[dict]:
    from torchvision import ops as tv

    results = []
    for family in families:
        for make in CASES[family]:
            for name, ours, peer in make(torch.Generator().manual_seed(0), tv):
                for fn in (ours, peer):
                    if fn:
                        fn()  # warm-up
                ours_ms, peer_ms = alternating_medians(ours, peer or None, rounds, _time)
                row = {"op": family, "case": name, "ours_ms": ours_ms}
                if peer:
                    row["torchvision_ms"] = peer_ms
                    row["ratio"] = row["torchvision_ms"] / row["ours_ms"]
                results.append(row)
                ratio = f"{row['ratio']:.2f}x" if peer else "-"
                tv_ms = f"{row['torchvision_ms']:.2f}" if peer else "-"
                print(f"| {family} | {name} | {row['ours_ms']:.2f} | {tv_ms} | {ratio} |", flush=True)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (0: torch's default)")
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument("--only", nargs="*", choices=sorted(CASES))
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), median of {args.rounds} alternating rounds")
    print("| op | case | ours ms | torchvision ms | torchvision / ours |\n|---|---|---:|---:|---:|")
    results = run(args.only or sorted(CASES), args.rounds)
    if args.out:
        args.out.write_text(json.dumps({"threads": torch.get_num_threads(), "results": results}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
