"""What the op modules' example cases share (see `example` in visdet_ops/ops/__init__.py).

An example case is fn(device, dtype, gen) -> None when the op's result on `device` in `dtype` matches its
float64 reference, else a message saying what is wrong. Inputs are rounded to `dtype` before the
reference sees them, so the comparison measures the kernel, not the rounding of the inputs."""

from __future__ import annotations

import torch

# Every dtype the example cases run in: the sanitizer sweep runs each case in each.
DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)

# RoIs the CUDA kernels must refuse on their own (no host check there): a batch index outside [0, 2)
# and a NaN coordinate. Their output must be NaN (memcheck proves nothing is read or written out of
# bounds for them). CPU RoIs are checked on the host, so the CPU raises instead.
INVALID_ROIS = torch.tensor([[5, 1, 1, 7, 6], [0, float("nan"), 1, 7, 6]], dtype=torch.float64)


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def invalid_rois_check(op: str, call, x, rois, want, want_grad, device, dtype, same) -> str | None:
    """On CUDA, where RoI values are not checked on the host: call(input, rois) with INVALID_ROIS after `rois`
    must give the valid rows unchanged (`want`), NaN rows for the invalid ones and the same input gradient
    (`want_grad`, float64 on the CPU) for a gradient of ones. Run after the op's valid call, so that its first
    call (what tests/memory_worker.py captures for opcheck and CUDA graphs) has finite outputs. `same(got, want)`
    compares float64 CPU tensors. Nothing to do on the CPU, which refuses such RoIs."""
    if device.type != "cuda":
        return None
    xb = x.to(device, dtype, copy=True).requires_grad_()
    out = call(xb, torch.cat([rois, INVALID_ROIS]).to(device, dtype))
    out.backward(torch.ones_like(out))
    synchronize(device)
    got, k = out.detach().cpu().double(), rois.size(0)
    if not same(got[:k], want) or not torch.isnan(got[k:]).all():
        return f"{op}: an invalid RoI did not give NaN (or changed the valid rows)"
    if not same(xb.grad.cpu().double(), want_grad):
        return f"{op}: an invalid RoI changed the gradient"
    return None


def boxes(n: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """n boxes (x1, y1, x2, y2) on a 1/8-pixel grid below 128 px (exact in float16) and n scores."""
    xy = (torch.rand(n, 2, generator=gen, dtype=torch.float64) * 96 * 8).round() / 8
    wh = (torch.rand(n, 2, generator=gen, dtype=torch.float64) * 30 * 8 + 4).round() / 8
    return torch.cat([xy, xy + wh], 1), torch.rand(n, generator=gen, dtype=torch.float64)


def rotated_boxes(n: int, gen: torch.Generator, span: float = 96.0) -> tuple[torch.Tensor, torch.Tensor]:
    """n rotated boxes (x, y, w, h, angle in radians) of 4-34 px sides, centres in [0, span), angles in
    [-pi, pi), and n scores."""
    xy = torch.rand(n, 2, generator=gen, dtype=torch.float64) * span
    wh = torch.rand(n, 2, generator=gen, dtype=torch.float64) * 30 + 4
    angle = (torch.rand(n, 1, generator=gen, dtype=torch.float64) * 2 - 1) * torch.pi
    return torch.cat([xy, wh, angle], 1), torch.rand(n, generator=gen, dtype=torch.float64)


def clear_threshold(ious: torch.Tensor, candidates, margin: float) -> float:
    """The first of `candidates` that no IoU of `ious` lies within `margin` of: an IoU that close to the
    threshold may fall on either side of it in a float32 kernel (not an error), so an NMS check against the
    float64 reference must avoid it."""
    finite = ious[torch.isfinite(ious)]
    for thr in candidates:
        if not bool(((finite - thr).abs() < margin).any()):
            return thr
    raise AssertionError(f"every candidate threshold has an IoU within {margin} of it")


def tolerance(dtype: torch.dtype) -> float:
    """Loose enough for bfloat16 outputs of order 1-10 (8 significant bits), far tighter than a wrong
    sample or bin; float32/float64 get 1e-4."""
    return 3e-2 if dtype in (torch.float16, torch.bfloat16) else 1e-4


def close(got: torch.Tensor, want: torch.Tensor, dtype: torch.dtype) -> bool:
    tol = {torch.float16: 2e-2, torch.bfloat16: 1e-1}.get(dtype, 1e-4)
    return torch.allclose(got.detach().cpu().double(), want.detach(), rtol=tol, atol=tol)


def forward_backward(fn, ref, inputs: list[torch.Tensor], dtype, gen, device) -> str | None:
    """Runs fn on `device` copies of inputs (in dtype) and ref on float64 copies (of the dtype-rounded
    values); compares outputs and input gradients."""
    rounded = [t.to(dtype).double() for t in inputs]
    ref_in = [t.clone().requires_grad_() for t in rounded]
    want = ref(*ref_in)
    grad = torch.randn(want.shape, generator=gen, dtype=torch.float64).to(dtype).double()
    want_grads = torch.autograd.grad(want, ref_in, grad)
    dev_in = [t.to(device, dtype, copy=True).requires_grad_() for t in rounded]
    got = fn(*dev_in)
    got_grads = torch.autograd.grad(got, dev_in, grad.to(device, dtype))
    synchronize(device)
    if not close(got, want, dtype):
        return "wrong forward"
    for i, (g, w) in enumerate(zip(got_grads, want_grads, strict=True)):
        if not close(g, w, dtype):
            return f"wrong gradient of input {i}"
    return None


def autocast_forward_backward(fn, ref, inputs, float32: set[int], constant: set[int], dtype, gen, device) -> str | None:
    """fn under torch.autocast(device, dtype), with the inputs in `float32` kept float32 (RoIs, sampling
    locations: what an AMP step gives the op) and the others 16-bit; ref on float64 copies of the same
    values. The output must come out in the autocast dtype and each gradient (of the inputs not in
    `constant`) in its input's dtype."""
    kinds = [torch.float32 if i in float32 else dtype for i in range(len(inputs))]
    rounded = [t.to(k).double() for t, k in zip(inputs, kinds, strict=True)]
    diff = [i not in constant for i in range(len(inputs))]
    ref_in = [t.clone().requires_grad_(d) for t, d in zip(rounded, diff, strict=True)]
    want = ref(*ref_in)
    grad = torch.randn(want.shape, generator=gen, dtype=torch.float64).to(dtype).double()
    want_grads = torch.autograd.grad(want, [t for t in ref_in if t.requires_grad], grad)
    dev_in = [t.to(device, k, copy=True).requires_grad_(d) for t, k, d in zip(rounded, kinds, diff, strict=True)]
    with torch.autocast(device.type, dtype):
        got = fn(*dev_in)
    if got.dtype != dtype:
        return f"output dtype {got.dtype} under {dtype} autocast"
    wanted = [t for t in dev_in if t.requires_grad]
    got_grads = torch.autograd.grad(got, wanted, grad.to(device, dtype))
    synchronize(device)
    if not close(got, want, dtype):
        return "wrong forward"
    for i, (t, g, w) in enumerate(zip(wanted, got_grads, want_grads, strict=True)):
        if g.dtype != t.dtype:
            return f"gradient {i} in {g.dtype}, its input is {t.dtype}"
        if not close(g, w, dtype):
            return f"wrong gradient of input {i}"
    return None


def rois_for(gen: torch.Generator, n: int, batch: int = 2) -> torch.Tensor:
    """n RoIs (batch_index, x1, y1, x2, y2) over `batch` images, on the grid of `boxes`."""
    b, _ = boxes(n, gen)
    return torch.cat([torch.randint(0, batch, (n, 1), generator=gen).double(), b], 1)


def exact_rois(gen: torch.Generator, n: int, batch: int = 2) -> torch.Tensor:
    """n RoIs (batch_index, x1, y1, x2, y2) with integer corners and sizes a multiple of 3 (the examples' 3x3
    output), for spatial_scale 1/4: bin edges and adaptive sample counts are then exact in float32 (the kernels'
    compute dtype under autocast) and float64 (the reference) alike. Otherwise a bin edge or ceil() that rounds
    differently picks another maximum or sample count: a test artefact, not an error."""
    corner = torch.randint(0, 30, (n, 2), generator=gen).double()
    size = 3 * torch.randint(1, 9, (n, 2), generator=gen).double()
    index = torch.randint(0, batch, (n, 1), generator=gen).double()
    return torch.cat([index, corner, corner + size], 1)
