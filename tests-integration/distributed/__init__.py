"""Distributed training compiled with backend="coil": DDP, FSDP2, tensor parallelism and
functional collectives, each on two gloo ranks on the CPU, against the same recipe run eagerly."""
