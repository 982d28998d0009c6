"""The graph passes of coil.fx_passes, one concept per module."""
