"""Sampling rollouts: the decoding kernels and batched group generation."""
