"""visdet_ops against mmcv.ops' public names and signatures.

The lists below are literals written from mmcv's source (open-mmlab/mmcv at tag
v2.2.0: mmcv/ops/__init__.py's `__all__`, and each op's def / __init__ /
forward / Function.forward), so this file needs no mmcv. docs/migration.md is
the page for people moving code; it must name every implemented op.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import visdet_ops

# mmcv 2.2.0, mmcv/ops/__init__.py, __all__ (in its order).
MMCV_OPS_ALL = [
    "bbox_overlaps", "CARAFE", "CARAFENaive", "CARAFEPack", "carafe",
    "carafe_naive", "CornerPool", "DeformConv2d", "DeformConv2dPack",
    "deform_conv2d", "DeformRoIPool", "DeformRoIPoolPack",
    "ModulatedDeformRoIPoolPack", "deform_roi_pool", "SigmoidFocalLoss",
    "SoftmaxFocalLoss", "sigmoid_focal_loss", "softmax_focal_loss",
    "get_compiler_version", "get_compiling_cuda_version", "MaskedConv2d",
    "masked_conv2d", "ModulatedDeformConv2d", "ModulatedDeformConv2dPack",
    "modulated_deform_conv2d", "batched_nms", "nms", "soft_nms", "nms_match",
    "RoIAlign", "roi_align", "RoIPool", "roi_pool", "SyncBatchNorm", "Conv2d",
    "ConvTranspose2d", "Linear", "MaxPool2d", "CrissCrossAttention", "PSAMask",
    "point_sample", "rel_roi_point_to_rel_img_point", "SimpleRoIAlign",
    "SAConv2d", "TINShift", "tin_shift", "assign_score_withk",
    "box_iou_rotated", "box_iou_quadri", "RoIPointPool3d", "nms_rotated",
    "knn", "ball_query", "upfirdn2d", "FusedBiasLeakyReLU",
    "fused_bias_leakyrelu", "rotated_feature_align", "RiRoIAlignRotated",
    "riroi_align_rotated", "RoIAlignRotated", "roi_align_rotated",
    "pixel_group", "QueryAndGroup", "GroupAll", "grouping_operation",
    "contour_expand", "three_nn", "three_interpolate",
    "MultiScaleDeformableAttention", "BorderAlign", "border_align",
    "gather_points", "furthest_point_sample", "nms_quadri",
    "furthest_point_sample_with_dist", "PointsSampler", "Correlation",
    "boxes_iou3d", "boxes_iou_bev", "boxes_overlap_bev", "nms_bev",
    "nms_normal_bev", "nms3d", "nms3d_normal", "Voxelization", "voxelization",
    "dynamic_scatter", "DynamicScatter", "RoIAwarePool3d", "SparseConv2d",
    "SparseConv3d", "SparseConvTranspose2d", "SparseConvTranspose3d",
    "SparseInverseConv2d", "SparseInverseConv3d", "SubMConv2d", "SubMConv3d",
    "SparseModule", "SparseSequential", "SparseMaxPool2d", "SparseMaxPool3d",
    "SparseConvTensor", "scatter_nd", "points_in_boxes_part",
    "points_in_boxes_cpu", "points_in_boxes_all", "points_in_polygons",
    "min_area_polygons", "active_rotated_filter", "convex_iou", "convex_giou",
    "diff_iou_rotated_2d", "diff_iou_rotated_3d", "chamfer_distance",
    "PrRoIPool", "prroi_pool", "bias_act", "filtered_lrelu", "conv2d",
    "conv_transpose2d", "filter2d", "upsample2d", "BezierAlign", "bezier_align",
]  # fmt: skip

# The subset of mmcv 2.2.0's mmcv.ops.__all__ that visdet_ops implements.
IMPLEMENTED_FUNCTIONS = [
    "batched_nms",
    "bbox_overlaps",
    "carafe",
    "carafe_naive",
    "deform_conv2d",
    "deform_roi_pool",
    "masked_conv2d",
    "modulated_deform_conv2d",
    "nms",
    "nms_match",
    "point_sample",
    "rel_roi_point_to_rel_img_point",
    "roi_align",
    "roi_pool",
    "sigmoid_focal_loss",
    "soft_nms",
    "softmax_focal_loss",
]
IMPLEMENTED_MODULES = [
    "CARAFE",
    "CARAFENaive",
    "CARAFEPack",
    "CornerPool",
    "DeformConv2d",
    "DeformConv2dPack",
    "DeformRoIPool",
    "DeformRoIPoolPack",
    "MaskedConv2d",
    "ModulatedDeformConv2d",
    "ModulatedDeformConv2dPack",
    "ModulatedDeformRoIPoolPack",
    "MultiScaleDeformableAttention",
    "RoIAlign",
    "RoIPool",
    "SAConv2d",
    "SigmoidFocalLoss",
    "SimpleRoIAlign",
    "SoftmaxFocalLoss",
]
IMPLEMENTED = IMPLEMENTED_FUNCTIONS + IMPLEMENTED_MODULES

# Names mmcv 2.2.0 exports from a submodule only, that visdet_ops exports at the top.
MMCV_SUBMODULE_NAMES = {
    "MultiScaleDeformableAttnFunction": "mmcv.ops.multi_scale_deform_attn",
    "multi_scale_deformable_attn_pytorch": "mmcv.ops.multi_scale_deform_attn",
    "BaseMergeCell": "mmcv.ops.merge_cells",
    "ConcatCell": "mmcv.ops.merge_cells",
    "GlobalPoolingCell": "mmcv.ops.merge_cells",
    "SumCell": "mmcv.ops.merge_cells",
}

# mmcv 2.2.0, mmcv/ops/__init__.py: the names it imports from each submodule whose op visdet_ops implements
# (`from .nms import batched_nms, nms, ...`), plus MMCV_SUBMODULE_NAMES: code that imports them from the
# submodule (`from mmcv.ops.nms import batched_nms`) moves by swapping mmcv.ops for visdet_ops.
MMCV_MODULE_PATHS = {
    "bbox": ["bbox_overlaps"],
    "carafe": ["CARAFE", "CARAFENaive", "CARAFEPack", "carafe", "carafe_naive"],
    "corner_pool": ["CornerPool"],
    "deform_conv": ["DeformConv2d", "DeformConv2dPack", "deform_conv2d"],
    "deform_roi_pool": ["DeformRoIPool", "DeformRoIPoolPack", "ModulatedDeformRoIPoolPack", "deform_roi_pool"],
    "focal_loss": ["SigmoidFocalLoss", "SoftmaxFocalLoss", "sigmoid_focal_loss", "softmax_focal_loss"],
    "masked_conv": ["MaskedConv2d", "masked_conv2d"],
    "merge_cells": ["BaseMergeCell", "ConcatCell", "GlobalPoolingCell", "SumCell"],
    "modulated_deform_conv": ["ModulatedDeformConv2d", "ModulatedDeformConv2dPack", "modulated_deform_conv2d"],
    "multi_scale_deform_attn": [
        "MultiScaleDeformableAttention",
        *(n for n, m in MMCV_SUBMODULE_NAMES.items() if m == "mmcv.ops.multi_scale_deform_attn"),
    ],
    "nms": ["batched_nms", "nms", "nms_match", "nms_quadri", "nms_rotated", "soft_nms"],
    "point_sample": ["SimpleRoIAlign", "point_sample", "rel_roi_point_to_rel_img_point"],
    "roi_align": ["RoIAlign", "roi_align"],
    "roi_pool": ["RoIPool", "roi_pool"],
    "saconv": ["SAConv2d"],
}

# mmcv 2.2.0's positional parameters (name, default as written in its source;
# None: no default): functions (for mmcv's `X = XFunction.apply`, XFunction.forward
# without ctx), module constructors (`Name`) and forwards (`Name.forward`).
MMCV_SIGNATURES = {
    "batched_nms": [("boxes", None), ("scores", None), ("idxs", None), ("nms_cfg", None), ("class_agnostic", "False")],
    "bbox_overlaps": [("bboxes1", None), ("bboxes2", None), ("mode", "'iou'"), ("aligned", "False"), ("offset", "0")],
    "carafe": [
        ("features", None),
        ("masks", None),
        ("kernel_size", None),
        ("group_size", None),
        ("scale_factor", None),
    ],
    "CARAFE": [("kernel_size", None), ("group_size", None), ("scale_factor", None)],
    "CARAFE.forward": [("features", None), ("masks", None)],
    "carafe_naive": [
        ("features", None),
        ("masks", None),
        ("kernel_size", None),
        ("group_size", None),
        ("scale_factor", None),
    ],
    "CARAFENaive": [("kernel_size", None), ("group_size", None), ("scale_factor", None)],
    "CARAFENaive.forward": [("features", None), ("masks", None)],
    "CARAFEPack": [
        ("channels", None),
        ("scale_factor", None),
        ("up_kernel", "5"),
        ("up_group", "1"),
        ("encoder_kernel", "3"),
        ("encoder_dilation", "1"),
        ("compressed_channels", "64"),
    ],
    "CARAFEPack.forward": [("x", None)],
    "CornerPool": [("mode", None)],
    "CornerPool.forward": [("x", None)],
    "deform_conv2d": [
        ("input", None),
        ("offset", None),
        ("weight", None),
        ("stride", "1"),
        ("padding", "0"),
        ("dilation", "1"),
        ("groups", "1"),
        ("deform_groups", "1"),
        ("bias", "False"),
        ("im2col_step", "32"),
    ],
    "deform_roi_pool": [
        ("input", None),
        ("rois", None),
        ("offset", None),
        ("output_size", None),
        ("spatial_scale", "1.0"),
        ("sampling_ratio", "0"),
        ("gamma", "0.1"),
    ],
    "DeformConv2d": [
        ("in_channels", None),
        ("out_channels", None),
        ("kernel_size", None),
        ("stride", "1"),
        ("padding", "0"),
        ("dilation", "1"),
        ("groups", "1"),
        ("deform_groups", "1"),
        ("bias", "False"),
        ("im2col_step", "32"),
    ],
    "DeformConv2d.forward": [("x", None), ("offset", None)],
    "DeformRoIPool": [("output_size", None), ("spatial_scale", "1.0"), ("sampling_ratio", "0"), ("gamma", "0.1")],
    "DeformRoIPool.forward": [("input", None), ("rois", None), ("offset", "None")],
    "DeformRoIPoolPack": [
        ("output_size", None),
        ("output_channels", None),
        ("deform_fc_channels", "1024"),
        ("spatial_scale", "1.0"),
        ("sampling_ratio", "0"),
        ("gamma", "0.1"),
    ],
    "DeformRoIPoolPack.forward": [("input", None), ("rois", None)],
    "masked_conv2d": [
        ("features", None),
        ("mask", None),
        ("weight", None),
        ("bias", None),
        ("padding", "0"),
        ("stride", "1"),
    ],
    "MaskedConv2d": [
        ("in_channels", None),
        ("out_channels", None),
        ("kernel_size", None),
        ("stride", "1"),
        ("padding", "0"),
        ("dilation", "1"),
        ("groups", "1"),
        ("bias", "True"),
    ],
    "MaskedConv2d.forward": [("input", None), ("mask", "None")],
    "modulated_deform_conv2d": [
        ("input", None),
        ("offset", None),
        ("mask", None),
        ("weight", None),
        ("bias", "None"),
        ("stride", "1"),
        ("padding", "0"),
        ("dilation", "1"),
        ("groups", "1"),
        ("deform_groups", "1"),
    ],
    "ModulatedDeformConv2d": [
        ("in_channels", None),
        ("out_channels", None),
        ("kernel_size", None),
        ("stride", "1"),
        ("padding", "0"),
        ("dilation", "1"),
        ("groups", "1"),
        ("deform_groups", "1"),
        ("bias", "True"),
    ],
    "ModulatedDeformConv2d.forward": [("x", None), ("offset", None), ("mask", None)],
    "ModulatedDeformRoIPoolPack": [
        ("output_size", None),
        ("output_channels", None),
        ("deform_fc_channels", "1024"),
        ("spatial_scale", "1.0"),
        ("sampling_ratio", "0"),
        ("gamma", "0.1"),
    ],
    "ModulatedDeformRoIPoolPack.forward": [("input", None), ("rois", None)],
    "MultiScaleDeformableAttention": [
        ("embed_dims", "256"),
        ("num_heads", "8"),
        ("num_levels", "4"),
        ("num_points", "4"),
        ("im2col_step", "64"),
        ("dropout", "0.1"),
        ("batch_first", "False"),
        ("norm_cfg", "None"),
        ("init_cfg", "None"),
        ("value_proj_ratio", "1.0"),
    ],
    "MultiScaleDeformableAttention.forward": [
        ("query", None),
        ("key", "None"),
        ("value", "None"),
        ("identity", "None"),
        ("query_pos", "None"),
        ("key_padding_mask", "None"),
        ("reference_points", "None"),
        ("spatial_shapes", "None"),
        ("level_start_index", "None"),
    ],
    "nms": [
        ("boxes", None),
        ("scores", None),
        ("iou_threshold", None),
        ("offset", "0"),
        ("score_threshold", "0"),
        ("max_num", "-1"),
    ],
    "nms_match": [("dets", None), ("iou_threshold", None)],
    "point_sample": [("input", None), ("points", None), ("align_corners", "False")],
    "rel_roi_point_to_rel_img_point": [
        ("rois", None),
        ("rel_roi_points", None),
        ("img", None),
        ("spatial_scale", "1.0"),
    ],
    "SimpleRoIAlign": [("output_size", None), ("spatial_scale", None), ("aligned", "True")],
    "SimpleRoIAlign.forward": [("features", None), ("rois", None)],
    "SAConv2d": [
        ("in_channels", None),
        ("out_channels", None),
        ("kernel_size", None),
        ("stride", "1"),
        ("padding", "0"),
        ("dilation", "1"),
        ("groups", "1"),
        ("bias", "True"),
        ("use_deform", "False"),
    ],
    "SAConv2d.forward": [("x", None)],
    "SumCell": [("in_channels", None), ("out_channels", None)],
    "ConcatCell": [("in_channels", None), ("out_channels", None)],
    "GlobalPoolingCell": [("in_channels", "None"), ("out_channels", "None")],
    "BaseMergeCell": [
        ("fused_channels", "256"),
        ("out_channels", "256"),
        ("with_out_conv", "True"),
        ("out_conv_cfg", "{'groups': 1, 'kernel_size': 3, 'padding': 1, 'bias': True}"),
        ("out_norm_cfg", "None"),
        ("out_conv_order", "('act', 'conv', 'norm')"),
        ("with_input1_conv", "False"),
        ("with_input2_conv", "False"),
        ("input_conv_cfg", "None"),
        ("input_norm_cfg", "None"),
        ("upsample_mode", "'nearest'"),
    ],
    "BaseMergeCell.forward": [("x1", None), ("x2", None), ("out_size", "None")],
    "roi_align": [
        ("input", None),
        ("rois", None),
        ("output_size", None),
        ("spatial_scale", "1.0"),
        ("sampling_ratio", "0"),
        ("pool_mode", "'avg'"),
        ("aligned", "True"),
    ],
    "roi_pool": [("input", None), ("rois", None), ("output_size", None), ("spatial_scale", "1.0")],
    "RoIAlign": [
        ("output_size", None),
        ("spatial_scale", "1.0"),
        ("sampling_ratio", "0"),
        ("pool_mode", "'avg'"),
        ("aligned", "True"),
        ("use_torchvision", "False"),
    ],
    "RoIAlign.forward": [("input", None), ("rois", None)],
    "RoIPool": [("output_size", None), ("spatial_scale", "1.0")],
    "RoIPool.forward": [("input", None), ("rois", None)],
    "sigmoid_focal_loss": [
        ("input", None),
        ("target", None),
        ("gamma", "2.0"),
        ("alpha", "0.25"),
        ("weight", "None"),
        ("reduction", "'mean'"),
    ],
    "SigmoidFocalLoss": [("gamma", None), ("alpha", None), ("weight", "None"), ("reduction", "'mean'")],
    "SigmoidFocalLoss.forward": [("input", None), ("target", None)],
    "soft_nms": [
        ("boxes", None),
        ("scores", None),
        ("iou_threshold", "0.3"),
        ("sigma", "0.5"),
        ("min_score", "0.001"),
        ("method", "'linear'"),
        ("offset", "0"),
    ],
    "softmax_focal_loss": [
        ("input", None),
        ("target", None),
        ("gamma", "2.0"),
        ("alpha", "0.25"),
        ("weight", "None"),
        ("reduction", "'mean'"),
    ],
    "SoftmaxFocalLoss": [("gamma", None), ("alpha", None), ("weight", "None"), ("reduction", "'mean'")],
    "SoftmaxFocalLoss.forward": [("input", None), ("target", None)],
    "DeformConv2dPack.forward": [("x", None)],
    "ModulatedDeformConv2dPack.forward": [("x", None)],
    # From mmcv.ops.multi_scale_deform_attn (not in mmcv.ops.__all__).
    "MultiScaleDeformableAttnFunction.apply": [
        ("value", None),
        ("value_spatial_shapes", None),
        ("value_level_start_index", None),
        ("sampling_locations", None),
        ("attention_weights", None),
        ("im2col_step", None),
    ],
    "multi_scale_deformable_attn_pytorch": [
        ("value", None),
        ("value_spatial_shapes", None),
        ("sampling_locations", None),
        ("attention_weights", None),
    ],
}

# Where visdet_ops' default is written differently from mmcv's on purpose.
SAME_MEANING_DEFAULTS = {
    # None means mmcv's False; it lets an explicit aligned=False be told apart
    # from the default when mmdet's is_aligned= is given too.
    ("bbox_overlaps", "aligned"): (None, False),
}


def _resolve(qualname: str):
    obj = visdet_ops
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def _positional(obj, qualname: str) -> list[inspect.Parameter]:
    target = obj.__init__ if inspect.isclass(obj) else obj
    params = list(inspect.signature(target).parameters.values())
    if inspect.isclass(obj) or qualname.endswith(".forward"):
        params = params[1:]  # self
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return [p for p in params if p.kind in kinds]


def test_lists_are_consistent_with_mmcv_and_the_package():
    assert len(set(MMCV_OPS_ALL)) == len(MMCV_OPS_ALL) == 124
    assert set(IMPLEMENTED) <= set(MMCV_OPS_ALL)
    assert len(set(IMPLEMENTED)) == len(IMPLEMENTED)
    # Every mmcv name the package exports is listed here (and so in the
    # migration page's table): the lists cannot fall behind a new op.
    assert set(visdet_ops.__all__) & set(MMCV_OPS_ALL) == set(IMPLEMENTED)
    # Every mmcv module path the package provides is listed here, and the other way round.
    assert set(visdet_ops.MMCV_MODULE_PATHS) == set(MMCV_MODULE_PATHS)


@pytest.mark.parametrize("name", IMPLEMENTED)
def test_every_implemented_mmcv_name_imports(name):
    module = __import__("visdet_ops", fromlist=[name])
    obj = getattr(module, name)
    assert name in visdet_ops.__all__
    if name in IMPLEMENTED_MODULES:
        assert inspect.isclass(obj) and issubclass(obj, torch.nn.Module), name
    else:
        assert callable(obj) and not inspect.isclass(obj), name


@pytest.mark.parametrize("name", sorted(MMCV_SUBMODULE_NAMES))
def test_mmcv_submodule_names_import_from_the_top(name):
    assert callable(getattr(visdet_ops, name)) and name in visdet_ops.__all__


@pytest.mark.parametrize("path", sorted(MMCV_MODULE_PATHS))
def test_mmcv_module_paths_hold_mmcvs_names(path):
    module = importlib.import_module(f"visdet_ops.{path}")
    want = sorted(set(MMCV_MODULE_PATHS[path]) & (set(IMPLEMENTED) | set(MMCV_SUBMODULE_NAMES)))
    # mmcv's names, and any extra is one of visdet_ops' own (multi_scale_deformable_attn, the registered op)
    assert want and set(want) <= set(module.__all__) <= set(visdet_ops.__all__)
    for name in module.__all__:
        assert getattr(module, name) is getattr(visdet_ops, name), f"visdet_ops.{path}.{name}"
    # Where a function has the submodule's name (nms, roi_align, ...), the package attribute stays the function.
    if path in visdet_ops.__all__:
        assert callable(getattr(visdet_ops, path)) and not inspect.ismodule(getattr(visdet_ops, path))


def test_mmcv_module_paths_in_a_fresh_process():
    """Imported first thing, in mmcv's spellings: the submodule imports work and leave the functions in place."""
    code = """
import inspect
from visdet_ops.nms import batched_nms, soft_nms
from visdet_ops.roi_align import RoIAlign, roi_align
import visdet_ops.carafe
import visdet_ops.deform_roi_pool as drp
import visdet_ops
for name in ("nms", "roi_align", "roi_pool", "carafe", "deform_roi_pool"):
    assert inspect.isfunction(getattr(visdet_ops, name)), (name, getattr(visdet_ops, name))
assert roi_align is visdet_ops.roi_align and inspect.isfunction(drp)
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]


# mmcv's *Pack classes take `(*args, **kwargs)` and hand them to their parent's constructor, as ours do: they have
# their parent's positional parameters (checked under the parent's name) and no list of their own.
INHERITED_CONSTRUCTORS = {"DeformConv2dPack": "DeformConv2d", "ModulatedDeformConv2dPack": "ModulatedDeformConv2d"}


def test_every_implemented_name_has_its_mmcv_signature_listed():
    """A new public name cannot skip the signature check: each implemented function, each module's constructor and
    forward has a list in MMCV_SIGNATURES (or, for a *Pack constructor, is its parent's, and passes through)."""
    need = set(IMPLEMENTED) | {f"{name}.forward" for name in IMPLEMENTED_MODULES}
    missing = sorted(need - set(MMCV_SIGNATURES) - set(INHERITED_CONSTRUCTORS))
    assert not missing, f"MMCV_SIGNATURES has no list for {missing}: add mmcv's positional parameters"
    for name, parent in INHERITED_CONSTRUCTORS.items():
        cls, base = getattr(visdet_ops, name), getattr(visdet_ops, parent)
        assert issubclass(cls, base), f"{name} must subclass {parent}"
        params = list(inspect.signature(cls.__init__).parameters.values())[1:]
        assert [p.kind for p in params] == [inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD], (
            f"{name}.__init__ must pass (*args, **kwargs) to {parent}, as mmcv's does"
        )


@pytest.mark.parametrize("qualname", sorted(MMCV_SIGNATURES))
def test_positional_parameters_and_defaults_match_mmcv(qualname):
    """mmcv's positional parameters, in mmcv's order and with mmcv's defaults,
    lead ours (visdet_ops may add parameters after them, or keyword-only ones)."""
    want = MMCV_SIGNATURES[qualname]
    got = _positional(_resolve(qualname), qualname)
    assert [p.name for p in got[: len(want)]] == [name for name, _ in want], qualname
    for param, (name, default_src) in zip(got, want, strict=False):
        if default_src is None:
            continue  # mmcv requires it; a default here only adds a way to call
        assert param.default is not inspect.Parameter.empty, f"{qualname}: {name} has no default (mmcv: {default_src})"
        mmcv_default = ast.literal_eval(default_src)
        special = SAME_MEANING_DEFAULTS.get((qualname, name))
        if special is not None:
            assert (param.default, mmcv_default) == special, qualname
            continue
        assert param.default == mmcv_default and type(param.default) is type(mmcv_default), (
            f"{qualname}: {name} defaults to {param.default!r}, mmcv to {default_src}"
        )


def test_migration_page_names_every_implemented_op():
    page = (Path(__file__).resolve().parents[1] / "docs" / "migration.md").read_text()
    missing = [name for name in IMPLEMENTED + sorted(MMCV_SUBMODULE_NAMES) if f"`{name}`" not in page]
    assert not missing, f"docs/migration.md does not name {missing}"


@pytest.mark.parametrize(
    "call",
    [
        lambda: visdet_ops.CornerPool("corner"),
        lambda: visdet_ops.DeformConv2d(1, 1, 2, bias=True),
        lambda: visdet_ops.DeformConv2d(3, 2, 3, groups=2),
        lambda: visdet_ops.DeformConv2d(3, 4, 3, groups=3),
        lambda: visdet_ops.ModulatedDeformConv2d(3, 2, 3, groups=2),
        lambda: visdet_ops.RoIAlign(7, 1.0, pool_mode="sum"),
        lambda: visdet_ops.sigmoid_focal_loss(torch.zeros(2, 3), torch.zeros(2, dtype=torch.long), reduction="all"),
        lambda: visdet_ops.bbox_overlaps(torch.zeros(1, 4), torch.zeros(1, 4), mode="dice"),
    ],
)
def test_argument_errors_are_also_assertion_errors(call):
    """mmcv checks these arguments with `assert`: our errors name the argument and are ValueErrors, and also
    AssertionErrors, so code written against mmcv (and mmcv's own tests) that catches AssertionError keeps working."""
    with pytest.raises(ValueError) as info:
        call()
    assert isinstance(info.value, AssertionError)
