"""The update-alignment study's model half (issue 36): per-group gradients at a snapshot,
the per-group frame, the command."""
