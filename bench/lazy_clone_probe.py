"""Do the bench's HF models keep lazy clones on when a caller keeps each call's whole output?

    python bench/lazy_clone_probe.py CASE...     (inference cases, e.g. gpt2_infer_bf16)

For each case: the model in bf16, compiled with backend="coil", called six times under
`torch.no_grad()` as `out = model(ids)` (the previous `out`, a ModelOutput with its key/value
cache, is alive during the call that replaces it). The third call's output is kept to the end
and compared with clones of its tensors taken right after that call (the oracle: what it held
then). Prints, per CUDA-graph runner built: captured, lazy clones still on, storages copied
away, calls run uncaptured; then whether the kept output still holds its values.
"""

from __future__ import annotations

import sys
from typing import Any


def main(argv: list[str]) -> int:
    import torch
    import torch.utils._pytree as pytree
    from coil.backend import bench_models as bm
    from coil.runtime import cudagraph

    made: list[Any] = []
    real_init = cudagraph.CudaGraphRunner.__init__

    def recording(self: Any, *args: Any, **kwargs: Any) -> None:
        real_init(self, *args, **kwargs)
        made.append(self)

    cudagraph.CudaGraphRunner.__init__ = recording  # type: ignore[method-assign]
    for case in argv:
        spec, _ = bm._split(case)
        model = bm._model(spec).to(torch.bfloat16).eval()
        args = bm._as_model_dtype(model, spec.inputs(model))
        compiled = torch.compile(model, backend="coil")
        made.clear()
        with torch.no_grad():
            out = None
            kept, want = None, None
            for i in range(6):
                out = compiled(*args)
                if i == 2:
                    kept = out
                    want = [t.clone() for t in pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]
            got = [t for t in pytree.tree_leaves(kept) if isinstance(t, torch.Tensor)]
        same = len(got) == len(want or []) and all(torch.equal(a, b) for a, b in zip(got, want or [], strict=True))
        for r in made:
            lazy = r._lazy
            print(f"{case}: captured {r.graph is not None}, lazy {lazy is not None and lazy.enabled}, "
                  f"copied away {lazy.evacuated if lazy is not None else '-'}, uncaptured {r.uncaptured_calls}, "
                  f"outputs {len(r.graph_outputs)}", flush=True)
        print(f"{case}: kept output's {len(got)} tensors unchanged after three more calls: {same}", flush=True)
        del out, kept, want, got, compiled, model
        torch._dynamo.reset()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
