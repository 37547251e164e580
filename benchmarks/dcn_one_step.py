"""Two DCNv2 forward + backward steps at the shape of bench.py, and nothing else:
a target for Nsight Compute (the second step's kernels are the warm ones).

  ncu --kernel-name regex:col2im --launch-skip 1 --launch-count 1 \\
      python3 benchmarks/dcn_one_step.py CHANNELS SIZE
"""

from __future__ import annotations

import sys

import torch

import visdet_ops

channels, size = int(sys.argv[1]), int(sys.argv[2])
gen = torch.Generator().manual_seed(0)
n = 8
x = torch.randn(n, channels, size, size, generator=gen).cuda().requires_grad_()
weight = (torch.randn(channels, channels, 3, 3, generator=gen) / (channels * 9) ** 0.5).cuda().requires_grad_()
offset = (torch.randn(n, 18, size, size, generator=gen) * 2).cuda().requires_grad_()
mask = torch.rand(n, 9, size, size, generator=gen).cuda().requires_grad_()
grad = torch.randn(n, channels, size, size, generator=gen).cuda()
for _ in range(2):
    visdet_ops.modulated_deform_conv2d(x, offset, mask, weight, None, 1, 1, 1, 1, 1).backward(grad)
torch.cuda.synchronize()
