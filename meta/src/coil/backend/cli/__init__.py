"""The `coil` console script and its `demo` command."""
