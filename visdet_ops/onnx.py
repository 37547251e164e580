"""ONNX export of models that call visdet-ops, through torch.onnx.export's dynamo exporter:

    import visdet_ops.onnx

    torch.onnx.export(model, args, "model.onnx", dynamo=True,
                      custom_translation_table=visdet_ops.onnx.custom_translation_table)

`custom_translation_table` maps every registered visdet-ops op to its ONNX translation: standard ONNX ops where
they compute what ours do (nms, batched_nms -> NonMaxSuppression; roi_align -> RoiAlign; roi_pool -> MaxRoiPool;
deform_conv2d -> DeformConv), one node of the `visdet_ops` domain (CUSTOM_DOMAIN) with the op's arguments as
attributes for the others, and a clear error where a call has no exact form. What each op becomes and why:
docs/ops.md, "ONNX export".

Importing this module needs torch only. The table is built on first use and needs onnxscript and onnx (which the
exporter itself needs) and torch >= MIN_TORCH; without them it raises an ImportError that says what to install.
"""

from __future__ import annotations

# The oldest torch whose dynamo exporter exports what tests/test_onnx.py exports (2.8.0, 2.9.1, 2.13.0 and 2.14.1
# were run; 2.7.1 fails: its exporter has no translation of torch.sym_min, which nms' max_num cut traces to). From
# 2.9 the dynamo exporter is the default and its default opset (20) has DeformConv; on 2.8 pass dynamo=True, and
# opset_version=20 for DCN (docs/ops.md, "ONNX export").
MIN_TORCH = (2, 8)
# The domain of the nodes of ops that no standard ONNX op expresses (the ops' torch.library namespace, which
# _onnx_translations takes from torch); its version is 1.
CUSTOM_DOMAIN = "visdet_ops"

__all__ = ["CUSTOM_DOMAIN", "MIN_TORCH", "custom_translation_table"]  # noqa: F822 - the table: __getattr__ below


def __getattr__(name: str):
    # PEP 562: the table is built (onnxscript imported) only when someone asks for it.
    if name == "custom_translation_table":
        table = _build_table()
        globals()[name] = table
        return table
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _build_table() -> dict:
    import torch

    from ._build_rules import parse_release

    found = parse_release(torch.__version__)
    if found.major_minor < MIN_TORCH:
        raise ImportError(
            f"visdet_ops.onnx: ONNX export needs torch >= {MIN_TORCH[0]}.{MIN_TORCH[1]} (its dynamo exporter, "
            f"torch.onnx.export(..., dynamo=True, custom_translation_table=...)), this is torch {torch.__version__}"
        )
    try:
        import onnx  # noqa: F401
        import onnxscript  # noqa: F401
    except ImportError as exc:
        raise ImportError(
            f"visdet_ops.onnx.custom_translation_table needs onnxscript and onnx, as torch.onnx.export(dynamo=True) "
            f"does ({exc}): pip install onnxscript onnx (and onnxruntime to run the exported model)"
        ) from exc
    from . import _onnx_translations

    return _onnx_translations.build_table()
