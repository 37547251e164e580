"""Every op called from 8 Python threads at once gives what the same calls give one at a time (issue 25, item 5).

The calls are the ones each op module's example case makes (float32), captured below autograd as
tests/memory_worker.py captures them, forward and backward ops alike. First each call runs once, alone; then 8
threads, released together by a barrier, each make every call several times (on CUDA each thread on a stream of
its own, which waits for the inputs' stream first). Every result of every thread must match the call made alone:
bit for bit on the CPU (our CPU kernels sum in a fixed order), to atomics' rounding on CUDA. A failure names the
op and the thread."""

from __future__ import annotations

import threading

import torch

from .memory_worker import capture

THREADS = 8
REPEATS = 3


def _tensors(result) -> list[torch.Tensor]:
    """The tensors of an op's result (a tensor or a tuple/list of them), on the CPU."""
    items = result if isinstance(result, list | tuple) else [result]
    return [t.detach().cpu().clone() for t in items if isinstance(t, torch.Tensor)]


def test_concurrent_calls_match_calls_made_one_at_a_time(device):
    calls = capture(device)
    assert calls, "the example cases made no op call"
    alone = {name: _tensors(func(*args, **kwargs)) for name, (func, args, kwargs) in calls.items()}
    barrier = threading.Barrier(THREADS)
    results: list[dict] = [{} for _ in range(THREADS)]
    errors: list[str] = []

    def worker(i: int) -> None:
        try:
            stream = None
            if device.type == "cuda":
                stream = torch.cuda.Stream(device)
                stream.wait_stream(torch.cuda.current_stream(device))
            with torch.cuda.stream(stream):  # a no-op for None (the CPU)
                barrier.wait(timeout=60)
                for name, (func, args, kwargs) in calls.items():
                    outs = [func(*args, **kwargs) for _ in range(REPEATS)]
                    if stream is not None:
                        stream.synchronize()
                    results[i][name] = [_tensors(o) for o in outs]
        except BaseException as e:  # reported below, with the thread
            errors.append(f"thread {i}: {type(e).__name__}: {e}")
            barrier.abort()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    assert not any(t.is_alive() for t in threads), "a thread did not finish within 600 s (a deadlock?)"
    assert not errors, "\n".join(errors)

    exact = device.type == "cpu"
    mismatches = []
    for i, per_thread in enumerate(results):
        assert set(per_thread) == set(alone), f"thread {i} made {sorted(per_thread)}, expected {sorted(alone)}"
        for name, outs in per_thread.items():
            for got in outs:
                for g, w in zip(got, alone[name], strict=True):
                    same = torch.equal(g, w) if exact else torch.allclose(g, w, rtol=1e-5, atol=1e-5, equal_nan=True)
                    if exact and not same and g.is_floating_point():
                        # NaN outputs (the invalid-RoI cases) are equal where both are NaN.
                        same = bool(((g == w) | (g.isnan() & w.isnan())).all()) and g.shape == w.shape
                    if not same:
                        mismatches.append(f"{name} (thread {i})")
    assert not mismatches, "results differ from the same call made alone: " + ", ".join(sorted(set(mismatches)))
