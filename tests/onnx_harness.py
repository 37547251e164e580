"""ONNX export's test harness (visdet_ops.onnx, docs/ops.md "ONNX export"): export a model through
torch.onnx.export(dynamo=True, custom_translation_table=...), run it in onnxruntime on the CPU. Each family's cases
live in its test file, tests/ops/test_<module>.py: `ONNX_CUSTOM_CASES` (registered op -> rng -> (public call, inputs,
the visdet_ops-domain node's attributes), run by tests/test_onnx.py's test_custom_nodes) and, for an op with a
standard ONNX translation (or none at all), its own `test_onnx_*` tests named in `ONNX_COVERED_OTHERWISE`.

The `onnx_table` fixture (tests/conftest.py) skips where the exporter's packages or a new enough torch are missing."""

from __future__ import annotations

import pytest
import torch

import visdet_ops
import visdet_ops.onnx
from visdet_ops._build_rules import parse_release

TORCH_SUPPORTED = parse_release(torch.__version__).major_minor >= visdet_ops.onnx.MIN_TORCH
MIN_TORCH_TEXT = ".".join(map(str, visdet_ops.onnx.MIN_TORCH))

needs_exporter = pytest.mark.skipif(
    not TORCH_SUPPORTED,
    reason=f"ONNX export needs torch >= {MIN_TORCH_TEXT}, this is {torch.__version__} "
    "(test_older_torch_is_refused checks the error there)",
)


def table():
    """The translation table, or a skip (the body of conftest's onnx_table fixture)."""
    if not TORCH_SUPPORTED:
        pytest.skip(f"ONNX export needs torch >= {MIN_TORCH_TEXT}")
    for name in ("onnx", "onnxscript", "onnxruntime"):
        pytest.importorskip(name)
    return visdet_ops.onnx.custom_translation_table


def export(table, model: torch.nn.Module, args: tuple, dynamic_shapes=None, **options):
    """The exported ModelProto (torch.onnx.export's dynamo exporter, default opset unless `options` say)."""
    program = torch.onnx.export(
        model.eval(),
        args,
        dynamo=True,
        custom_translation_table=table,
        dynamic_shapes=dynamic_shapes,
        verbose=False,
        **options,
    )
    return program.model_proto


def run(model_proto, *inputs: torch.Tensor) -> list[torch.Tensor]:
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 2
    session = onnxruntime.InferenceSession(model_proto.SerializeToString(), options, providers=["CPUExecutionProvider"])
    feeds = {arg.name: t.numpy() for arg, t in zip(session.get_inputs(), inputs, strict=True)}
    return [torch.from_numpy(out) for out in session.run(None, feeds)]


def op_types(model_proto) -> set[str]:
    return {f"{n.domain}::{n.op_type}" if n.domain else n.op_type for n in model_proto.graph.node}


def grid_boxes(n: int, rng: torch.Generator) -> torch.Tensor:
    """Boxes on the integer grid, at most 60 px a side, so that every IoU is a ratio of exact float32 integers:
    onnxruntime's IoU > t and the kernels' inter > t * union then decide every pair alike at a dyadic threshold."""
    corner = torch.randint(0, 100, (n, 2), generator=rng)
    size = torch.randint(1, 60, (n, 2), generator=rng)
    return torch.cat([corner, corner + size], 1).float()


class CallModel(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *args):
        return self.fn(*args)


def conversion_message(table, model, args) -> str:
    """The message of the error an export that has no exact form raises."""
    with pytest.raises(Exception) as info:  # noqa: PT011 - torch's ConversionError, or torch.export's error
        export(table, model, args)
    return str(info.value)
