"""Issue 24's GPU table: each op's training call (forward + backward, fresh leaf gradients) against its peer, in one
process, at the issue's shapes.

  python benchmarks/gpu_targets.py [--only roi_align focal ...] [--rounds 7] [--calls 20] [--json OUT] [--profile]

Every call makes fresh leaf gradients, as a training step after zero_grad(set_to_none=True) does. Rounds alternate
ours and the peer; each round times `--calls` calls one by one between CUDA events after a warm-up, and takes
their median; the table gives the median over rounds and ratio = peer / ours (> 1: ours is faster). Back-to-back
rows time `--calls` calls between one pair of events instead (host and GPU overlap, as in a training loop): the
per-call cost that a host-bound op shows. --profile adds, per case, the GPU kernels of one call of ours and of the
peer (torch.profiler), by name.

Peers: torchvision's roi_align / roi_pool / sigmoid_focal_loss / deform_conv2d; a pure-PyTorch softmax focal
loss; visdet_ops.reference's grid_sample formulation of MSDA (mmcv's multi_scale_deformable_attn_pytorch).
cudnn.benchmark stays off. Needs a CUDA GPU and torchvision.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterator

import torch
from bench import alternating_medians, cuda_time_ms, device_kernels  # benchmarks/bench.py: the harness's timing

import visdet_ops

Case = tuple[str, str, Callable[[], None], Callable[[], None] | None, bool]  # family, name, ours, peer, back-to-back


def _rois(k: int, batch: int, height: int, width: int, stride: int, gen: torch.Generator) -> torch.Tensor:
    """k RoIs in image coordinates of a level of `stride`: sides of 1 to 28 feature pixels (the sizes the FPN
    assignment sends to a level), corners anywhere the box fits."""
    wh = (torch.rand(k, 2, generator=gen) * 27 + 1) * stride
    room = torch.tensor([width * stride, height * stride]) - wh
    xy = torch.rand(k, 2, generator=gen) * room.clamp(min=0)
    idx = torch.randint(0, batch, (k, 1), generator=gen).float()
    return torch.cat([idx, xy, xy + wh], 1).cuda()


def _leaves(*tensors: torch.Tensor) -> list[torch.Tensor]:
    """Fresh leaves for one call: no .grad to accumulate into (zero_grad(set_to_none=True))."""
    return [t.detach().requires_grad_() for t in tensors]


def _fwd_bwd(fn, tensors: tuple[torch.Tensor, ...], grad: torch.Tensor | None = None) -> Callable[[], None]:
    """One training call: fn on fresh leaves of `tensors`, then backward (grad None: a scalar loss)."""

    def run():
        fn(*_leaves(*tensors)).backward(grad)

    return run


def _roi_cases(gen: torch.Generator, tv) -> Iterator[Case]:
    for c, h, w, stride, k in ((256, 200, 304, 4, 1000), (256, 50, 76, 16, 512)):
        feats = torch.randn(2, c, h, w, generator=gen).cuda()
        rois = _rois(k, 2, h, w, stride, gen)
        grad = torch.randn(k, c, 7, 7, generator=gen).cuda()
        scale = 1.0 / stride
        shape = f"{c}x{h}x{w}, K={k}, 7x7"
        for amp in (False, True):
            x0 = feats.half() if amp else feats
            g0 = grad.half() if amp else grad

            def step(fn, x0=x0, g0=g0, amp=amp):
                def run():
                    (x,) = _leaves(x0)
                    with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
                        out = fn(x)
                    out.backward(g0.to(out.dtype))

                return run

            tag = ", AMP f16" if amp else ""
            yield (
                "roi_align",
                f"roi_align fwd+bwd {shape}, sr 2{tag}",
                step(lambda x, s=scale, r=rois: visdet_ops.roi_align(x, r, 7, s, 2, "avg", True)),
                step(lambda x, s=scale, r=rois: tv.roi_align(x, r, 7, s, 2, True)),
                False,
            )
        yield (
            "roi_align",
            f"roi_align forward {shape}, sr 2",
            lambda s=scale, f=feats, r=rois: visdet_ops.roi_align(f, r, 7, s, 2, "avg", True),
            lambda s=scale, f=feats, r=rois: tv.roi_align(f, r, 7, s, 2, True),
            False,
        )

        yield (
            "roi_pool",
            f"roi_pool fwd+bwd {shape}",
            _fwd_bwd(lambda x, s=scale, r=rois: visdet_ops.roi_pool(x, r, 7, s), (feats,), grad),
            _fwd_bwd(lambda x, s=scale, r=rois: tv.roi_pool(x, r, 7, s), (feats,), grad),
            False,
        )


def _softmax_focal_peer(input, target, gamma=2.0, alpha=0.25):
    logp = torch.log_softmax(input, 1).gather(1, target[:, None]).squeeze(1)
    p = logp.exp()
    return (-alpha * (1 - p) ** gamma * logp).sum() / input.size(0)


# case name -> the bytes a call must move at least (issue 24's focal-loss target: a fraction of the measured copy
# bandwidth on these): one read of the logits and targets, one write of the gradient.
COMPULSORY_BYTES: dict[str, int] = {}


def _focal_cases(gen: torch.Generator, tv) -> Iterator[Case]:
    for n in (100_000, 400_000):
        logits = torch.randn(n, 80, generator=gen).cuda()
        labels = torch.randint(0, 81, (n,), generator=gen).cuda()
        onehot = torch.nn.functional.one_hot(labels, 81)[:, :80].float()
        classes = labels.clamp(max=79)

        def step(fn, x0=logits):
            return _fwd_bwd(fn, (x0,))

        for back_to_back in (False, True):
            tag = ", back to back" if back_to_back else ""
            for kind in ("sigmoid", "softmax"):
                COMPULSORY_BYTES[f"{kind}_focal_loss fwd+bwd {n} x 80, mean{tag}"] = 2 * logits.nbytes + labels.nbytes
            yield (
                "focal",
                f"sigmoid_focal_loss fwd+bwd {n} x 80, mean{tag}",
                step(lambda x, t=labels: visdet_ops.sigmoid_focal_loss(x, t, 2.0, 0.25, None, "mean")),
                step(lambda x, t=onehot: tv.sigmoid_focal_loss(x, t, 0.25, 2.0, "sum") / x.size(0)),
                back_to_back,
            )
            yield (
                "focal",
                f"softmax_focal_loss fwd+bwd {n} x 80, mean{tag}",
                step(lambda x, t=classes: visdet_ops.softmax_focal_loss(x, t, 2.0, 0.25, None, "mean")),
                step(lambda x, t=classes: _softmax_focal_peer(x, t)),
                back_to_back,
            )


def _dcn_cases(gen: torch.Generator, tv) -> Iterator[Case]:
    from op_benchmarks.deform_conv import dcn_bench_case

    for batch, c, size in ((1, 128, 64), (1, 256, 32), (1, 512, 16), (2, 256, 100)):
        x, offset, mask, weight, bias, grad = dcn_bench_case(c, size, gen, batch)

        def step(fn, tensors=(x, offset, mask, weight, bias), grad=grad):
            return _fwd_bwd(fn, tensors, grad)

        yield (
            "dcn",
            f"DCNv2 fwd+bwd batch {batch}, {c}ch {size}x{size}, 3x3",
            step(lambda x, o, m, w, b: visdet_ops.modulated_deform_conv2d(x, o, m, w, b, 1, 1, 1, 1, 1)),
            step(lambda x, o, m, w, b: tv.deform_conv2d(x, o, w, b, 1, 1, 1, m)),
            False,
        )


def _msda_cases(gen: torch.Generator, tv) -> Iterator[Case]:
    from visdet_ops.reference.multi_scale_deform_attn import multi_scale_deformable_attn_reference

    shapes = torch.tensor([[100, 150], [50, 75], [25, 38], [13, 19]])
    sizes = shapes.prod(1)
    start = torch.cat([sizes.new_zeros(1), sizes.cumsum(0)[:-1]]).cuda()
    keys, shapes = int(sizes.sum()), shapes.cuda()
    heads, dim, levels, points = 8, 32, 4, 4
    for name, bs, queries in (("encoder", 2, keys), ("decoder", 8, 300)):
        value = torch.randn(bs, keys, heads, dim, generator=gen).cuda()
        loc = torch.rand(bs, queries, heads, levels, points, 2, generator=gen).cuda()
        attn = torch.rand(bs, queries, heads, levels, points, generator=gen).cuda().softmax(-1)
        grad = torch.randn(bs, queries, heads * dim, generator=gen).cuda()

        def step(fn, tensors=(value, loc, attn), grad=grad):
            return _fwd_bwd(fn, tensors, grad)

        yield (
            "msda",
            f"MSDA fwd+bwd {name}: bs {bs}, {queries} queries, {keys} keys",
            step(lambda v, loc, a: visdet_ops.multi_scale_deformable_attn(v, shapes, start, loc, a, 64)),
            step(lambda v, loc, a: multi_scale_deformable_attn_reference(v, shapes, loc, a)),
            False,
        )


FAMILIES = {"roi_align": _roi_cases, "roi_pool": _roi_cases, "focal": _focal_cases, "dcn": _dcn_cases,
            "msda": _msda_cases}  # fmt: skip


def _time_ms(fn: Callable[[], None], calls: int, back_to_back: bool) -> float:
    if back_to_back:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) / calls
    return cuda_time_ms(fn, warmup=0, repeat=calls)["median_ms"]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="*", choices=sorted(FAMILIES), help="families to run (default: all)")
    parser.add_argument("--match", default="", help="only the cases whose name contains this")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--json", help="write the rows here")
    parser.add_argument("--profile", action="store_true", help="list each case's kernels (one call, torch.profiler)")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("gpu_targets.py needs a CUDA GPU", file=sys.stderr)
        return 2
    import torchvision

    torch.backends.cudnn.benchmark = False
    families = args.only or sorted(set(FAMILIES))
    builders = dict.fromkeys(FAMILIES[f] for f in families)
    rows = []
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, torchvision {torchvision.__version__}, "
          f"visdet_ops {visdet_ops.__version__}; {args.rounds} rounds x {args.calls} calls")  # fmt: skip
    copy_gbs = None
    if "focal" in families:
        from bench import copy_bandwidth_gbs

        copy_gbs = copy_bandwidth_gbs()
        print(f"# device-to-device copy: {copy_gbs:.0f} GB/s (read + write); focal rows: compulsory bytes / time")
    print("| case | ours ms | peer ms | peer / ours |\n|---|---|---|---|")
    for build in builders:
        for family, name, ours, peer, back_to_back in build(torch.Generator().manual_seed(0), torchvision.ops):
            if family not in families or args.match not in name:
                continue
            for fn in (ours, peer):
                for _ in range(3):
                    fn()
            ours_ms, peer_ms = alternating_medians(
                ours, peer, args.rounds, lambda fn, b2b=back_to_back: _time_ms(fn, args.calls, b2b)
            )
            row = {"case": name, "ours_ms": ours_ms, "peer_ms": peer_ms}
            row["ratio"] = row["peer_ms"] / row["ours_ms"]
            rows.append(row)
            print(f"| {name} | {row['ours_ms']:.4f} | {row['peer_ms']:.4f} | {row['ratio']:.2f}x |", flush=True)
            if name in COMPULSORY_BYTES and copy_gbs:
                row["compulsory_gbs"] = COMPULSORY_BYTES[name] / (row["ours_ms"] * 1e-3) / 1e9
                row["fraction_of_copy"] = row["compulsory_gbs"] / copy_gbs
                print(f"|   compulsory traffic: {row['compulsory_gbs']:.0f} GB/s, "
                      f"{100 * row['fraction_of_copy']:.0f}% of copy | | | |")  # fmt: skip
            if args.profile and not back_to_back:
                for who, fn in (("ours", ours), ("peer", peer)):
                    for kname, us, _ in device_kernels(fn)[:8]:
                        print(f"|   {who}: {kname[:90]} | {us:.1f} us | | |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
