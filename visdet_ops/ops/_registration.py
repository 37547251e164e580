"""What an op registers from Python because the LibTorch stable ABI has no C++ API for it: autocast kernels, the
determinism alert, the refusal of double backward, and the autograd formula (`register_autograd`: through
torch.library.register_autograd, plus the cheap eager entry point the public functions call).

Every op uses these in BOTH builds, classic and stable (docs/stable-abi.md, "What moved to Python, for both builds"),
so that each op has one source of this logic. The rules copy what the classic build's C++ did before the port
(at::autocast::cached_cast, at::globalContext().alertNotDeterministic), so behaviour does not depend on the build."""

from __future__ import annotations

import warnings
from collections.abc import Callable

import torch

# Keeps the Python autocast registrations alive (a Library's registrations last as long as the object).
_AUTOCAST_LIBRARY: torch.library.Library | None = None

# op name -> the eager entry point register_autograd returned (tests/test_op_registry.py checks every op with an
# autograd formula is here).
EAGER_ENTRY_POINTS: dict[str, Callable] = {}

_PLAIN_TENSOR_TYPES = (torch.Tensor, torch.nn.Parameter)

# The autocast dispatch keys and the device type each one serves (the C++ kernels' (kKey, kDevice) pairs).
AUTOCAST_KEYS = {"AutocastCPU": "cpu", "AutocastCUDA": "cuda"}


def register_autocast(op_name: str, make_kernel: Callable[[str], Callable]) -> None:
    """Registers make_kernel(device_type) for visdet_ops::<op_name> under each autocast key.

    The kernel runs with that autocast key excluded (as the C++ ExcludeDispatchKeyGuard did), so the op it calls
    again goes on to autograd and the device kernel; torch.compile and opcheck see it like any dispatcher kernel."""
    global _AUTOCAST_LIBRARY
    if _AUTOCAST_LIBRARY is None:
        _AUTOCAST_LIBRARY = torch.library.Library("visdet_ops", "IMPL")  # noqa: TOR901
    for key, device_type in AUTOCAST_KEYS.items():
        kernel = make_kernel(device_type)
        excluded = torch._C.DispatchKeySet(getattr(torch._C.DispatchKey, key))

        def autocast_kernel(*args, _kernel=kernel, _excluded=excluded):
            with torch._C._ExcludeDispatchKeyGuard(_excluded):
                return _kernel(*args)

        _AUTOCAST_LIBRARY.impl(op_name, autocast_kernel, key)


def register_autograd(
    op_name: str, backward: Callable, setup_context: Callable, backward_uses_autograd: bool = False
) -> Callable:
    """Registers backward/setup_context as the autograd formula of visdet_ops::<op_name>
    (torch.library.register_autograd: what torch.compile, opcheck and direct torch.ops calls use), makes the op's
    private backward op (visdet_ops::_<op_name>_backward, where the op has one) refuse double backward, and
    returns the op's eager entry point, which the public functions and modules call.

    The entry point runs the same two functions through a plain torch.autograd.Function when eager autograd is
    all there is to do (grad mode on, a plain tensor argument that requires grad, no autocast region, no
    torch.compile tracing, no functorch transform), calls the op below autograd where no gradient is recorded
    (grad mode off, or no argument requires grad), and calls the registered op everywhere else. Why: the
    registered formula costs tens of microseconds of Python per call (torch's wrapper re-binds the schema's
    arguments on every call), which a detector step pays per op call and a small op pays as a multiple of its
    kernel time (docs/stable-abi.md, "Known cost"). Under autocast the registered op must run, so that the
    formula sees the arguments as the autocast kernel cast them."""
    op = getattr(torch.ops.visdet_ops, op_name)
    torch.library.register_autograd(f"visdet_ops::{op_name}", backward, setup_context=setup_context)
    if hasattr(torch.ops.visdet_ops, f"_{op_name}_backward"):
        torch.library.register_autograd(f"visdet_ops::_{op_name}_backward", refuse_double_backward(op_name))

    def forward(ctx, *args):
        with torch._C._AutoDispatchBelowAutograd():
            output = op(*args)
        setup_context(ctx, args, output)
        return output

    def eager_backward(ctx, *grads):
        # Grad mode is off in a backward unless create_graph: then nothing records a graph, so the backward op's own
        # autograd kernel (refuse_double_backward, a Python wrapper of torch.library's) is skipped like the forward's.
        # Not for a backward that differentiates something itself (backward_uses_autograd: bbox_overlaps').
        if backward_uses_autograd or torch.is_grad_enabled():
            return backward(ctx, *grads)
        with torch._C._AutoDispatchBelowAutograd():
            return backward(ctx, *grads)

    eager = type(
        f"{op_name}_eager",
        (torch.autograd.Function,),
        {"forward": staticmethod(forward), "backward": staticmethod(eager_backward)},
    )

    def call(*args):
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        if (
            # Plain tensors and parameters only: a tensor subclass (FakeTensor, DTensor, ...) takes the registered
            # path, which its __torch_dispatch__ / __torch_function__ handle; so do compile and functorch.
            all(type(t) in _PLAIN_TENSOR_TYPES for t in tensors)
            and not torch.compiler.is_compiling()
            and not torch._C._are_functorch_transforms_active()
        ):
            if not (torch.is_grad_enabled() and any(t.requires_grad for t in tensors)):
                # No gradient to record: skip the autograd kernel (an autocast kernel, above it, still casts).
                # torch 2.4's registered wrapper would run setup_context even here.
                with torch._C._AutoDispatchBelowAutograd():
                    return op(*args)
            if not torch._C._is_any_autocast_enabled():
                return eager.apply(*args)
        return op(*args)

    call.__name__ = call.__qualname__ = op_name
    EAGER_ENTRY_POINTS[op_name] = call
    call.__doc__ = f"visdet_ops::{op_name} with its autograd formula (see _registration.register_autograd)."
    return call


def autocast_to(dtype: torch.dtype, t: torch.Tensor | None, device_type: str) -> torch.Tensor | None:
    """t cast to dtype where torch's autocast casts (at::autocast::cached_cast): a floating tensor of the autocast
    device that is not float64; anything else (float64, integers, other devices, None) as is.

    Unlike cached_cast this keeps no per-region cache of cast weights: the ported ops take no parameters
    (nms boxes and scores, RoIs), so there is nothing that a cache would save."""
    if t is None or not t.is_floating_point() or t.dtype == torch.float64 or t.device.type != device_type:
        return t
    return t.to(dtype)


def floating_to(dtype: torch.dtype, t: torch.Tensor | None) -> torch.Tensor | None:
    """A floating tensor in exactly dtype (float64 included); non-floating tensors and None as is, for the op's
    own checks to name."""
    if t is None or not t.is_floating_point() or t.dtype == dtype:
        return t
    return t.to(dtype)


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """The kernels' compute dtype for a map of this dtype: float32 for 16-bit floats (what the RoI ops and MSDA read
    RoIs and sampling locations in), else the dtype itself."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def rois_autocast(op_name: str) -> Callable[[str], Callable]:
    """make_kernel for register_autocast: the RoI ops' rule for visdet_ops::<op_name>(input, rois, ...). input
    stays in its dtype (the kernels read float16/bfloat16 directly and compute in float32: no float32 copy of the
    feature map); rois go to the kernels' compute dtype (float32 beside a 16-bit or float32 input, float64 beside
    float64), never to 16 bits; every other argument as is. The output has the input's dtype."""
    op = getattr(torch.ops.visdet_ops, op_name)

    def make_kernel(device_type: str):
        def kernel(input, rois, *rest):
            return op(input, floating_to(compute_dtype(input.dtype), rois), *rest)

        return kernel

    return make_kernel


def rois_setup_context(ctx, input: torch.Tensor, saved: tuple, backward_args: tuple) -> None:
    """What the RoI ops' setup_context keeps for rois_grad_input: the tensors that their backward op takes after
    grad_output (`saved`: rois, then the op's argmax outputs if it has any), the input's shape and device, and the
    backward op's arguments after that shape (`backward_args`: spatial_scale, ..., in the schema's order)."""
    ctx.save_for_backward(*saved)
    ctx.input_shape = input.shape
    ctx.on_cuda = input.is_cuda
    ctx.backward_args = backward_args


def rois_grad_input(op_name: str, ctx, grad_output: torch.Tensor) -> torch.Tensor:
    """The input gradient of the RoI op visdet_ops::<op_name> from what rois_setup_context kept: its backward op,
    _<op_name>_backward(grad_output, *saved, batch_size, channels, height, width, *backward_args), after the
    determinism alert on CUDA (its kernels add with atomicAdd: the summation order, and so the last bits, vary)."""
    if ctx.on_cuda:
        alert_not_deterministic(f"visdet_ops::{op_name} backward (CUDA)", stacklevel=4)  # as from the op's backward
    batch_size, channels, height, width = ctx.input_shape
    backward_op = getattr(torch.ops.visdet_ops, f"_{op_name}_backward")
    return backward_op(grad_output, *ctx.saved_tensors, batch_size, channels, height, width, *ctx.backward_args)


def float32_autocast(op_name: str, *names: str) -> Callable[[str], Callable]:
    """make_kernel for register_autocast: the autocast kernel of visdet_ops::<op_name> that runs the op with its
    tensor arguments `names` (schema names) cast to float32 by autocast_to (float64 stays float64) and every other
    argument as is. The rule of the box ops (nms family, bbox_overlaps) and the focal losses; each op's module says
    why float32."""
    op = getattr(torch.ops.visdet_ops, op_name)
    schema_names = [argument.name for argument in op.default._schema.arguments]
    pos = {schema_names.index(name) for name in names}

    def make_kernel(device_type: str):
        def kernel(*args):
            # register_autocast's wrapper passes the schema's arguments positionally.
            return op(*(autocast_to(torch.float32, a, device_type) if i in pos else a for i, a in enumerate(args)))

        return kernel

    return make_kernel


def alert_not_deterministic(caller: str, stacklevel: int = 3) -> None:
    """torch's alertNotDeterministic from Python: under torch.use_deterministic_algorithms(True) an error, with
    warn_only=True a UserWarning, otherwise nothing; the message is torch's own. The warning names the frame
    `stacklevel` up from here (3: the caller of the backward that calls this)."""
    if not torch.are_deterministic_algorithms_enabled():
        return
    message = (
        f"{caller} does not have a deterministic implementation, but you set "
        "'torch.use_deterministic_algorithms(True)'. You can turn off determinism just for this operation, or you "
        "can use the 'warn_only=True' option, if that's acceptable for your application. You can also file an "
        "issue at https://github.com/pytorch/pytorch/issues to help us prioritize adding deterministic support for "
        "this operation."
    )
    if torch.is_deterministic_algorithms_warn_only_enabled():
        warnings.warn(message, UserWarning, stacklevel=stacklevel)
    else:
        raise RuntimeError(message)


def refuse_double_backward(family: str) -> Callable:
    """The autograd formula of a private backward op: computing its gradient is not supported (said loudly
    instead of silently giving zeros)."""

    def backward(ctx, *grads):
        raise RuntimeError(f"{family}: double backward (the gradient of the gradient) is not supported")

    return backward
