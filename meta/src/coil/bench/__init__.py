"""`coil bench`: eager, TorchInductor (default, reduce-overhead) and coil (with and without CUDA graphs) side by side on micro cases and models (see runner.py and meta/README.md)."""
