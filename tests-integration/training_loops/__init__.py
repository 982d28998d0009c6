"""The training loops people write, compiled with coil, against the same loops run eagerly."""
