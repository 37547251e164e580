"""ONNX export (visdet_ops.onnx, docs/ops.md "ONNX export"): models that call the public functions and modules go
through torch.onnx.export(dynamo=True, custom_translation_table=...), onnxruntime runs the graph on the CPU on fresh
random inputs of other sizes than the export's (the dimensions are dynamic), and its outputs match eager's. The ops
without an ONNX counterpart become visdet_ops-domain nodes whose attributes are checked with onnx; the calls with no
exact form fail with a message that says so.

onnx, onnxscript and onnxruntime are test dependencies (pyproject's [test] extra, which every session that runs the
suite installs); the package itself needs none of them (test_import_needs_torch_only)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import visdet_ops
import visdet_ops.onnx
from visdet_ops._build_rules import parse_release

ROOT = Path(__file__).resolve().parent.parent
TORCH_SUPPORTED = parse_release(torch.__version__).major_minor >= visdet_ops.onnx.MIN_TORCH
MIN_TORCH_TEXT = ".".join(map(str, visdet_ops.onnx.MIN_TORCH))

needs_exporter = pytest.mark.skipif(
    not TORCH_SUPPORTED,
    reason=f"ONNX export needs torch >= {MIN_TORCH_TEXT}, this is {torch.__version__} "
    "(test_older_torch_is_refused checks the error there)",
)


# --------------------------------------------------------------------------------------------------------------
# Without the exporter's packages, on an older torch


def test_import_needs_torch_only():
    """`import visdet_ops.onnx` never imports onnx, onnxscript or onnxruntime (blocked here); the table says what to
    install."""
    code = (
        "import sys\n"
        "for name in ('onnx', 'onnxscript', 'onnxruntime'):\n"
        "    sys.modules[name] = None\n"
        "import torch, visdet_ops, visdet_ops.onnx\n"
        "torch.__version__ = '2.99.0'  # past the torch check, to the import of onnxscript\n"
        "try:\n"
        "    visdet_ops.onnx.custom_translation_table\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
        "else:\n"
        "    raise SystemExit('no ImportError')\n"
    )
    # From the folder that holds the package under test (the source tree's in-place build, or site-packages).
    cwd = Path(visdet_ops.__file__).resolve().parent.parent
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=cwd)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "pip install onnxscript onnx" in res.stdout, res.stdout


def test_older_torch_is_refused(monkeypatch):
    monkeypatch.setattr(torch, "__version__", "2.4.1")
    with pytest.raises(ImportError, match=rf"needs torch >= {re.escape(MIN_TORCH_TEXT)}.*this is torch 2\.4\.1"):
        visdet_ops.onnx._build_table()


# --------------------------------------------------------------------------------------------------------------
# Export and run


@pytest.fixture(scope="module")
def table():
    if not TORCH_SUPPORTED:
        pytest.skip(f"ONNX export needs torch >= {MIN_TORCH_TEXT}")
    for name in ("onnx", "onnxscript", "onnxruntime"):
        pytest.importorskip(name)
    return visdet_ops.onnx.custom_translation_table


def _export(table, model: torch.nn.Module, args: tuple, dynamic_shapes=None):
    """The exported ModelProto (torch.onnx.export's dynamo exporter, default opset)."""
    program = torch.onnx.export(
        model.eval(),
        args,
        dynamo=True,
        custom_translation_table=table,
        dynamic_shapes=dynamic_shapes,
        verbose=False,
    )
    return program.model_proto


def _run(model_proto, *inputs: torch.Tensor) -> list[torch.Tensor]:
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 2
    session = onnxruntime.InferenceSession(
        model_proto.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    feeds = {arg.name: t.numpy() for arg, t in zip(session.get_inputs(), inputs)}
    return [torch.from_numpy(out) for out in session.run(None, feeds)]


def _op_types(model_proto) -> set[str]:
    return {f"{n.domain}::{n.op_type}" if n.domain else n.op_type for n in model_proto.graph.node}


def _grid_boxes(n: int, rng: torch.Generator) -> torch.Tensor:
    """Boxes on the integer grid, at most 60 px a side, so that every IoU is a ratio of exact float32 integers:
    onnxruntime's IoU > t and the kernels' inter > t * union then decide every pair alike at a dyadic threshold."""
    corner = torch.randint(0, 100, (n, 2), generator=rng)
    size = torch.randint(1, 60, (n, 2), generator=rng)
    return torch.cat([corner, corner + size], 1).float()


def _tied_scores(n: int, rng: torch.Generator) -> torch.Tensor:
    # 17 values: ties, which both sides must break towards the lower index.
    return torch.randint(0, 17, (n,), generator=rng).float() / 16


class NmsModel(torch.nn.Module):
    def forward(self, boxes, scores):
        return (
            *visdet_ops.nms(boxes, scores, 0.5),
            *visdet_ops.nms(boxes, scores, 0.375, offset=1, score_threshold=0.3, max_num=7),
        )


@needs_exporter
def test_nms(table, rng):
    n = torch.export.Dim("n")
    onnx_model = _export(table, NmsModel(), (_grid_boxes(12, rng), _tied_scores(12, rng)), ({0: n}, {0: n}))
    assert _op_types(onnx_model) >= {"NonMaxSuppression"}
    assert not any(node.domain for node in onnx_model.graph.node)
    for size in (0, 1, 300):
        boxes, scores = _grid_boxes(size, rng), _tied_scores(size, rng)
        got = _run(onnx_model, boxes, scores)
        want = NmsModel()(boxes, scores)
        for g, w in zip(got, want):
            assert torch.equal(g, w), (size, g, w)


class BatchedNmsModel(torch.nn.Module):
    def forward(self, boxes, scores, idxs):
        return (
            *visdet_ops.batched_nms(boxes, scores, idxs, {"iou_threshold": 0.5}),
            *visdet_ops.batched_nms(
                boxes, scores, idxs, {"iou_threshold": 0.625, "offset": 1, "score_threshold": 0.2, "max_num": 9}
            ),
            *visdet_ops.batched_nms(boxes, scores, idxs, {"iou_threshold": 0.5}, class_agnostic=True),
        )


@needs_exporter
def test_batched_nms(table, rng):
    n = torch.export.Dim("n")
    args = (_grid_boxes(12, rng), _tied_scores(12, rng), torch.randint(0, 3, (12,), generator=rng))
    onnx_model = _export(table, BatchedNmsModel(), args, ({0: n}, {0: n}, {0: n}))
    for size in (0, 1, 400):
        # Classes from -3 to 7 (batched_nms takes any integers), coordinates that overlap across classes.
        boxes, scores = _grid_boxes(size, rng), _tied_scores(size, rng)
        idxs = torch.randint(-3, 8, (size,), generator=rng)
        got = _run(onnx_model, boxes, scores, idxs)
        want = BatchedNmsModel()(boxes, scores, idxs)
        for g, w in zip(got, want):
            assert torch.equal(g, w), (size, g, w)


def _rois(k: int, batch: int, height: int, width: int, rng: torch.Generator, scale: float = 1.0) -> torch.Tensor:
    """RoIs in image coordinates (map size / scale) with real corners: some tiny (below one pixel), some reaching
    out of the map, some with integer corners, some empty (x2 + 1 <= x1)."""
    size = torch.tensor([width, height], dtype=torch.float32) / scale
    corner = torch.rand(k, 2, generator=rng) * size * 1.2 - 0.1 * size
    extent = torch.rand(k, 2, generator=rng) * size * 0.6
    extent[: k // 5] *= 0.02
    rois = torch.cat([torch.randint(0, batch, (k, 1), generator=rng).float(), corner, corner + extent], 1)
    rois[k // 5 : 2 * k // 5, 1:] = rois[k // 5 : 2 * k // 5, 1:].round()
    rois[2 * k // 5 : 2 * k // 5 + 2, 3:] = rois[2 * k // 5 : 2 * k // 5 + 2, 1:3] - 3
    return rois


def _map_dims() -> tuple[dict, dict]:
    """x [N, C, H, W] and rois [K, 5], every size but the 5 dynamic."""
    x = {axis: torch.export.Dim(name) for axis, name in enumerate("nchw")}
    return x, {0: torch.export.Dim("k")}


class RoIAlignModel(torch.nn.Module):
    """avg and max, `aligned` both ways, adaptive (0, -1) and fixed sampling."""

    def __init__(self):
        super().__init__()
        self.heads = torch.nn.ModuleList(
            [
                visdet_ops.RoIAlign((7, 5), 0.5, 0, "avg", True),
                visdet_ops.RoIAlign(3, 0.25, 0, "avg", False),
                visdet_ops.RoIAlign((2, 4), 1.0, 2, "avg", True),
                visdet_ops.RoIAlign(3, 0.5, -1, "avg", False),
                visdet_ops.RoIAlign((3, 2), 0.5, 2, "max", True),
                visdet_ops.RoIAlign(2, 0.25, 3, "max", False),
            ]
        )

    def forward(self, x, rois):
        return tuple(head(x, rois) for head in self.heads)


@needs_exporter
def test_roi_align(table, rng):
    x = torch.randn(2, 3, 10, 12, generator=rng)
    onnx_model = _export(table, RoIAlignModel(), (x, _rois(6, 2, 10, 12, rng, 0.5)), _map_dims())
    assert "RoiAlign" in _op_types(onnx_model)
    for batch, channels, height, width, k in ((3, 4, 13, 17, 60), (1, 2, 5, 4, 1), (2, 3, 9, 9, 0)):
        x = torch.randn(batch, channels, height, width, generator=rng)
        rois = _rois(k, batch, height, width, rng, 0.5)
        got = _run(onnx_model, x, rois)
        want = RoIAlignModel()(x, rois)
        for i, (g, w) in enumerate(zip(got, want)):
            # avg: the same arithmetic (equal in practice); max: the composed grid's sample positions differ from
            # the kernels' in the last bits of float32.
            torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5 if i < 4 else 5e-5, msg=lambda m, i=i: f"head {i}: {m}")


class RoIPoolModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.heads = torch.nn.ModuleList(
            [
                visdet_ops.RoIPool((7, 5), 0.5),
                visdet_ops.RoIPool(3, 0.25),
                visdet_ops.RoIPool(2, 1.0),
                visdet_ops.RoIPool(4, 1 / 16),
            ]
        )

    def forward(self, x, rois):
        return tuple(head(x, rois) for head in self.heads)


@needs_exporter
def test_roi_pool(table, rng):
    x = torch.randn(2, 3, 10, 12, generator=rng)
    onnx_model = _export(table, RoIPoolModel(), (x, _rois(6, 2, 10, 12, rng)), _map_dims())
    assert "MaxRoiPool" in _op_types(onnx_model)
    for batch, channels, height, width, k, scale in ((3, 4, 13, 17, 80, 0.5), (2, 2, 16, 11, 40, 1 / 16), (1, 1, 4, 6, 0, 1)):
        x = torch.randn(batch, channels, height, width, generator=rng)
        rois = _rois(k, batch, height, width, rng, scale)
        got = _run(onnx_model, x, rois)
        want = RoIPoolModel()(x, rois)
        for i, (g, w) in enumerate(zip(got, want)):
            # mmcv's bins, each pooled by MaxRoiPool: the same pixels, so the same maximum.
            assert torch.equal(g, w), f"head {i}: largest difference {(g - w).abs().max()}"


class DeformConvModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.v1 = visdet_ops.DeformConv2d(4, 6, 3, stride=2, padding=1, deform_groups=2)
        self.v2 = visdet_ops.ModulatedDeformConv2d(4, 6, (3, 2), stride=(1, 2), padding=(2, 1), dilation=(2, 1), groups=2)
        torch.nn.init.normal_(self.v1.weight)
        torch.nn.init.normal_(self.v2.weight)
        torch.nn.init.normal_(self.v2.bias)

    def forward(self, x, offset1, offset2, mask2):
        return self.v1(x, offset1), self.v2(x, offset2, mask2)


def _dcn_inputs(batch: int, height: int, width: int, rng: torch.Generator):
    x = torch.randn(batch, 4, height, width, generator=rng)
    h1, w1 = (height + 2 - 3) // 2 + 1, (width + 2 - 3) // 2 + 1
    h2, w2 = height + 4 - 4 - 1 + 1, (width + 2 - 2) // 2 + 1
    # Offsets of a few pixels: many samples land between pixels and some outside the map.
    offset1 = torch.randn(batch, 2 * 2 * 9, h1, w1, generator=rng) * 2
    offset2 = torch.randn(batch, 2 * 6, h2, w2, generator=rng) * 2
    mask2 = torch.rand(batch, 6, h2, w2, generator=rng)
    return x, offset1, offset2, mask2


def _has_deform_conv_kernel() -> bool:
    import onnx
    import onnxruntime
    from onnx import TensorProto, helper

    node = helper.make_node("DeformConv", ["X", "W", "offset"], ["Y"])
    inputs = [
        helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, 1, 3, 3]),
        helper.make_tensor_value_info("W", TensorProto.FLOAT, [1, 1, 1, 1]),
        helper.make_tensor_value_info("offset", TensorProto.FLOAT, [1, 2, 3, 3]),
    ]
    graph = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], ir_version=9)
    try:
        onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    except onnxruntime.capi.onnxruntime_pybind11_state.NotImplemented:
        return False
    del onnx
    return True


@needs_exporter
def test_deform_conv(table, rng):
    # Static shapes (the offsets' sizes follow the map's), fresh values.
    model = DeformConvModel()
    onnx_model = _export(table, model, _dcn_inputs(2, 8, 9, rng))
    nodes = [n for n in onnx_model.graph.node if n.op_type == "DeformConv"]
    assert len(nodes) == 2 and not any(n.domain for n in onnx_model.graph.node)
    import onnx

    attributes = [{a.name: onnx.helper.get_attribute_value(a) for a in n.attribute} for n in nodes]
    assert attributes[0] == {"dilations": [1, 1], "group": 1, "offset_group": 2, "pads": [1, 1, 1, 1], "strides": [2, 2]}
    assert attributes[1] == {"dilations": [2, 1], "group": 2, "offset_group": 1, "pads": [2, 1, 2, 1], "strides": [1, 2]}
    if not _has_deform_conv_kernel():
        import onnxruntime

        pytest.skip(f"onnxruntime {onnxruntime.__version__} has no DeformConv kernel (1.25 and later have); graph checked")
    args = _dcn_inputs(2, 8, 9, rng)
    got = _run(onnx_model, *args)
    with torch.no_grad():
        want = model(*args)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4)


# --------------------------------------------------------------------------------------------------------------
# Ops with no ONNX counterpart: one visdet_ops-domain node each


def _custom_cases(rng: torch.Generator):
    """(registered op, public call, its inputs, the node's expected attributes)."""
    mask = (torch.rand(2, 5, 5, generator=rng) > 0.5).float()
    value_shapes = torch.tensor([[4, 4], [2, 2]])
    return [
        ("corner_pool", lambda x: visdet_ops.corner_pool(x, "left"), (torch.randn(1, 2, 5, 6, generator=rng),), {"mode": "left"}),
        (
            "carafe",
            lambda f, m: visdet_ops.carafe(f, m, 3, 1, 2),
            (torch.randn(1, 2, 4, 4, generator=rng), torch.rand(1, 9, 8, 8, generator=rng)),
            {"kernel_size": 3, "group_size": 1, "scale_factor": 2},
        ),
        (
            "carafe_naive",
            lambda f, m: visdet_ops.carafe_naive(f, m, 3, 1, 2),
            (torch.randn(1, 2, 4, 4, generator=rng), torch.rand(1, 9, 8, 8, generator=rng)),
            {"kernel_size": 3, "group_size": 1, "scale_factor": 2},
        ),
        (
            "masked_conv2d",
            lambda f, m, w, b: visdet_ops.masked_conv2d(f, m, w, b, 1),
            (torch.randn(2, 2, 5, 5, generator=rng), mask, torch.randn(3, 2, 3, 3, generator=rng), torch.randn(3, generator=rng)),
            {"pad_h": 1, "pad_w": 1},
        ),
        (
            "sigmoid_focal_loss",
            lambda x, t: visdet_ops.sigmoid_focal_loss(x, t, 2.0, 0.25, None, "mean"),
            (torch.randn(4, 3, generator=rng), torch.randint(0, 3, (4,), generator=rng)),
            {"gamma": 2.0, "alpha": 0.25, "reduction": "mean"},
        ),
        (
            "softmax_focal_loss",
            lambda x, t, w: visdet_ops.softmax_focal_loss(x, t, 1.5, 0.5, w, "none"),
            (torch.randn(4, 3, generator=rng), torch.randint(0, 3, (4,), generator=rng), torch.rand(3, generator=rng)),
            {"gamma": 1.5, "alpha": 0.5, "reduction": "none"},
        ),
        (
            "bbox_overlaps",
            lambda a, b: visdet_ops.bbox_overlaps(a, b, "giou", offset=1),
            (_grid_boxes(3, rng), _grid_boxes(2, rng)),
            {"mode": "giou", "aligned": 0, "offset": 1, "eps": 1e-6},
        ),
        (
            "soft_nms",
            lambda b, s: visdet_ops.soft_nms(b, s, 0.25, 0.5, 0.125, "gaussian"),
            (_grid_boxes(5, rng), torch.rand(5, generator=rng)),
            {"iou_threshold": 0.25, "sigma": 0.5, "min_score": 0.125, "method": "gaussian", "offset": 0},
        ),
        (
            "deform_roi_pool",
            lambda x, r, o: visdet_ops.deform_roi_pool(x, r, o, 2, 0.5, 2, 0.125),
            (torch.randn(1, 2, 8, 8, generator=rng), torch.tensor([[0, 1.0, 1, 9, 9]]), torch.randn(1, 2, 2, 2, generator=rng)),
            {"pooled_height": 2, "pooled_width": 2, "spatial_scale": 0.5, "sampling_ratio": 2, "gamma": 0.125},
        ),
        (
            "multi_scale_deformable_attn",
            lambda v, s, i, loc, w: visdet_ops.multi_scale_deformable_attn(v, s, i, loc, w, 64),
            (
                torch.randn(1, 20, 2, 4, generator=rng),
                value_shapes,
                torch.tensor([0, 16]),
                torch.rand(1, 3, 2, 2, 2, 2, generator=rng),
                torch.rand(1, 3, 2, 2, 2, generator=rng),
            ),
            {"im2col_step": 64},
        ),
    ]


class CallModel(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *args):
        return self.fn(*args)


@needs_exporter
def test_custom_nodes(table, rng):
    """Each op without an ONNX counterpart is one visdet_ops-domain node: its tensors as inputs, its other arguments
    as attributes under the schema's names, its outputs typed as eager's; onnx's checker accepts the model."""
    import onnx

    cases = _custom_cases(rng)
    standard = {"nms", "batched_nms", "roi_align", "roi_pool", "deform_conv2d"}
    # Every registered forward op is exported one way or the other; nms_match: test_nms_match_fails_clearly.
    assert {name for name, *_ in cases} | standard | {"nms_match"} == set(_forward_ops())
    for name, fn, args, attributes in cases:
        with torch.no_grad():
            onnx_model = _export(table, CallModel(fn), args)
            want = fn(*args)
        onnx.checker.check_model(onnx_model, full_check=True)
        nodes = [n for n in onnx_model.graph.node if n.domain]
        assert [(n.domain, n.op_type) for n in nodes] == [(visdet_ops.onnx.CUSTOM_DOMAIN, name)], name
        assert any(o.domain == visdet_ops.onnx.CUSTOM_DOMAIN and o.version == 1 for o in onnx_model.opset_import)
        got = {}
        for a in nodes[0].attribute:
            value = onnx.helper.get_attribute_value(a)
            got[a.name] = value.decode() if isinstance(value, bytes) else value
        assert got.keys() == attributes.keys(), name
        for key, value in attributes.items():
            assert got[key] == pytest.approx(value, rel=1e-7), (name, key)
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        assert len([i for i in nodes[0].input if i]) == len(tensors), name
        want = want if isinstance(want, tuple) else (want,)
        elem_types = [o.type.tensor_type.elem_type for o in onnx_model.graph.output]
        assert elem_types == [onnx.helper.np_dtype_to_tensor_dtype(w.numpy().dtype) for w in want], name


def _forward_ops() -> list[str]:
    from visdet_ops import _onnx_translations

    return _onnx_translations.forward_ops()


@needs_exporter
def test_table_covers_every_op(table):
    assert sorted(op.name().split("::")[1] for op in table) == _forward_ops()
    assert all(getattr(torch.ops.visdet_ops, name).default in table for name in _forward_ops())


def test_docs_name_every_op():
    """docs/ops.md's "ONNX export" table has a row for every registered forward op."""
    text = (ROOT / "docs" / "ops.md").read_text()
    section = text.split("## ONNX export", 1)[1].split("\n## ", 1)[0]
    names = {name for name in dir(torch.ops.visdet_ops) if not name.startswith("_")}
    for name in sorted(names):
        if isinstance(getattr(torch.ops.visdet_ops, name), torch._ops.OpOverloadPacket):
            assert re.search(rf"^\| `{name}`", section, re.M), f"docs/ops.md, ONNX export: no row for {name}"


# --------------------------------------------------------------------------------------------------------------
# No exact form: one clear error


def _conversion_message(table, model, args) -> str:
    with pytest.raises(Exception) as info:  # noqa: PT011 - torch's ConversionError, or torch.export's error
        _export(table, model, args)
    return str(info.value)


@needs_exporter
def test_roi_align_max_adaptive_fails_clearly(table):
    model = CallModel(lambda x, r: visdet_ops.roi_align(x, r, 2, 1.0, 0, "max", True))
    message = _conversion_message(table, model, (torch.randn(1, 2, 8, 8), torch.tensor([[0, 1.0, 1, 5, 5]])))
    assert "roi_align: pool_mode='max' with adaptive sampling" in message
    assert "sampling_ratio > 0" in message


@needs_exporter
def test_negative_iou_threshold_fails_clearly(table):
    model = CallModel(lambda b, s: visdet_ops.nms(b, s, -0.5))
    message = _conversion_message(table, model, (torch.tensor([[0, 0, 4, 4.0]]), torch.tensor([0.5])))
    assert "nms: iou_threshold=-0.5 has no ONNX form" in message


@needs_exporter
def test_nms_match_fails_clearly(table):
    model = CallModel(lambda d: visdet_ops.nms_match(d, 0.5))
    message = _conversion_message(table, model, (torch.tensor([[0, 0, 4, 4, 0.5], [1, 1, 4, 4, 0.25]]),))
    assert "nms_match: its result is a list of groups" in message
