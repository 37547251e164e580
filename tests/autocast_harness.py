"""Every public op and module under torch.autocast, fed what an AMP step produces: the harness. Each op's cases
live in its test file, tests/ops/test_<module>.py: `AUTOCAST_CASES` (name -> case(gen), each compared by
tests/test_autocast.py's test_op_under_autocast_matches_float32 through check_case) and `AUTOCAST_OPCHECKS` (op
name -> (op, args) for opcheck under autocast, run by its test_opcheck_under_autocast); tests/test_autocast.py
also fails when a public name of an op module has neither a case nor an entry in its test file's
`AUTOCAST_COVERED_OTHERWISE`.

Each case is a small model: float32 nn.Conv2d / nn.Linear layers make the op's 16-bit
inputs under autocast (features, offsets from `conv_offset`, logits, values), while
RoIs, boxes, targets, reference points and the op's own weights stay float32. The
model runs under torch.autocast(device, dtype), then in float32 with every Conv2d /
Linear output set to the value it had under autocast (gradients flow in float32):
the op sees the same values both times, so the comparison measures the op's
precision policy (docs/ops.md, "Precision under autocast"), not the rounding of
torch's own 16-bit layers. Compared: the output, the gradient of every such
activation (the op's inputs and what feeds them) and of every parameter.

Tolerances, with what was measured on the CPU (bfloat16 and float16 autocast, 5 seeds,
worst case) in brackets:
- output: max |amp - f32| <= OUT_TOL * max |f32|: float16 5e-3 [8e-4], bfloat16 2e-2
  [6e-3] (the output's own 16-bit rounding, 2^-11 / 2^-8, plus sums of rounded terms);
- activation gradients: ||amp - f32|| <= GRAD_TOL * ||f32||: float16 5e-3 [7e-4],
  bfloat16 3e-2 [5e-3];
- parameter gradients (sums over many positions, so more cancellation): float16
  1.5e-2 [2.3e-3], bfloat16 6e-2 [1.4e-2].
On CUDA the im2col convolutions (DCN, masked conv) keep the im2col columns and the GEMM operands
in the 16-bit dtype (float32 accumulation), one more rounding than the CPU's float32
path: their tolerances there are GEMM_FACTOR (4) times larger, as in their own 16-bit
tests. Discrete ops (the NMS family) must give the same indices as the float32 op on
the same values (the 16-bit scores upcast), and float32 outputs.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from .conftest import require_cuda

AMP = [
    pytest.param("cpu", torch.bfloat16, id="cpu-bf16"),
    pytest.param("cuda", torch.float16, marks=pytest.mark.cuda, id="cuda-f16"),
    pytest.param("cuda", torch.bfloat16, marks=pytest.mark.cuda, id="cuda-bf16"),
]
OUT_TOL = {torch.float16: 5e-3, torch.bfloat16: 2e-2}
GRAD_TOL = {torch.float16: 5e-3, torch.bfloat16: 3e-2}
PARAM_GRAD_TOL = {torch.float16: 1.5e-2, torch.bfloat16: 6e-2}
GEMM_FACTOR = 4.0

LOW = "low"  # the output has the autocast dtype (the op computes on the 16-bit input)
F32 = "f32"  # the output is float32 (the op promotes: losses, IoUs)


def device_for(name: str) -> torch.device:
    if name == "cuda":
        require_cuda()
    return torch.device(name)


def rois(gen: torch.Generator, k: int, batch: int, size: float) -> torch.Tensor:
    """float32 RoIs in image coordinates (a 1333-pixel-like range when size is large)."""
    x1 = torch.rand(k, generator=gen) * size * 0.7
    y1 = torch.rand(k, generator=gen) * size * 0.7
    w = torch.rand(k, generator=gen) * size * 0.3 + 4
    h = torch.rand(k, generator=gen) * size * 0.3 + 4
    b = torch.randint(0, batch, (k,), generator=gen).float()
    return torch.stack([b, x1, y1, x1 + w, y1 + h], 1)


def randomize(module: nn.Module, gen: torch.Generator, scale: float = 0.1) -> nn.Module:
    """Non-zero weights everywhere (the Pack modules zero-initialise their offset
    branches, which would make the offsets, and their gradients, trivially exact)."""
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * scale)
    return module


class Stem(nn.Module):
    """img [N, 3, H, W] -> features [N, C, H, W] through a float32 conv (16-bit under autocast)."""

    def __init__(self, channels: int, gen: torch.Generator):
        super().__init__()
        self.conv = randomize(nn.Conv2d(3, channels, 3, padding=1), gen, 0.3)

    def forward(self, img):
        return self.conv(img)


class Case(nn.Module):
    def __init__(self, body, inputs, out_kind, gemm=False, **modules):
        super().__init__()
        self.body = body
        self.inputs = inputs
        self.out_kind = out_kind
        self.gemm = gemm  # a 16-bit im2col + GEMM on CUDA (GEMM_FACTOR)
        self.parts = nn.ModuleDict(modules)

    def forward(self, *inputs):
        return self.body(self.parts, *inputs)


def img(gen, n=2, h=24, w=28):
    return torch.randn(n, 3, h, w, generator=gen)


class Producer(nn.Module):
    """A layer whose output the float32 run takes from the autocast run (like every
    Conv2d and Linear output, see run_case)."""


def run_case(case: Case, device: torch.device, dtype: torch.dtype, grad_seed: torch.Tensor, amp_values=None):
    """Forward and backward of a case. Returns the output, the gradients of every
    activation a Conv2d/Linear produced (the op's inputs and what feeds them), the
    parameters' gradients and the activations themselves.

    amp_values=None: the autocast run. Else the float32 run, in which each Conv2d/Linear
    output takes the value it had under autocast (gradients flow as in float32): the
    ops see exactly the 16-bit values an AMP step gives them, so what is compared is
    the ops' precision policy, not the rounding of torch's own convs and matmuls."""
    inputs = [t.to(device) for t in case.inputs]
    activations = []

    def keep(module, args, out):
        if amp_values is not None:
            out = out + (amp_values[len(activations)].to(out.dtype) - out).detach()
        out.retain_grad()
        activations.append(out)
        return out

    layers = [m for m in case.modules() if isinstance(m, (nn.Conv2d, nn.Linear, Producer))]
    hooks = [m.register_forward_hook(keep) for m in layers]
    try:
        with torch.autocast(device.type, dtype=dtype, enabled=amp_values is None):
            out = case(*inputs)
    finally:
        for h in hooks:
            h.remove()
    params = [p for p in case.parameters() if p.requires_grad]
    (out.float() * grad_seed.to(device)).sum().backward(inputs=params + activations)
    grads = [None if p.grad is None else p.grad.float().cpu() for p in params]
    act_grads = [None if a.grad is None else a.grad.float().cpu() for a in activations]
    for p in params:
        p.grad = None
    return out, act_grads, grads, [a.detach() for a in activations]


def _relative_max(got: torch.Tensor, want: torch.Tensor) -> float:
    scale = want.abs().max().item()
    return (got - want).abs().max().item() / max(scale, 1e-12)


def _relative_norm(got: torch.Tensor, want: torch.Tensor) -> float:
    return ((got - want).norm() / want.norm().clamp_min(1e-12)).item()


def check_case(name: str, make_case, device: torch.device, dtype: torch.dtype, rng: torch.Generator) -> None:
    """One case under torch.autocast(device, dtype) against float32 (the module docstring's comparison); raises
    AssertionError naming the case. Also what tests/sanitize_sweep.py runs under compute-sanitizer: every op's
    autocast path with the mixed dtypes AMP produces."""
    case = make_case(rng).to(device)
    with torch.no_grad():
        shape = case(*[t.to(device) for t in case.inputs]).shape
    grad_seed = torch.randn(shape, generator=rng)
    got, got_acts, got_params, amp_values = run_case(case, device, dtype, grad_seed)
    want, want_acts, want_params, _ = run_case(case, device, dtype, grad_seed, amp_values)

    factor = GEMM_FACTOR if case.gemm and device.type == "cuda" else 1.0
    out_tol, grad_tol, param_tol = (factor * t[dtype] for t in (OUT_TOL, GRAD_TOL, PARAM_GRAD_TOL))
    expected_dtype = dtype if case.out_kind == LOW else torch.float32
    assert got.dtype == expected_dtype, f"{name}: output {got.dtype}, policy says {expected_dtype}"
    assert want.dtype == torch.float32
    assert any(a.dtype == dtype for a in amp_values), f"{name}: no 16-bit activation under autocast"
    err = _relative_max(got.detach().float().cpu(), want.detach().cpu())
    assert err <= out_tol, f"{name}: output max error {err:.3g} x max|f32| > {out_tol}"

    for i, (g, w) in enumerate(zip(got_acts, want_acts, strict=True)):
        assert (g is None) == (w is None), f"{name}: activation {i} gradient present in one run only"
        if w is None or w.norm() == 0:
            continue
        rel = _relative_norm(g, w)
        assert rel <= grad_tol, f"{name}: activation {i} gradient error {rel:.3g} > {grad_tol}"
    named = [n for n, p in case.named_parameters() if p.requires_grad]
    checked = 0
    for pname, g, w in zip(named, got_params, want_params, strict=True):
        if w is None or w.norm() == 0:
            # Parameters the loss does not reach (DCNv1 has no bias).
            assert g is None or g.norm() == 0, f"{name}: {pname} has a gradient only under autocast"
            continue
        assert g is not None and g.dtype == torch.float32, f"{name}: {pname} lost its float32 gradient"
        assert torch.isfinite(g).all(), f"{name}: {pname} gradient not finite"
        rel = _relative_norm(g, w)
        assert rel <= param_tol, f"{name}: {pname} gradient error {rel:.3g} > {param_tol}"
        checked += 1
    assert checked > 0, f"{name}: no gradient was compared"


def check_opcheck(make, device: torch.device, dtype: torch.dtype, rng: torch.Generator) -> None:
    """torch.library.opcheck under torch.autocast(device, dtype) of the (op overload, args) that make(device, dtype,
    gen) gives: an AUTOCAST_OPCHECKS entry."""
    op, args = make(device, dtype, rng)
    with torch.autocast(device.type, dtype=dtype):
        torch.library.opcheck(op, args)


def features(device: torch.device, dtype: torch.dtype, gen: torch.Generator) -> torch.Tensor:
    """The [2, 4, 10, 12] 16-bit feature map (requires grad) of the opcheck cases of the ops that take one."""
    return torch.randn(2, 4, 10, 12, generator=gen).to(device, dtype).requires_grad_()
