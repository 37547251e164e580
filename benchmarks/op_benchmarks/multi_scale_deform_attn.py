"""Benchmarks of visdet_ops.ops.multi_scale_deform_attn against its peers, each tagged for the reports that select it
(default: benchmarks/bench.py's GPU table; any other tag: the script benchmarks/<tag>.py). Not shipped in the wheel."""

from __future__ import annotations

import torch

from visdet_ops.ops.multi_scale_deform_attn import multi_scale_deformable_attn

from . import Case, benchmark


@benchmark("multi_scale_deformable_attn")
def _benchmark(bench) -> None:
    """Deformable DETR at 800x1200: 4 levels (strides 8..64), 8 heads, head_dim 32, 4 points; the encoder
    (queries = keys, batch 2) and decoders of 300 and 900 queries (batch 8); level tables on the GPU, as the model
    keeps them. Peer: mmcv's multi_scale_deformable_attn_pytorch (F.grid_sample), ported verbatim in
    visdet_ops.reference (one .tolist() of the level shapes instead of mmcv's per-level reads), same values
    first."""
    from visdet_ops.reference.multi_scale_deform_attn import multi_scale_deformable_attn_reference

    gen = bench.gen
    shapes = torch.tensor([[100, 150], [50, 75], [25, 38], [13, 19]])
    sizes = shapes.prod(1)
    start = torch.cat([sizes.new_zeros(1), sizes.cumsum(0)[:-1]]).cuda()
    keys = int(sizes.sum())
    heads, dim, levels, points = 8, 32, 4, 4
    shapes_cuda = shapes.cuda()

    def case(name: str, bs: int, queries: int) -> None:
        value = torch.randn(bs, keys, heads, dim, generator=gen).cuda().requires_grad_()
        loc = torch.rand(bs, queries, heads, levels, points, 2, generator=gen).cuda().requires_grad_()
        attn = torch.rand(bs, queries, heads, levels, points, generator=gen).cuda().softmax(-1).requires_grad_()
        grad = torch.randn(bs, queries, heads * dim, generator=gen).cuda()
        got = multi_scale_deformable_attn(value, shapes_cuda, start, loc, attn)
        want = multi_scale_deformable_attn_reference(value, shapes_cuda, loc, attn)
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)

        def ours():
            out = torch.ops.visdet_ops.multi_scale_deformable_attn(value, shapes_cuda, start, loc, attn, 64)
            torch.autograd.grad(out, (value, loc, attn), grad)

        def peer():
            out = multi_scale_deformable_attn_reference(value, shapes_cuda, loc, attn)
            torch.autograd.grad(out, (value, loc, attn), grad)

        row = {
            "op": "multi_scale_deformable_attn fwd+bwd",
            "case": f"{name}: bs {bs}, {queries} queries, {keys} keys, 8 heads x 32, 4 levels x 4 points, float32",
        }
        row["ours"] = bench.cuda_time_ms(ours)
        with torch.no_grad():
            row["ours_forward_ms"] = bench.cuda_time_ms(
                lambda: torch.ops.visdet_ops.multi_scale_deformable_attn(value, shapes_cuda, start, loc, attn, 64)
            )["median_ms"]
        row["peer"] = bench.cuda_time_ms(peer)
        row["peer_name"] = "mmcv multi_scale_deformable_attn_pytorch (grid_sample)"
        bench.results.append(row)

    for name, bs, queries in (("encoder", 2, keys), ("decoder", 8, 300), ("decoder", 8, 900)):
        case(name, bs, queries)


@benchmark("multi_scale_deformable_attn", tags=("gpu_targets",), alias="msda")
def _gpu_targets(gen, tv):
    """Issue 24's rows: fwd+bwd of a Deformable DETR encoder (bs 2, every key a query) and decoder (bs 8, 300
    queries) over 4 levels; peer visdet_ops.reference's grid_sample formulation (mmcv's
    multi_scale_deformable_attn_pytorch)."""
    from visdet_ops.reference.multi_scale_deform_attn import multi_scale_deformable_attn_reference

    from ._helpers import fresh_fwd_bwd

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
        tensors = (value, loc, attn)
        yield Case(
            f"MSDA fwd+bwd {name}: bs {bs}, {queries} queries, {keys} keys",
            fresh_fwd_bwd(lambda v, loc, a: multi_scale_deformable_attn(v, shapes, start, loc, a, 64), tensors, grad),
            fresh_fwd_bwd(lambda v, loc, a: multi_scale_deformable_attn_reference(v, shapes, loc, a), tensors, grad),
        )


@benchmark("multi_scale_deformable_attn", tags=("host_instructions",))
def _host_instructions():
    """fwd+bwd: 2 levels (4x4, 2x2), 2 heads, 6 queries."""
    setup = (
        "value = torch.randn(1, 20, 2, 4, generator=g)\nshapes = torch.tensor([[4, 4], [2, 2]])\n"
        "starts = torch.tensor([0, 16])\nlocs = torch.rand(1, 6, 2, 2, 2, 2, generator=g)\n"
        "attn = torch.rand(1, 6, 2, 2, 2, generator=g)"
    )
    call = "visdet_ops.multi_scale_deformable_attn(v, shapes, starts, l, a, 64)"
    yield Case("MSDA fwd+bwd", f"fwd_bwd(lambda v, l, a: {call}, value, locs, attn)", setup=setup)
