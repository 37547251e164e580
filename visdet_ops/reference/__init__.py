"""Slow, plain-PyTorch float64 references of every op: the definition the
kernels are tested against. Not for production use."""
