"""Benchmarks of visdet_ops.ops.box_iou_rotated against mmcv's compiled kernels (the module mmcv_rotated_ext, built
from mmcv's sources on the benchmark machine: _helpers.mmcv_rotated_ext), each tagged for the reports that select it
(default: benchmarks/bench.py's GPU table; any other tag: the script benchmarks/<tag>.py). Not shipped in the wheel.
Where mmcv_rotated_ext is not installed the rows have no peer."""

from __future__ import annotations

from visdet_ops.ops.box_iou_rotated import box_iou_rotated

from . import Case, benchmark


def mmcv_box_iou_rotated(ext, bboxes1, bboxes2, mode="iou", aligned=False, clockwise=True):
    """mmcv 2.2.0's mmcv.ops.box_iou_rotated as mmcv writes it (its CUDA/CPU path), around `ext`, its compiled
    kernel: the zero-filled output, the angle flip, the contiguous copies, the kernel, the view."""
    mode_flag = {"iou": 0, "iof": 1}[mode]
    rows, cols = bboxes1.size(0), bboxes2.size(0)
    ious = bboxes1.new_zeros(rows) if aligned else bboxes1.new_zeros(rows * cols)
    if not clockwise:
        flip_mat = bboxes1.new_ones(bboxes1.shape[-1])
        flip_mat[-1] = -1
        bboxes1 = bboxes1 * flip_mat
        bboxes2 = bboxes2 * flip_mat
    bboxes1 = bboxes1.contiguous()
    bboxes2 = bboxes2.contiguous()
    ext.box_iou_rotated(bboxes1, bboxes2, ious, mode_flag, aligned)
    if not aligned:
        ious = ious.view(rows, cols)
    return ious


@benchmark("box_iou_rotated")
def _benchmark(bench) -> None:
    """IoU of clustered rotated boxes (an oriented detector's 1k and 2k proposals against as many, and aligned
    pairs), float32, against mmcv's CUDA kernel (the largest difference of the values in the note)."""
    from ._helpers import mmcv_rotated_ext, rotated_detection_boxes

    ext = mmcv_rotated_ext()

    def case(m: int, n: int, aligned: bool) -> None:
        a, _ = rotated_detection_boxes(m, bench.gen)
        b, _ = rotated_detection_boxes(n, bench.gen)
        row = {"op": "box_iou_rotated", "case": f"{m} x {n}{' aligned' if aligned else ''} iou, float32"}
        row["ours"] = bench.cuda_time_ms(lambda: box_iou_rotated(a, b, "iou", aligned))
        if ext is not None:
            ours, theirs = box_iou_rotated(a, b, "iou", aligned), mmcv_box_iou_rotated(ext, a, b, "iou", aligned)
            row["note"] = f"max |ours - mmcv| {(ours - theirs).abs().max().item():.1e}"
            row["peer"] = bench.cuda_time_ms(lambda: mmcv_box_iou_rotated(ext, a, b, "iou", aligned))
            row["peer_name"] = "mmcv box_iou_rotated (CUDA)"
        bench.results.append(row)

    for m, n, aligned in ((1000, 1000, False), (2000, 2000, False), (2000, 2000, True), (100000, 100000, True)):
        case(m, n, aligned)


@benchmark("box_iou_rotated", tags=("cpu",))
def _cpu(gen, tv):
    """IoU of clustered rotated boxes on the CPU, 500 x 500 and 1000 x 1000 (and 1000 aligned pairs), against mmcv's
    CPU kernel."""
    from ._helpers import mmcv_rotated_ext, rotated_detection_boxes

    ext = mmcv_rotated_ext()
    for m, aligned in ((500, False), (1000, False), (1000, True)):
        a, _ = rotated_detection_boxes(m, gen, device="cpu")
        b, _ = rotated_detection_boxes(m, gen, device="cpu")
        peer = None if ext is None else (lambda a=a, b=b, al=aligned: mmcv_box_iou_rotated(ext, a, b, "iou", al))
        yield Case(
            f"box_iou_rotated {m} x {m}{' aligned' if aligned else ''}",
            lambda a=a, b=b, al=aligned: box_iou_rotated(a, b, "iou", al),
            peer,
            peer_name="mmcv box_iou_rotated (CPU)",
        )


@benchmark("box_iou_rotated", tags=("host_instructions",))
def _host_instructions():
    """16 rotated boxes against themselves."""
    setup = "b = torch.rand(16, 5, generator=g) * 50\nb[:, 2:4] += 1"
    yield Case("box_iou_rotated", "visdet_ops.box_iou_rotated(b, b)", setup=setup)
