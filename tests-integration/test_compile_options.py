"""torch.compile's `mode` and `options` reach coil as knob overrides for that one compile
(coil.backend.config.options): they change what is compiled (forward and backward), stay scoped to the
call, and a bad mode, option name or value is an error that names it. Oracle: eager PyTorch."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from coil.backend import COMPILED
from coil.backend.config.options import MODES, resolve
from coil.knobs import knobs


def _step(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return ((x @ w).relu() * 2 + 1).softmax(-1).sum()


def _compiled_step(device: torch.device, **compile_kwargs: Any) -> list[int]:
    """Forward + backward of `_step` compiled with `compile_kwargs`, checked against eager;
    returns the kernel count of each graph compiled."""
    torch.manual_seed(0)
    x = torch.randn(8, 16, device=device)
    w = torch.randn(16, 16, device=device)
    w_ref, w_cmp = w.clone().requires_grad_(), w.clone().requires_grad_()
    first = len(COMPILED)
    with knobs.override(fallback_on_error=False):
        got = torch.compile(_step, backend="coil", **compile_kwargs)(x, w_cmp)
        got.backward()
    want = _step(x, w_ref)
    want.backward()
    torch.testing.assert_close(got, want)
    assert w_cmp.grad is not None and w_ref.grad is not None
    torch.testing.assert_close(w_cmp.grad, w_ref.grad)
    graphs = COMPILED[first:]
    assert sorted(s.name.split("_")[0] for s in graphs) == ["backward", "forward"]
    assert all(s.eager_fallback is None for s in graphs)
    return [s.kernels for s in graphs]


def test_options_change_the_forward_and_backward_and_stay_scoped(device: torch.device) -> None:
    fused = _compiled_step(device)
    torch._dynamo.reset()
    unfused = _compiled_step(device, options={"fusion": False})
    assert knobs.fusion is True  # the override ended with the compile
    assert all(u > f for u, f in zip(unfused, fused, strict=True)), (fused, unfused)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"mode": "fastest"}, "unknown torch.compile mode 'fastest'"),
    ({"options": {"fusoin": False}}, "unknown option 'fusoin'"),
    ({"options": {"fusion": "no"}}, "option 'fusion' expects a bool, got 'no'"),
    ({"options": {"order_time": True}}, "option 'order_time' expects a float, got True"),
])
def test_a_bad_mode_or_option_is_an_error_naming_it(device: torch.device, kwargs: dict[str, Any],
                                                     message: str) -> None:
    fn = torch.compile(_step, backend="coil", **kwargs)
    with pytest.raises(Exception, match=message):
        fn(torch.randn(8, 16, device=device), torch.randn(16, 16, device=device))


def test_a_mode_turns_training_graphs_off_for_that_compile(device: torch.device,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """What the forward's and the backward's compiles see (training CUDA graphs are on by
    default; "max-autotune-no-cudagraphs" turns them off for that compile only)."""
    import coil.backend.pipeline.compile as backend_compile

    seen: list[tuple[str, bool]] = []
    real = backend_compile._compile

    def spy(gm: Any, name: str, *args: Any, **kwargs: Any) -> Any:
        seen.append((name.split("_")[0], knobs.cuda_graphs_training))
        return real(gm, name, *args, **kwargs)

    monkeypatch.setattr(backend_compile, "_compile", spy)
    assert knobs.cuda_graphs_training is True
    _compiled_step(device, mode="max-autotune-no-cudagraphs")
    assert sorted(seen) == [("backward", False), ("forward", False)]
    assert knobs.cuda_graphs_training is True


def test_modes_map_to_knobs() -> None:
    assert resolve("reduce-overhead") == {"cuda_graphs": True, "cuda_graphs_training": True}
    assert resolve("max-autotune", {"autotune_min_bytes": 1 << 20}) == {"autotune": "auto",
                                                                         "autotune_min_bytes": 1 << 20,
                                                                         "autotune_extra_min_bytes": 0,
                                                                         "matmul_templates": "auto"}
    assert resolve(None, {"order_time": 2}) == {"order_time": 2.0}
    for overrides in MODES.values():  # every mode names real knobs with values of their type
        assert resolve(None, overrides) == overrides
