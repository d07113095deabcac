"""Our own GRPO loop: the trainer, its loss, a step's data, and the gradient-variance tracking."""
