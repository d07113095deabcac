"""The policy model: loading, LoRA, the KL reference, and the log-prob passes."""
