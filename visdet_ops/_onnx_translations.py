"""ONNX translations of visdet-ops' registered ops, for torch.onnx.export's dynamo exporter.

Imported by visdet_ops.onnx when its `custom_translation_table` is first used, never by `import visdet_ops`: this
module needs onnxscript and onnx (the package itself needs torch only). Each function takes the registered op's
arguments under its schema's names and builds the ONNX graph for one call with onnxscript's opset ops (traced: the
op's int/float/str arguments are Python values here, so they pick the graph's shape). docs/ops.md, "ONNX export",
says what each op becomes and why.
"""

from __future__ import annotations

import inspect
import math

import onnx
import torch
from onnxscript import FLOAT, INT64, opset19
from onnxscript import opset18 as op
from onnxscript.values import Opset

# The domain of the custom nodes: the ops' own torch.library namespace, as visdet_ops.onnx.CUSTOM_DOMAIN says (taken
# from torch, not imported from visdet_ops.onnx, which imports this module: no import circle).
CUSTOM_DOMAIN = torch.ops.visdet_ops.name
CUSTOM_DOMAIN_VERSION = 1

_INT64_MAX = 2**63 - 1


class OnnxExportError(RuntimeError):
    """A call whose semantics no ONNX graph of standard ops reproduces (the message says what to change)."""


def _empty_like(x):
    """A 1-D empty tensor of x's type: the argmax outputs of roi_align's avg mode (shape [0], backward only)."""
    return op.CastLike(op.ConstantOfShape(op.Constant(value_ints=[0])), x)


def _column(t, start: int, end: int):
    return op.Slice(t, op.Constant(value_ints=[start]), op.Constant(value_ints=[end]), op.Constant(value_ints=[1]))


# ---------------------------------------------------------------------------------------------------------------
# nms, batched_nms -> NonMaxSuppression


def _iou_threshold(name: str, iou_threshold: float) -> float:
    # NonMaxSuppression takes a threshold in [0, 1] and suppresses IoU > threshold, as ours does. Above 1 nothing is
    # ever suppressed either way (IoU <= 1), so 1 stands for any larger value. Below 0 ours suppresses every box
    # behind the first that has a non-zero union with it, overlapping or not: no ONNX form.
    if not iou_threshold >= 0:
        raise OnnxExportError(
            f"{name}: iou_threshold={iou_threshold} has no ONNX form (NonMaxSuppression takes a threshold in [0, 1]); "
            "export with iou_threshold >= 0"
        )
    return min(float(iou_threshold), 1.0)


def _nms_boxes(boxes, offset: int):
    """[1, N, 4] float32 boxes for NonMaxSuppression. offset=1 (mmcv's legacy "+1" box size: width x2 - x1 + 1) is
    the same IoU as offset 0 on boxes whose far corner moved by +1: (x2 + 1) - x1."""
    boxes = op.Cast(boxes, to=FLOAT.dtype)
    if offset:
        boxes = op.Add(boxes, op.Constant(value_floats=[0.0, 0.0, 1.0, 1.0]))
    return op.Unsqueeze(boxes, op.Constant(value_ints=[0]))


def _selected_boxes(selected):
    # NonMaxSuppression's rows are (batch, class, box index).
    return op.Reshape(_column(selected, 2, 3), op.Constant(value_ints=[-1]))


def nms(boxes, scores, iou_threshold: float, offset: int = 0):
    """visdet_ops::nms -> NonMaxSuppression (one batch, one class): kept indices in descending score order, ties to
    the lower index (onnxruntime orders them so, as ours does)."""
    iou = _iou_threshold("nms", iou_threshold)
    selected = op.NonMaxSuppression(
        _nms_boxes(boxes, offset),
        op.Unsqueeze(op.Cast(scores, to=FLOAT.dtype), op.Constant(value_ints=[0, 1])),
        op.Constant(value_ints=[_INT64_MAX]),
        op.Constant(value_floats=[iou]),
    )
    return _selected_boxes(selected)


def batched_nms(boxes, scores, idxs, iou_threshold: float, offset: int = 0):
    """visdet_ops::batched_nms -> NonMaxSuppression over a class axis: boxes suppress boxes of their class only,
    exactly (no coordinate offsets). Class c - min(idxs) of the graph's [1, C, N] scores holds the scores of class c
    and -inf elsewhere, which the -inf score threshold drops. Then the kept boxes are ordered by descending score,
    ties to the lower index: sorted by index first, then by score with TopK (stable: the lower position first)."""
    iou = _iou_threshold("batched_nms", iou_threshold)
    scores = op.Cast(scores, to=FLOAT.dtype)
    classes = op.Cast(idxs, to=INT64.dtype)
    # With no boxes, ReduceMin's value is never used (it is subtracted from an empty tensor), and C = 0.
    classes = op.Sub(classes, op.ReduceMin(classes, keepdims=1))
    num_classes = op.ReduceMax(
        op.Concat(op.Add(classes, op.Constant(value_int=1)), op.Constant(value_ints=[0]), axis=0)
    )
    member = op.Equal(
        op.Unsqueeze(classes, op.Constant(value_ints=[0])),
        op.Unsqueeze(
            op.Range(op.Constant(value_int=0), num_classes, op.Constant(value_int=1)), op.Constant(value_ints=[1])
        ),
    )
    minus_inf = op.Constant(value_float=-math.inf)
    class_scores = op.Where(member, op.Unsqueeze(scores, op.Constant(value_ints=[0])), minus_inf)
    selected = op.NonMaxSuppression(
        _nms_boxes(boxes, offset),
        op.Unsqueeze(class_scores, op.Constant(value_ints=[0])),
        op.Constant(value_ints=[_INT64_MAX]),
        op.Constant(value_floats=[iou]),
        op.Constant(value_floats=[-math.inf]),
    )
    keep = _selected_boxes(selected)
    count = op.Shape(keep)
    by_index, _ = op.TopK(keep, count, largest=0, sorted=1)
    _, by_score = op.TopK(op.Gather(scores, by_index), count, largest=1, sorted=1)
    return op.Gather(by_index, by_score)


# ---------------------------------------------------------------------------------------------------------------
# roi_align -> RoiAlign


def _split_rois(rois, like):
    """mmcv's [K, 5] (batch index, x1, y1, x2, y2) -> ONNX's [K, 4] boxes in like's type and [K] int64 indices."""
    boxes = op.CastLike(_column(rois, 1, 5), like)
    batch = op.Cast(op.Reshape(_column(rois, 0, 1), op.Constant(value_ints=[-1])), to=INT64.dtype)
    return boxes, batch


def roi_align(
    input,
    rois,
    pooled_height: int,
    pooled_width: int,
    spatial_scale: float,
    sampling_ratio: int,
    pool_mode: str,
    aligned: bool,
):
    """visdet_ops::roi_align -> RoiAlign (opset 16's coordinate_transformation_mode: half_pixel is aligned=True,
    output_half_pixel aligned=False with its RoI size of at least 1; sampling_ratio 0 is the same adaptive
    ceil(bin size) grid). avg: one RoiAlign. max: ONNX's max mode takes the largest of each sample's four weighted
    corners, not of the interpolated samples as mmcv does, so it is composed: RoiAlign avg on a grid sampling_ratio
    times finer with one sample per cell (the same sample points) and ReduceMax over each bin's cells; with adaptive
    sampling the grid differs per RoI and has no such form. The argmax outputs serve the backward only: empty (avg,
    as the op's) or NaN (max)."""
    boxes, batch = _split_rois(rois, input)
    mode = "half_pixel" if aligned else "output_half_pixel"
    if pool_mode == "avg":
        out = op.RoiAlign(
            input,
            boxes,
            batch,
            coordinate_transformation_mode=mode,
            mode="avg",
            output_height=pooled_height,
            output_width=pooled_width,
            sampling_ratio=max(sampling_ratio, 0),
            spatial_scale=spatial_scale,
        )
        empty = _empty_like(input)
        return out, empty, empty
    if pool_mode != "max":
        raise OnnxExportError(f"roi_align: pool_mode must be 'avg' or 'max', got {pool_mode!r}")
    if sampling_ratio <= 0:
        raise OnnxExportError(
            "roi_align: pool_mode='max' with adaptive sampling (sampling_ratio <= 0) has no ONNX form: its sample grid "
            "differs per RoI, and ONNX RoiAlign's max mode is not mmcv's (it takes the largest weighted corner). "
            "Export with a fixed sampling_ratio > 0 (e.g. 2), or pool_mode='avg'"
        )
    samples = op.RoiAlign(
        input,
        boxes,
        batch,
        coordinate_transformation_mode=mode,
        mode="avg",
        output_height=pooled_height * sampling_ratio,
        output_width=pooled_width * sampling_ratio,
        sampling_ratio=1,
        spatial_scale=spatial_scale,
    )
    # [K, C, PH * G, PW * G] -> [K, C, PH, G, PW, G] -> the largest sample of each bin.
    grid = op.Concat(
        op.Shape(samples, start=0, end=2),
        op.Constant(value_ints=[pooled_height, sampling_ratio, pooled_width, sampling_ratio]),
        axis=0,
    )
    out = op.ReduceMax(op.Reshape(samples, grid), op.Constant(value_ints=[3, 5]), keepdims=0)
    argmax = op.CastLike(op.Expand(op.Constant(value_float=math.nan), op.Shape(out)), input)
    return out, argmax, argmax


# ---------------------------------------------------------------------------------------------------------------
# roi_pool -> MaxRoiPool, one 1x1 pool per bin


def roi_pool(input, rois, pooled_height: int, pooled_width: int, spatial_scale: float):
    """visdet_ops::roi_pool -> MaxRoiPool, exactly. MaxRoiPool itself rounds the scaled RoI corners to integers
    (Caffe's and torchvision's rule); mmcv's bins start and end at floor/ceil of unrounded edges. So the graph
    computes mmcv's bin edges (the kernels' arithmetic: float products and sums rounded one at a time, in the RoIs'
    dtype) and hands each bin to MaxRoiPool as an integer RoI of its own, pooled to 1x1 at scale 1, which is the
    maximum over exactly that rectangle. An empty bin gives 0, as ours. The argmax output (backward only): -1."""
    dtype = rois
    height = op.CastLike(op.Shape(input, start=2, end=3), dtype)
    width = op.CastLike(op.Shape(input, start=3, end=4), dtype)
    # The float64 value, then the RoIs' type: the kernels' scale (a float32 rounding of it beside float32 RoIs).
    scale = op.CastLike(
        op.Constant(value=onnx.helper.make_tensor("spatial_scale", onnx.TensorProto.DOUBLE, [], [spatial_scale])), dtype
    )
    one = op.CastLike(op.Constant(value_float=1.0), dtype)
    zero = op.CastLike(op.Constant(value_float=0.0), dtype)
    x1 = op.Mul(_column(rois, 1, 2), scale)  # [K, 1]
    y1 = op.Mul(_column(rois, 2, 3), scale)
    x2 = op.Mul(op.Add(_column(rois, 3, 4), one), scale)
    y2 = op.Mul(op.Add(_column(rois, 4, 5), one), scale)
    roi_w = op.Sub(x2, x1)
    roi_h = op.Sub(y2, y1)

    def edges(origin, size, bins: int, limit):
        # Bin p covers [floor(p * bin + origin), ceil((p + 1) * bin + origin)), clipped to [0, limit]: [K, bins].
        step = op.Div(size, op.CastLike(op.Constant(value_float=float(bins)), dtype))
        starts = op.CastLike(op.Constant(value_floats=[float(p) for p in range(bins)]), dtype)
        ends = op.CastLike(op.Constant(value_floats=[float(p + 1) for p in range(bins)]), dtype)
        lo = op.Clip(op.Floor(op.Add(op.Mul(starts, step), origin)), zero, limit)
        hi = op.Clip(op.Ceil(op.Add(op.Mul(ends, step), origin)), zero, limit)
        return lo, hi

    w_lo, w_hi = edges(x1, roi_w, pooled_width, width)  # [K, PW]
    h_lo, h_hi = edges(y1, roi_h, pooled_height, height)  # [K, PH]
    # Per bin [K, PH, PW]: (batch, w_lo, h_lo, w_hi - 1, h_hi - 1), MaxRoiPool's inclusive far corner.
    grid = op.Concat(op.Shape(rois, start=0, end=1), op.Constant(value_ints=[pooled_height, pooled_width]), axis=0)

    def on_grid(t, axis: int):
        return op.Expand(op.Unsqueeze(t, op.Constant(value_ints=[axis])), grid)

    batch = op.Unsqueeze(_column(rois, 0, 1), op.Constant(value_ints=[2]))  # [K, 1, 1]
    bins = op.Concat(
        op.Unsqueeze(op.Expand(batch, grid), op.Constant(value_ints=[3])),
        op.Unsqueeze(on_grid(w_lo, 1), op.Constant(value_ints=[3])),
        op.Unsqueeze(on_grid(h_lo, 2), op.Constant(value_ints=[3])),
        op.Unsqueeze(on_grid(op.Sub(w_hi, one), 1), op.Constant(value_ints=[3])),
        op.Unsqueeze(on_grid(op.Sub(h_hi, one), 2), op.Constant(value_ints=[3])),
        axis=3,
    )
    pooled = op.MaxRoiPool(
        input,
        op.CastLike(op.Reshape(bins, op.Constant(value_ints=[-1, 5])), input),
        pooled_shape=[1, 1],
        spatial_scale=1.0,
    )  # [K * PH * PW, C, 1, 1]
    channels = op.Shape(input, start=1, end=2)
    pooled = op.Transpose(op.Reshape(pooled, op.Concat(grid, channels, axis=0)), perm=[0, 3, 1, 2])  # [K, C, PH, PW]
    # Empty bins (and RoIs with no area: x2 + 1 <= x1 or y2 + 1 <= y1 after scaling) give 0.
    roi_empty = op.Not(op.And(op.Greater(roi_w, zero), op.Greater(roi_h, zero)))  # [K, 1]
    empty = op.Or(
        op.Or(on_grid(op.LessOrEqual(w_hi, w_lo), 1), on_grid(op.LessOrEqual(h_hi, h_lo), 2)),
        op.Expand(op.Unsqueeze(roi_empty, op.Constant(value_ints=[2])), grid),
    )
    out = op.Where(op.Unsqueeze(empty, op.Constant(value_ints=[1])), op.CastLike(zero, input), pooled)
    argmax = op.Cast(op.Expand(op.Constant(value_int=-1), op.Shape(out)), to=onnx.TensorProto.INT32)
    return out, argmax


# ---------------------------------------------------------------------------------------------------------------
# deform_conv2d -> DeformConv (opset 19)


def deform_conv2d(
    input,
    offset,
    mask,
    weight,
    bias,
    stride_h: int,
    stride_w: int,
    pad_h: int,
    pad_w: int,
    dilation_h: int,
    dilation_w: int,
    groups: int,
    deform_groups: int,
    im2col_step: int,
):
    """visdet_ops::deform_conv2d (DCNv1 without mask, DCNv2 with) -> DeformConv (opset 19): the same offset layout
    ((dy, dx) per kernel point, deform group major) and mask layout, bilinear sampling with zeros outside the map.
    im2col_step only chunks the batch: no attribute."""
    del im2col_step
    return opset19.DeformConv(
        input,
        weight,
        offset,
        bias,
        mask,
        dilations=[dilation_h, dilation_w],
        group=groups,
        offset_group=deform_groups,
        pads=[pad_h, pad_w, pad_h, pad_w],
        strides=[stride_h, stride_w],
    )


# ---------------------------------------------------------------------------------------------------------------
# Ops with no ONNX counterpart -> one visdet_ops-domain node each

_ALL_TENSOR_TYPES = [
    f"tensor({t})"
    for t in (
        "float",
        "double",
        "float16",
        "bfloat16",
        "int8",
        "int16",
        "int32",
        "int64",
        "uint8",
        "uint16",
        "uint32",
        "uint64",
        "bool",
    )
]

_ATTRIBUTE_TYPES = {
    "int": onnx.defs.OpSchema.AttrType.INT,
    "SymInt": onnx.defs.OpSchema.AttrType.INT,
    "bool": onnx.defs.OpSchema.AttrType.INT,
    "float": onnx.defs.OpSchema.AttrType.FLOAT,
    "str": onnx.defs.OpSchema.AttrType.STRING,
}


def _is_tensor(argument) -> bool:
    return str(argument.type) in ("Tensor", "Optional[Tensor]")


# Outputs that are int64 indices; every other output of a custom node has its first tensor input's type (what the ops
# return: tests/test_onnx.py compares each node's output types with eager's dtypes).
_INDEX_OUTPUTS = {"nms_match": (0,), "nms_rotated": (0,), "soft_nms": (0,)}


def custom_node_schema(torch_op: torch._ops.OpOverload) -> onnx.defs.OpSchema:
    """The ONNX schema of the visdet_ops-domain node of a registered op: its Tensor arguments are inputs (Tensor?
    optional), its other arguments attributes of the same name (bool as INT 0/1), its returns outputs. The types
    tell onnx's shape inference (which the exporter's optimizer runs) what each output is."""
    schema = torch_op._schema
    name = schema.name.split("::")[1]
    parameter = onnx.defs.OpSchema.FormalParameter
    option = onnx.defs.OpSchema.FormalParameterOption
    inputs, attributes, constraints = [], [], []
    for argument in schema.arguments:
        if _is_tensor(argument):
            type_str = "T" if not inputs else f"T{len(inputs)}"
            optional = str(argument.type).startswith("Optional")
            inputs.append(
                parameter(argument.name, type_str, param_option=option.Optional if optional else option.Single)
            )
            constraints.append((type_str, _ALL_TENSOR_TYPES, ""))
        else:
            kind = str(argument.type)
            if kind not in _ATTRIBUTE_TYPES:
                raise TypeError(f"{schema.name}: argument {argument.name} of type {kind} has no ONNX attribute type")
            attributes.append(onnx.defs.OpSchema.Attribute(argument.name, _ATTRIBUTE_TYPES[kind], ""))
    outputs = [
        parameter(
            f"output{i}" if len(schema.returns) > 1 else "output",
            "tensor(int64)" if i in _INDEX_OUTPUTS.get(name, ()) else "T",
        )
        for i in range(len(schema.returns))
    ]
    return onnx.defs.OpSchema(
        name,
        CUSTOM_DOMAIN,
        CUSTOM_DOMAIN_VERSION,
        f"visdet-ops' {schema} (docs/ops.md, ONNX export)",
        inputs=inputs,
        outputs=outputs,
        type_constraints=constraints,
        attributes=attributes,
    )


def custom_node(torch_op: torch._ops.OpOverload):
    """A translation that emits one visdet_ops-domain node for each call of torch_op (its schema registered with
    onnx.defs on first use, so onnxscript and onnx's checker know its inputs and attributes)."""
    name = torch_op._schema.name.split("::")[1]
    if not onnx.defs.has(name, CUSTOM_DOMAIN):
        onnx.defs.register_schema(custom_node_schema(torch_op))
    node = getattr(Opset(CUSTOM_DOMAIN, CUSTOM_DOMAIN_VERSION), name)
    arguments = torch_op._schema.arguments

    def translate(*args, **kwargs):
        bound = dict(zip((a.name for a in arguments), args, strict=False))  # the rest: kwargs, defaults
        bound.update(kwargs)
        inputs = [bound.get(a.name) for a in arguments if _is_tensor(a)]
        attributes = {}
        for a in arguments:
            if _is_tensor(a):
                continue
            value = bound.get(a.name, a.default_value)
            attributes[a.name] = int(value) if isinstance(value, bool) else value
        return node(*inputs, **attributes)

    translate.__name__ = name
    translate.__signature__ = _python_signature(torch_op)
    return translate


def _python_signature(torch_op: torch._ops.OpOverload):
    """A Python signature under the schema's names, with attribute annotations: the exporter binds a call's
    arguments to the translation by it and tells inputs from attributes by the annotations."""
    annotations = {"int": int, "SymInt": int, "bool": bool, "float": float, "str": str}
    parameters = []
    for a in torch_op._schema.arguments:
        default = inspect.Parameter.empty if not a.has_default_value() else a.default_value
        kind = str(a.type)
        parameters.append(
            inspect.Parameter(
                a.name,
                inspect.Parameter.POSITIONAL_OR_KEYWORD,
                default=default,
                annotation=inspect.Parameter.empty if _is_tensor(a) else annotations[kind],
            )
        )
    return inspect.Signature(parameters)


# The registered ops that translate to standard ONNX ops; every other forward op becomes a custom node.
STANDARD = {
    "nms": nms,
    "batched_nms": batched_nms,
    "roi_align": roi_align,
    "roi_pool": roi_pool,
    "deform_conv2d": deform_conv2d,
}


def forward_ops() -> list[str]:
    """The registered forward ops (torch.ops.visdet_ops.*, without the private _*_backward ops)."""
    ns = torch.ops.visdet_ops
    names = []
    for name in dir(ns):
        if name.startswith("_"):
            continue
        packet = getattr(ns, name)
        if isinstance(packet, torch._ops.OpOverloadPacket):
            names.append(name)
    return sorted(names)


def build_table() -> dict:
    table = {}
    for name in forward_ops():
        overload = getattr(torch.ops.visdet_ops, name).default
        table[overload] = STANDARD[name] if name in STANDARD else custom_node(overload)
    return table
