"""The update-alignment study's model half: per-group gradients at a snapshot,
the per-group frame, the command."""
