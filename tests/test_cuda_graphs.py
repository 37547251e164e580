"""CUDA graphs (issue 25 item 4): every op whose output sizes do not depend on tensor values is captured in a CUDA
graph and replays what eager computes, forward and backward ops alike; the ops whose host reads device data (the
NMS family, rotated NMS included: how many boxes survive; masked_conv2d: where the mask is set) refuse capture with
an error that names the op and the reason; a detector head (DCNv2 -> roi_align -> focal loss) trains under
torch.compile(mode="reduce-overhead"), whose CUDA graphs hold our kernels.

The calls are the ones each op module's example case makes (tests/memory_worker.py's capture, float32): a new op
is captured without anyone adding it here. GPU only."""

from __future__ import annotations

import pytest
import torch
from torch.utils._pytree import tree_flatten

import visdet_ops

from .conftest import require_cuda

# Ops whose host reads device data: they raise (through the public functions) instead of being captured.
DATA_DEPENDENT = {
    "visdet_ops::nms",
    "visdet_ops::batched_nms",
    "visdet_ops::soft_nms",
    "visdet_ops::nms_match",
    "visdet_ops::nms_rotated",
    "visdet_ops::masked_conv2d",
    "visdet_ops::_masked_conv2d_backward",
}


def _tensors(out) -> list[torch.Tensor]:
    return [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]


def test_every_op_replays_in_a_cuda_graph():
    require_cuda()
    from .memory_worker import capture

    calls = capture(torch.device("cuda"))
    assert DATA_DEPENDENT <= set(calls), "an op listed as data-dependent is no longer registered or called"
    failures = []
    for qualname, (func, args, kwargs) in sorted(calls.items()):
        if qualname in DATA_DEPENDENT:
            continue
        try:
            eager = _tensors(func(*args, **kwargs))
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):  # warm-up off the capture stream (lazy inits, allocator)
                for _ in range(2):
                    func(*args, **kwargs)
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                out = func(*args, **kwargs)
            for t in _tensors(out):
                t.fill_(float("nan")) if t.is_floating_point() else t.fill_(-7)  # a replay must rewrite them
            graph.replay()
            torch.cuda.synchronize()
            got = _tensors(out)
            assert len(got) == len(eager), f"{len(got)} outputs, eager {len(eager)}"
            for i, (g, e) in enumerate(zip(got, eager, strict=True)):
                assert g.shape == e.shape and g.dtype == e.dtype, f"output {i}: {g.shape} {g.dtype} vs {e.shape}"
                if e.is_floating_point():
                    # Ops that accumulate with atomics differ from eager in the last bits only.
                    scale = max(e.abs().max().item(), 1.0) if e.numel() else 1.0
                    torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-6 * scale, equal_nan=True)
                else:
                    assert torch.equal(g, e), f"output {i} differs"
        except Exception as exc:  # collected: every failing op is named at once
            failures.append(f"{qualname}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
    assert not failures, "\n".join(failures)


def _data_dependent_calls():
    gen = torch.Generator().manual_seed(0)
    boxes = torch.rand(20, 4, generator=gen) * 50
    boxes[:, 2:] += boxes[:, :2] + 1
    boxes, scores = boxes.cuda(), torch.rand(20, generator=gen).cuda()
    idxs = torch.randint(0, 3, (20,), generator=gen).cuda()
    dets = torch.cat([boxes, scores[:, None]], 1)
    features = torch.randn(1, 3, 8, 8, generator=gen).cuda()
    mask = (torch.rand(1, 8, 8, generator=gen) > 0.5).cuda()
    weight = torch.randn(4, 3, 3, 3, generator=gen).cuda()
    rotated = torch.cat([(boxes[:, :2] + boxes[:, 2:]) / 2, boxes[:, 2:] - boxes[:, :2], scores[:, None]], 1)
    return [
        ("nms", lambda: visdet_ops.nms(boxes, scores, 0.5)),
        ("batched_nms", lambda: visdet_ops.batched_nms(boxes, scores, idxs, dict(iou_threshold=0.5))),
        ("soft_nms", lambda: visdet_ops.soft_nms(boxes, scores)),
        ("nms_match", lambda: visdet_ops.nms_match(dets, 0.5)),
        ("masked_conv2d", lambda: visdet_ops.masked_conv2d(features, mask, weight, None, 1)),
        ("nms_rotated", lambda: visdet_ops.nms_rotated(rotated, scores, 0.5)),
        ("batched_nms_rotated", lambda: visdet_ops.batched_nms_rotated(rotated, scores, idxs, 0.5)),
    ]


@pytest.mark.parametrize(
    "index",
    range(7),
    ids=["nms", "batched_nms", "soft_nms", "nms_match", "masked_conv2d", "nms_rotated", "batched_nms_rotated"],
)
def test_data_dependent_ops_refuse_capture_clearly(index):
    require_cuda()
    name, call = _data_dependent_calls()[index]
    call()  # eager works
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with pytest.raises(RuntimeError, match=rf"{name} cannot be captured in a CUDA graph: "):
        with torch.cuda.graph(graph):
            call()
    call()  # and still works after the refused capture
    torch.cuda.synchronize()


def test_detector_head_trains_under_reduce_overhead():
    """ModulatedDeformConv2dPack -> roi_align -> a linear classifier -> sigmoid focal loss, compiled with
    mode='reduce-overhead' (CUDA graphs), three steps against eager from the same weights."""
    require_cuda()
    from torch import nn

    class Head(nn.Module):
        def __init__(self):
            super().__init__()
            self.dcn = visdet_ops.ModulatedDeformConv2dPack(8, 8, 3, padding=1)
            self.roi = visdet_ops.RoIAlign(4, 0.25, 2)
            self.cls = nn.Linear(8 * 4 * 4, 5)

        def forward(self, x, rois, labels):
            feats = self.roi(torch.relu(self.dcn(x)), rois)
            return visdet_ops.sigmoid_focal_loss(self.cls(feats.flatten(1)), labels, 2.0, 0.25, None, "mean")

    gen = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    eager = Head().cuda()
    compiled_module = Head().cuda()
    compiled_module.load_state_dict(eager.state_dict())
    compiled = torch.compile(compiled_module, mode="reduce-overhead")
    x = torch.randn(2, 8, 32, 32, generator=gen).cuda()
    rois = torch.tensor([[0, 4.0, 4, 60, 60], [1, 10, 20, 100, 90], [0, 0, 0, 127, 127]]).cuda()
    labels = torch.tensor([0, 5, 3]).cuda()
    for step in range(3):
        want = eager(x, rois, labels)
        want.backward()
        got = compiled(x, rois, labels)
        got.backward()
        torch.testing.assert_close(got.detach(), want.detach(), rtol=1e-4, atol=1e-6, msg=f"step {step}: loss")
        for (name, p), q in zip(eager.named_parameters(), compiled_module.parameters(), strict=True):
            torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-5, msg=f"step {step}: grad of {name}")
            p.grad, q.grad = None, None
