"""mmcv 2.2.0's public names and signatures: the one snapshot of external facts the tests compare the package with.

Literals written from mmcv's source (open-mmlab/mmcv at tag v2.2.0: mmcv/ops/__init__.py's `__all__` and imports,
and each op's def / __init__ / forward / Function.forward), so nothing here needs mmcv. What is ours (which of these
names visdet_ops implements, its module paths) is derived from the package's exports, in tests/test_mmcv_names.py,
which also generates docs/migration.md's names table from both:

    python -m tests.mmcv_snapshot --write    # rewrite the generated block of docs/migration.md
"""

from __future__ import annotations

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
MMCV_SUBMODULES = {
    "bbox": ["bbox_overlaps"],
    "box_iou_rotated": ["box_iou_rotated"],
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
    "roi_align_rotated": ["RoIAlignRotated", "roi_align_rotated"],
    "roi_pool": ["RoIPool", "roi_pool"],
    "saconv": ["SAConv2d"],
}


def _parameters(signatures: dict[str, str]) -> dict[str, list[tuple[str, str | None]]]:
    """Each signature as written in mmcv's source (positional parameters, `name` or `name=default`) -> its
    [(name, default as written, or None)], read by Python's own parser."""
    import ast

    lists = {}
    for name, signature in signatures.items():
        args = ast.parse(f"def f({signature}): pass").body[0].args
        if args.vararg or args.kwarg or args.kwonlyargs or args.posonlyargs:
            raise ValueError(f"{name}: positional parameters only, got {signature!r}")
        defaults = [None] * (len(args.args) - len(args.defaults)) + [ast.unparse(d) for d in args.defaults]
        lists[name] = [(a.arg, d) for a, d in zip(args.args, defaults, strict=True)]
    return lists


# mmcv 2.2.0's positional parameters, as written in its source: functions (for mmcv's `X = XFunction.apply`,
# XFunction.forward without ctx), module constructors (`Name`) and forwards (`Name.forward`).
MMCV_SIGNATURES = _parameters({
    "batched_nms": "boxes, scores, idxs, nms_cfg, class_agnostic=False",
    "bbox_overlaps": "bboxes1, bboxes2, mode='iou', aligned=False, offset=0",
    "box_iou_rotated": "bboxes1, bboxes2, mode='iou', aligned=False, clockwise=True",
    "carafe": "features, masks, kernel_size, group_size, scale_factor",
    "CARAFE": "kernel_size, group_size, scale_factor",
    "CARAFE.forward": "features, masks",
    "carafe_naive": "features, masks, kernel_size, group_size, scale_factor",
    "CARAFENaive": "kernel_size, group_size, scale_factor",
    "CARAFENaive.forward": "features, masks",
    "CARAFEPack": (
        "channels, scale_factor, up_kernel=5, up_group=1, encoder_kernel=3, encoder_dilation=1, "
        "compressed_channels=64"
    ),
    "CARAFEPack.forward": "x",
    "CornerPool": "mode",
    "CornerPool.forward": "x",
    "deform_conv2d": (
        "input, offset, weight, stride=1, padding=0, dilation=1, groups=1, deform_groups=1, bias=False, "
        "im2col_step=32"
    ),
    "deform_roi_pool": "input, rois, offset, output_size, spatial_scale=1.0, sampling_ratio=0, gamma=0.1",
    "DeformConv2d": (
        "in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1, deform_groups=1, "
        "bias=False, im2col_step=32"
    ),
    "DeformConv2d.forward": "x, offset",
    "DeformRoIPool": "output_size, spatial_scale=1.0, sampling_ratio=0, gamma=0.1",
    "DeformRoIPool.forward": "input, rois, offset=None",
    "DeformRoIPoolPack": (
        "output_size, output_channels, deform_fc_channels=1024, spatial_scale=1.0, sampling_ratio=0, gamma=0.1"
    ),
    "DeformRoIPoolPack.forward": "input, rois",
    "masked_conv2d": "features, mask, weight, bias, padding=0, stride=1",
    "MaskedConv2d": "in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1, bias=True",
    "MaskedConv2d.forward": "input, mask=None",
    "modulated_deform_conv2d": (
        "input, offset, mask, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, deform_groups=1"
    ),
    "ModulatedDeformConv2d": (
        "in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1, deform_groups=1, "
        "bias=True"
    ),
    "ModulatedDeformConv2d.forward": "x, offset, mask",
    "ModulatedDeformRoIPoolPack": (
        "output_size, output_channels, deform_fc_channels=1024, spatial_scale=1.0, sampling_ratio=0, gamma=0.1"
    ),
    "ModulatedDeformRoIPoolPack.forward": "input, rois",
    "MultiScaleDeformableAttention": (
        "embed_dims=256, num_heads=8, num_levels=4, num_points=4, im2col_step=64, dropout=0.1, batch_first=False, "
        "norm_cfg=None, init_cfg=None, value_proj_ratio=1.0"
    ),
    "MultiScaleDeformableAttention.forward": (
        "query, key=None, value=None, identity=None, query_pos=None, key_padding_mask=None, reference_points=None, "
        "spatial_shapes=None, level_start_index=None"
    ),
    "nms": "boxes, scores, iou_threshold, offset=0, score_threshold=0, max_num=-1",
    "nms_match": "dets, iou_threshold",
    "nms_rotated": "dets, scores, iou_threshold, labels=None, clockwise=True",
    "point_sample": "input, points, align_corners=False",
    "rel_roi_point_to_rel_img_point": "rois, rel_roi_points, img, spatial_scale=1.0",
    "SimpleRoIAlign": "output_size, spatial_scale, aligned=True",
    "SimpleRoIAlign.forward": "features, rois",
    "SAConv2d": (
        "in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1, bias=True, "
        "use_deform=False"
    ),
    "SAConv2d.forward": "x",
    "SumCell": "in_channels, out_channels",
    "ConcatCell": "in_channels, out_channels",
    "GlobalPoolingCell": "in_channels=None, out_channels=None",
    "BaseMergeCell": (
        "fused_channels=256, out_channels=256, with_out_conv=True, out_conv_cfg={'groups': 1, 'kernel_size': 3, "
        "'padding': 1, 'bias': True}, out_norm_cfg=None, out_conv_order=('act', 'conv', 'norm'), "
        "with_input1_conv=False, with_input2_conv=False, input_conv_cfg=None, input_norm_cfg=None, "
        "upsample_mode='nearest'"
    ),
    "BaseMergeCell.forward": "x1, x2, out_size=None",
    "roi_align": "input, rois, output_size, spatial_scale=1.0, sampling_ratio=0, pool_mode='avg', aligned=True",
    "roi_pool": "input, rois, output_size, spatial_scale=1.0",
    "RoIAlign": (
        "output_size, spatial_scale=1.0, sampling_ratio=0, pool_mode='avg', aligned=True, use_torchvision=False"
    ),
    "RoIAlign.forward": "input, rois",
    "roi_align_rotated": "input, rois, output_size, spatial_scale, sampling_ratio=0, aligned=True, clockwise=False",
    "RoIAlignRotated": "output_size, spatial_scale, sampling_ratio=0, aligned=True, clockwise=False",
    "RoIAlignRotated.forward": "input, rois",
    "RoIPool": "output_size, spatial_scale=1.0",
    "RoIPool.forward": "input, rois",
    "sigmoid_focal_loss": "input, target, gamma=2.0, alpha=0.25, weight=None, reduction='mean'",
    "SigmoidFocalLoss": "gamma, alpha, weight=None, reduction='mean'",
    "SigmoidFocalLoss.forward": "input, target",
    "soft_nms": "boxes, scores, iou_threshold=0.3, sigma=0.5, min_score=0.001, method='linear', offset=0",
    "softmax_focal_loss": "input, target, gamma=2.0, alpha=0.25, weight=None, reduction='mean'",
    "SoftmaxFocalLoss": "gamma, alpha, weight=None, reduction='mean'",
    "SoftmaxFocalLoss.forward": "input, target",
    "DeformConv2dPack.forward": "x",
    "ModulatedDeformConv2dPack.forward": "x",
    "MultiScaleDeformableAttnFunction.apply": (
        "value, value_spatial_shapes, value_level_start_index, sampling_locations, attention_weights, im2col_step"
    ),
    "multi_scale_deformable_attn_pytorch": "value, value_spatial_shapes, sampling_locations, attention_weights",
})  # fmt: skip

# mmcv's *Pack classes take `(*args, **kwargs)` and hand them to their parent's constructor, as ours do: they have
# their parent's positional parameters (checked under the parent's name) and no list of their own.
INHERITED_CONSTRUCTORS = {"DeformConv2dPack": "DeformConv2d", "ModulatedDeformConv2dPack": "ModulatedDeformConv2d"}


# ----------------------------------------------------------------- derived from the snapshot and the package


def _kind(obj) -> str:
    import inspect

    import torch

    if inspect.isclass(obj):
        return "module" if issubclass(obj, torch.nn.Module) else "`.apply` only"
    return "function"


def implemented() -> tuple[list[str], list[str]]:
    """The names of mmcv.ops.__all__ that visdet_ops exports: (functions, nn.Module classes), each in mmcv's order."""
    import visdet_ops

    names = [n for n in MMCV_OPS_ALL if n in visdet_ops.__all__]
    modules = [n for n in names if _kind(getattr(visdet_ops, n)) == "module"]
    return [n for n in names if n not in modules], modules


def migration_names_block() -> str:
    """docs/migration.md's names section between its GENERATED markers: the counts and a row per op module of
    visdet_ops/ops/ and per module of visdet_ops/composite/ with the mmcv names it implements, their kinds and what
    visdet_ops adds."""
    import importlib

    from .conftest import composite_modules, op_modules

    functions, modules = implemented()
    done = len(functions) + len(modules)
    extra = sorted(MMCV_SUBMODULE_NAMES)
    submodules = sorted({MMCV_SUBMODULE_NAMES[n] for n in extra})
    lines = [
        BEGIN,
        f"{done} of the {len(MMCV_OPS_ALL)} names in mmcv 2.2.0's `mmcv.ops.__all__`, plus {len(extra)} that mmcv "
        f"exports from {', '.join(f'`{m}`' for m in submodules)} only. Each row: one op module of visdet-ops, what it "
        'computes and where it differs from mmcv in its section of [ops.md](ops.md); "adds": its public names '
        "that mmcv does not have.",
        "",
        "| mmcv names | kind | section | adds |",
        "|---|---|---|---|",
    ]
    order = {n: i for i, n in enumerate([*MMCV_OPS_ALL, *extra])}
    homes = sorted([*((f, "ops") for f in op_modules()), *((m, "composite") for m in composite_modules())])
    for family, home in homes:
        module = importlib.import_module(f"visdet_ops.{home}.{family}")
        ours = [n for n in module.__all__ if n in order]
        if not ours:
            continue
        ours.sort(key=order.__getitem__)
        kinds = []
        for n in ours:
            kind = _kind(getattr(module, n)) + (f" (mmcv: `{MMCV_SUBMODULE_NAMES[n]}` only)" if n in extra else "")
            if kind not in kinds:
                kinds.append(kind)
        adds = sorted(n for n in module.__all__ if n not in order)
        lines.append(
            f"| {', '.join(f'`{n}`' for n in ours)} | {', '.join(kinds)} | [{family}](ops.md#{family}) | "
            f"{', '.join(f'`{n}`' for n in adds)} |"
        )
    lines += ["", f"Not provided: the other {len(MMCV_OPS_ALL) - done} names.", END]
    return "\n".join(lines) + "\n"


BEGIN = "<!-- generated by `python -m tests.mmcv_snapshot --write`; tests/test_mmcv_names.py checks it -->"
END = "<!-- end of the generated names table -->"


if __name__ == "__main__":
    import sys
    from pathlib import Path

    page = Path(__file__).resolve().parent.parent / "docs" / "migration.md"
    text = page.read_text()
    if "--write" not in sys.argv[1:]:
        sys.stdout.write(migration_names_block())
    else:
        head, _, rest = text.partition(BEGIN)
        _, _, tail = rest.partition(END + "\n")
        page.write_text(head + migration_names_block() + tail)
