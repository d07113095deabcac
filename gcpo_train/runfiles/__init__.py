"""Run folders: locks, checkpoints, the step log and export."""
