"""`graph_inputs.copy_into`: writes into broadcast views, refuses overlapping ones (CPU)."""

from __future__ import annotations

import pytest
import torch
from coil.runtime.graph_inputs import copy_into, distinct_elements


def test_copy_into_a_broadcast_view_writes_its_distinct_elements() -> None:
    base = torch.zeros(4, 1, 3)
    dst = base.expand(4, 5, 3).transpose(0, 2)  # strides (1, 0, 3): one broadcast dimension
    src = torch.randn(4, 1, 3).expand(4, 5, 3).transpose(0, 2).contiguous()
    with pytest.raises(RuntimeError, match="single memory location"):
        dst.copy_(src)  # the plain copy this replaces
    copy_into(dst, src)
    torch.testing.assert_close(dst, src)
    torch.testing.assert_close(base, src.transpose(0, 2)[:, :1, :])


def test_copy_into_a_dense_view_is_a_plain_copy() -> None:
    dst, src = torch.zeros(6, 4).t(), torch.randn(4, 6)
    copy_into(dst, src)
    assert torch.equal(dst, src)


def test_overlapping_windows_are_refused_by_name() -> None:
    windows = torch.zeros(10).as_strided((3, 4, 4), (0, 2, 1))  # broadcast, and rows that overlap
    assert distinct_elements(windows) is None
    with pytest.raises(ValueError, match=r"overlap: size \(3, 4, 4\), stride \(0, 2, 1\)"):
        copy_into(windows, torch.ones(3, 4, 4))


def test_slices_of_one_projection_are_distinct() -> None:
    """q, k and v taken from one (B, S, 3 * H * D) projection, as heads: strides that the
    interleaving leaves non-dense but never overlapping."""
    qkv = torch.zeros(2, 5, 3 * 4 * 8)
    q = qkv[..., : 4 * 8].view(2, 5, 4, 8).transpose(1, 2)  # stride (120, 8, 24, 1)
    src = torch.randn(2, 4, 5, 8)
    copy_into(q, src)
    torch.testing.assert_close(q, src)
    assert torch.count_nonzero(qkv[..., 4 * 8:]) == 0, "k and v untouched"


def test_the_overlap_test_checks_strides_in_their_order() -> None:
    """Brute force: a view's elements are distinct exactly when their offsets are."""
    for stride in [(1, 3), (1, 2), (4, 1), (3, 1), (2, 5), (6, 1)]:
        view = torch.arange(32.0).as_strided((3, 4), stride)
        offsets = view.flatten().tolist()
        assert (distinct_elements(view) is not None) == (len(set(offsets)) == len(offsets)), stride
