import sys, torch, visdet_ops
c, s = int(sys.argv[1]), int(sys.argv[2])
g = torch.Generator().manual_seed(0)
n = 8
x = torch.randn(n, c, s, s, generator=g).cuda().requires_grad_()
w = (torch.randn(c, c, 3, 3, generator=g) / (c * 9) ** 0.5).cuda().requires_grad_()
off = (torch.randn(n, 18, s, s, generator=g) * 2).cuda().requires_grad_()
m = torch.rand(n, 9, s, s, generator=g).cuda().requires_grad_()
gr = torch.randn(n, c, s, s, generator=g).cuda()
for _ in range(2):
    visdet_ops.modulated_deform_conv2d(x, off, m, w, None, 1, 1, 1, 1, 1).backward(gr)
torch.cuda.synchronize()
