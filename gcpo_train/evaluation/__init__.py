"""Held-out evaluation: splits, decoding a checkpoint's answers, and paired scores."""
