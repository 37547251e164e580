"""Benchmarks of visdet_ops.ops.focal_loss against its peers, each tagged for the reports that select it (default:
benchmarks/bench.py's GPU table; any other tag: the script benchmarks/<tag>.py). Not shipped in the wheel."""

from __future__ import annotations

import torch

from visdet_ops.ops.focal_loss import sigmoid_focal_loss, softmax_focal_loss

from . import Case, benchmark


@benchmark("sigmoid_focal_loss", "softmax_focal_loss")
def _benchmark(bench) -> None:
    """RetinaNet-sized: 100k anchors x 80 classes, forward + backward (torch.autograd.grad), against the
    pure-PyTorch losses (same values first): time, peak memory and the fused pair's compulsory traffic."""
    from visdet_ops.reference.focal_loss import py_sigmoid_focal_loss, py_softmax_focal_loss

    gen, n, c = bench.gen, 100000, 80

    def case(kind: str, dtype: torch.dtype, reduction: str) -> None:
        x = (torch.randn(n, c, generator=gen) * 3).cuda().to(dtype).requires_grad_()
        if kind == "sigmoid":
            target = torch.randint(0, c + 1, (n,), generator=gen).cuda()  # c = background
            ours_fn, peer_fn = sigmoid_focal_loss, py_sigmoid_focal_loss
            peer_name = "pure PyTorch (mmdet py_sigmoid_focal_loss, F.one_hot)"
        else:
            target = torch.randint(0, c, (n,), generator=gen).cuda()
            ours_fn, peer_fn = softmax_focal_loss, py_softmax_focal_loss
            peer_name = "pure PyTorch (log_softmax, F.one_hot)"

        # 'none' is summed afterwards, as a detector reduces it: the backward then gets an
        # expanded grad_output, which the fused kernel reads in place.
        def ours():
            loss = ours_fn(x, target, 2.0, 0.25, None, reduction)
            return torch.autograd.grad(loss if reduction != "none" else loss.sum(), x)[0]

        def peer():
            loss = peer_fn(x, target, 2.0, 0.25, reduction)
            return torch.autograd.grad(loss if reduction != "none" else loss.sum(), x)[0]

        # Checked against the peer in float32 (for bfloat16: ours rounds once, the peer at every op).
        x32 = x.detach().float().requires_grad_()
        want = peer_fn(x32, target, 2.0, 0.25, reduction)
        (want_grad,) = torch.autograd.grad(want if reduction != "none" else want.sum(), x32)
        rtol = 1e-2 if dtype == torch.bfloat16 else 1e-4
        got = ours_fn(x, target, 2.0, 0.25, None, reduction).float()
        torch.testing.assert_close(got, want.detach(), rtol=rtol, atol=rtol * want.abs().max().item())
        got_grad = ours().float()
        torch.testing.assert_close(got_grad, want_grad, rtol=rtol, atol=rtol * want_grad.abs().max().item())
        del x32, want, want_grad, got, got_grad
        row = {
            "op": f"{kind}_focal_loss fwd+bwd",
            "case": f"{n} x {c}, {str(dtype).removeprefix('torch.')}, reduction={reduction}",
            "ours": bench.cuda_time_ms(ours),
            "peer": bench.cuda_time_ms(peer),
            "peer_name": peer_name,
            "ours_peak_mib": bench.peak_memory_bytes(ours) / 2**20,
            "peer_peak_mib": bench.peak_memory_bytes(peer) / 2**20,
        }
        with torch.no_grad():
            row["ours_forward_ms"] = bench.cuda_time_ms(lambda: ours_fn(x, target, 2.0, 0.25, None, reduction))[
                "median_ms"
            ]
            row["peer_forward_ms"] = bench.cuda_time_ms(lambda: peer_fn(x, target, 2.0, 0.25, reduction))["median_ms"]
        # Traffic of the pair. Reduced float32 loss (the fused training forward): the forward reads input and
        # target and writes the gradient, the backward (grad_output 1) touches nothing. Else the forward reads
        # input and target (and writes the [N, C] loss for 'none'), the backward reads them again and writes
        # grad_input.
        logits = n * c * x.element_size()
        if reduction != "none" and dtype == torch.float32:
            moved = 2 * logits + n * 8
        else:
            moved = 3 * logits + 2 * n * 8 + (logits if reduction == "none" else 0)
        row["fused_gbs"] = moved / (row["ours"]["median_ms"] * 1e-3) / 1e9
        row["fused_fraction_of_copy"] = row["fused_gbs"] / bench.copy_gbs
        bench.results.append(row)

    for kind, dtype, reduction in (
        ("sigmoid", torch.float32, "mean"),
        ("sigmoid", torch.float32, "none"),
        ("sigmoid", torch.bfloat16, "mean"),
        ("softmax", torch.float32, "mean"),
        ("softmax", torch.float32, "none"),
        ("softmax", torch.bfloat16, "mean"),
    ):
        case(kind, dtype, reduction)


def _softmax_focal_peer(input, target, gamma=2.0, alpha=0.25):
    logp = torch.log_softmax(input, 1).gather(1, target[:, None]).squeeze(1)
    p = logp.exp()
    return (-alpha * (1 - p) ** gamma * logp).sum() / input.size(0)


@benchmark("sigmoid_focal_loss", "softmax_focal_loss", tags=("gpu_targets",), alias="focal")
def _gpu_targets(gen, tv):
    """Issue 24's rows: both losses' fwd+bwd, mean, 100k and 400k anchors x 80 classes, one by one and back to
    back. Peers: torchvision's sigmoid_focal_loss (one-hot targets), a pure-PyTorch softmax focal loss. Issue 24's
    target is a fraction of the copy bandwidth: one read of the logits and targets, one write of the gradient."""
    from ._helpers import fresh_fwd_bwd

    for n in (100_000, 400_000):
        logits = torch.randn(n, 80, generator=gen).cuda()
        labels = torch.randint(0, 81, (n,), generator=gen).cuda()
        onehot = torch.nn.functional.one_hot(labels, 81)[:, :80].float()
        classes = labels.clamp(max=79)
        compulsory = 2 * logits.nbytes + labels.nbytes
        for back_to_back in (False, True):
            tag = ", back to back" if back_to_back else ""
            yield Case(
                f"sigmoid_focal_loss fwd+bwd {n} x 80, mean{tag}",
                fresh_fwd_bwd(lambda x, t=labels: sigmoid_focal_loss(x, t, 2.0, 0.25, None, "mean"), (logits,)),
                fresh_fwd_bwd(lambda x, t=onehot: tv.sigmoid_focal_loss(x, t, 0.25, 2.0, "sum") / x.size(0), (logits,)),
                back_to_back,
                compulsory,
            )
            yield Case(
                f"softmax_focal_loss fwd+bwd {n} x 80, mean{tag}",
                fresh_fwd_bwd(lambda x, t=classes: softmax_focal_loss(x, t, 2.0, 0.25, None, "mean"), (logits,)),
                fresh_fwd_bwd(lambda x, t=classes: _softmax_focal_peer(x, t), (logits,)),
                back_to_back,
                compulsory,
            )


@benchmark("sigmoid_focal_loss", tags=("host_instructions",))
def _host_instructions():
    """fwd+bwd of 64 x 8 logits."""
    setup = "logits = torch.randn(64, 8, generator=g)\nlabels = torch.randint(0, 8, (64,), generator=g)"
    yield Case(
        "sigmoid_focal_loss fwd+bwd", "fwd_bwd(lambda t: visdet_ops.sigmoid_focal_loss(t, labels), logits)", setup=setup
    )
