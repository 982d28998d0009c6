"""`coil bench`: eager, TorchInductor and coil side by side on micro cases and models (see runner.py and meta/README.md)."""
