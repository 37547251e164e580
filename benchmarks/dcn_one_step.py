"""Two DCNv2 forward + backward steps at the shape of bench.py, and nothing else:
a target for Nsight Compute (the second step's kernels are the warm ones).

  ncu --kernel-name regex:col2im --launch-skip 1 --launch-count 1 \\
      python3 benchmarks/dcn_one_step.py CHANNELS SIZE
"""

from __future__ import annotations

import sys

import torch
from bench import dcn_case  # benchmarks/ is sys.path[0] when run as a script

import visdet_ops

channels, size = int(sys.argv[1]), int(sys.argv[2])
*leaves, grad = dcn_case(channels, size, torch.Generator().manual_seed(0))
x, offset, mask, weight, _ = (t.requires_grad_() for t in leaves)
for _ in range(2):
    visdet_ops.modulated_deform_conv2d(x, offset, mask, weight, None, 1, 1, 1, 1, 1).backward(grad)
torch.cuda.synchronize()
