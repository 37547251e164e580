"""Experiment (branch rar-exp, not for main): roi_align_rotated CUDA forward variants (VISDET_RAR_MODE) against
mmcv's kernel in one process, same inputs as benchmarks/op_benchmarks/roi_align_rotated.py."""

import os
import sys

sys.path.insert(0, os.getcwd())
import torch
from op_benchmarks.roi_align_rotated import _LEVELS, _mmcv_roi_align_rotated, rotated_rois

from benchmarks import bench
from visdet_ops.ops.roi_align_rotated import roi_align_rotated

MODES = [0, 1, 2, 3, 4, 5, 6]
mmcv = _mmcv_roi_align_rotated()
gen = torch.Generator().manual_seed(0)
rows = []


def t(fn):
    return bench.cuda_time_ms(fn, warmup=10, repeat=60)["median_ms"]


for stride, side in _LEVELS:
    feats = torch.randn(2, 256, side, side, generator=gen).cuda()
    for k in (512, 2000):
        rois = rotated_rois(k, 2, side, stride, gen).cuda()
        for sr in (0, 2):
            for dt in (torch.float32, torch.float16) if k == 2000 else (torch.float32,):
                f, r = feats.to(dt), rois.to(dt)
                scale = 1.0 / stride
                ref = None
                res = {}
                for _rep in range(2):  # two alternating rounds
                    for m in MODES:
                        os.environ["VISDET_RAR_MODE"] = str(m)
                        out = roi_align_rotated(f, r, 7, scale, sr, True, False)
                        if ref is None:
                            ref = out.float()
                        else:
                            err = (out.float() - ref).abs().max().item()
                            assert err < (1e-2 if dt == torch.float16 else 1e-4), (m, err)
                        res.setdefault(m, []).append(
                            t(lambda f=f, r=r, scale=scale, sr=sr: roi_align_rotated(f, r, 7, scale, sr, True, False))
                        )
                    if mmcv is not None:
                        res.setdefault("mmcv", []).append(
                            t(lambda f=f, r=r, scale=scale, sr=sr: mmcv(f, r, 7, scale, sr, True, False))
                        )
                med = {m: min(v) for m, v in res.items()}
                name = f"s{stride} k{k} sr{sr} {str(dt)[6:]}"
                rows.append((name, med))
                print(name, " ".join(f"{m}:{v:.3f}" for m, v in med.items()), flush=True)
print()
hdr = "| case | " + " | ".join(f"mode {m}" for m in MODES) + " | mmcv |"
print(hdr)
print("|---" * (len(MODES) + 2) + "|")
for name, med in rows:
    p = med.get("mmcv")
    cells = [f"{med[m]:.3f} ({p / med[m]:.2f}x)" if p else f"{med[m]:.3f}" for m in MODES]
    print(f"| {name} | " + " | ".join(cells) + f" | {p:.3f} |" if p else f"| {name} | " + " | ".join(cells) + " | - |")
