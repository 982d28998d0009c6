"""Is anyone outside still holding a tensor's memory? Storage use counts against a baseline.

A CUDA-graph runner that returns its static outputs without copying them (saved activations of a
training forward) must not replay while a tensor it returned earlier is still referenced: the
replay would overwrite it. Python reference counts of the tensor objects do not tell, because
holders may hold other tensor objects (views, `detach()`ed aliases, autograd's saved variables)
over the same memory. What every such tensor shares is the storage (`c10::StorageImpl`), whose
reference count torch exposes as `torch._C._storage_Use_Count(storage._cdata)`.

`StorageLiveness(tensors)` records, for each distinct storage among `tensors`, its use count at
that moment (the baseline: the references the owner itself holds). `live()` lists the storages
whose count is now higher: some tensor made after the baseline still exists. Hand out *new* tensor
objects over the memory (`t.detach()`, a view) to make holders visible; a holder of the very same
tensor object the owner holds adds no storage reference and is not seen.

The owner must keep its own tensors alive for as long as it asks (the recorded `_cdata` pointers
are only valid while the storages exist). The same idea drives TorchInductor's cudagraph trees,
which keep weak references to output storages and check their use counts before a replay.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, cast


def use_count(cdata: int) -> int:
    """The number of references to the storage `cdata` (`untyped_storage()._cdata`)."""
    return use_counter()(cdata)


def use_counter() -> Callable[[int], int]:
    """The function behind `use_count` itself (torch's, no Python frame between): for the loops
    that count many storages on every CUDA-graph replay."""
    import torch

    return cast("Callable[[int], int]", torch._C._storage_Use_Count)


class StorageLiveness:
    """Use counts of the storages of `tensors` (non-tensors ignored) against their baseline now.

    `exclude` are storages (`untyped_storage()._cdata`) never reported, e.g. a parameter's,
    which a replay does not overwrite.
    """

    def __init__(self, tensors: Iterable[Any], exclude: Iterable[int] = ()) -> None:
        import torch

        skip = set(exclude)
        cdatas = []
        for t in tensors:
            if isinstance(t, torch.Tensor):
                cdata = int(t.untyped_storage()._cdata)  # the temporary storage object dies here
                if cdata not in skip and cdata not in cdatas:
                    cdatas.append(cdata)
        self._baseline = {c: use_count(c) for c in cdatas}

    def __len__(self) -> int:
        return len(self._baseline)

    def extra(self, cdata: int) -> int:
        """References to the recorded storage `cdata` beyond its baseline (0 or less: none)."""
        return use_count(cdata) - self._baseline[cdata]

    def live(self) -> list[int]:
        """The storages (by `_cdata`) referenced beyond the baseline, in recorded order."""
        return [c for c in self._baseline if self.extra(c) > 0]
