"""The zoo's CPU twin: every coil.bench.zoo model at its tiny size against eager PyTorch."""
