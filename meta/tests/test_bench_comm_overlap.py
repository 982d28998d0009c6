"""coil.bench.comm_overlap against intervals counted by hand."""

from __future__ import annotations

from types import SimpleNamespace

from coil.bench.comm_overlap import hidden_fraction, kernel_intervals, length, union


def test_union_merges_overlapping_and_touching_intervals_and_drops_empty_ones() -> None:
    assert union([(5, 7), (0, 2), (1, 3), (3, 4), (6, 6)]) == [(0, 4), (5, 7)]
    assert length(union([(0, 2), (1, 3)])) == 3


def test_hidden_fraction_counts_collective_time_under_any_compute_kernel() -> None:
    comm = [(0, 10), (20, 30)]  # 20 units of collectives
    compute = [(5, 8), (7, 12), (25, 40)]  # covers 5..10 of the first, 25..30 of the second
    assert hidden_fraction(comm, compute) == 10 / 20
    assert hidden_fraction(comm, []) == 0.0
    assert hidden_fraction([], compute) is None
    assert hidden_fraction([(0, 4)], [(-1, 5)]) == 1.0


def test_kernel_intervals_split_nccl_from_compute_and_skip_copies_and_host_events() -> None:
    def ev(name: str, start: float, end: float, device: str = "DeviceType.CUDA") -> SimpleNamespace:
        return SimpleNamespace(name=name, device_type=device, time_range=SimpleNamespace(start=start, end=end))

    events = [ev("ncclDevKernel_AllGather_RING_LL", 0, 10), ev("triton_poi_fused_add_0", 2, 4),
              ev("Memcpy DtoD (Device -> Device)", 4, 6), ev("aten::mm", 0, 9, "DeviceType.CPU"),
              ev("sm90_xmma_gemm_bf16", 6, 12)]
    comm, compute = kernel_intervals(events)
    assert comm == [(0.0, 10.0)] and compute == [(2.0, 4.0), (6.0, 12.0)]
    assert hidden_fraction(comm, compute) == 6 / 10
