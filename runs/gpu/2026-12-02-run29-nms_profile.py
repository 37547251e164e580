"""Run 29: where nms_rotated's time goes at 2000 boxes (the row nearest its 2x goal): torch.profiler's CUDA kernel
times and the host-side wall time per call, beside mmcv's. Run from anywhere; imports benchmarks/op_benchmarks."""

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import torch  # noqa: E402
from op_benchmarks._helpers import mmcv_rotated_ext, rotated_detection_boxes  # noqa: E402
from op_benchmarks.nms_rotated import mmcv_nms_rotated  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

import visdet_ops  # noqa: E402
from visdet_ops.ops.nms_rotated import nms_rotated  # noqa: E402

print("visdet_ops from", visdet_ops.__file__)
gen = torch.Generator().manual_seed(0)
boxes, scores = rotated_detection_boxes(2000, gen)
ext = mmcv_rotated_ext()
calls = {"ours": lambda: nms_rotated(boxes, scores, 0.5)}
if ext is not None:
    calls["mmcv"] = lambda: mmcv_nms_rotated(ext, boxes, scores, 0.5)
for name, fn in calls.items():
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(200):
        fn()
    torch.cuda.synchronize()
    print(f"{name}: {(time.perf_counter() - t) / 200 * 1e3:.3f} ms per call, back to back (host + device)")
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(50):
            fn()
        torch.cuda.synchronize()
    print(prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=12, max_name_column_width=60))
