"""coil under torch's caching precompile (`torch._dynamo.config.caching_precompile`, env
TORCH_CACHING_PRECOMPILE=1): a process that compiled and called `torch.compiler.save_cache_artifacts()`
leaves Dynamo's package (its bytecode and guards) with coil's compiled graphs in
`<TORCHINDUCTOR_CACHE_DIR>/dynamo/`; a new process then runs the model without Dynamo tracing it
and without calling coil's backend, and still matches eager for a training step and inference.
A damaged package is skipped (torch counts a `dynamo_cache_error`) and the model compiled again.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from coil.knobs import knobs
from fresh_process import run_mlp

pytestmark = pytest.mark.skipif(not hasattr(torch._dynamo.config, "caching_precompile"),
                                reason="this torch has no caching precompile")

# the worst error against eager, how often coil's backend ran, torch's Dynamo-cache counters and
# how many graphs Dynamo traced
REPORT = ('{"err": err, "backend_calls": len(BACKEND_CALLS), "dynamo_cache": dict(counters["dynamo_cache"]), '
          '"traced": counters["stats"]["unique_graphs"]}')
SAVE = "torch.compiler.save_cache_artifacts()"


def _run(root: Path, after: str = "") -> dict[str, Any]:
    env = {**knobs.environ(), "COIL_CACHE_DIR": str(root / "coil"), "TORCHINDUCTOR_CACHE_DIR": str(root / "inductor"),
           "TORCH_CACHING_PRECOMPILE": "1", "COIL_FALLBACK_ON_ERROR": "0"}
    for k in ("COIL_DEBUG_DIR", "COIL_LOGS", "COIL_AOT_CACHE", "COIL_GRAPH_CACHE", "TORCHINDUCTOR_AUTOGRAD_CACHE"):
        env.pop(k, None)
    return run_mlp(REPORT, env, after=after)


def _packages(root: Path) -> list[Path]:
    """The saved packages: one file each (torch 2.11: `dynamo/<key>`, 2.15: `dynamo/<key>/entry`)."""
    return sorted(p for p in (root / "inductor" / "dynamo").rglob("*") if p.is_file())


@pytest.mark.xfail(torch.__version__.startswith("2.11."), strict=True,
                   reason="torch 2.11 cannot unpickle the guard on a parameter that had a .grad when the inference "
                          "graph was compiled (TypeError: assigned grad expected to be a Tensor or None but got grad "
                          "of type _Missing); passes with torch 2.15")
def test_a_saved_package_runs_without_dynamo_or_coil(tmp_path: Path) -> None:
    cold = _run(tmp_path, after=SAVE)
    assert cold["err"] < 1e-4, cold["err"]
    assert cold["dynamo_cache"] == {"dynamo_cache_miss": 1}, cold["dynamo_cache"]
    assert cold["backend_calls"] == 2 and cold["traced"] == 2  # training, then inference (eval)
    assert len(_packages(tmp_path)) == 1

    warm = _run(tmp_path)
    assert warm["err"] < 1e-4, warm["err"]
    assert warm["dynamo_cache"] == {"dynamo_cache_hit": 1}, warm["dynamo_cache"]
    assert warm["traced"] == 0, "Dynamo traced the model again"
    assert warm["backend_calls"] == 0, "coil's backend ran again"


def test_a_damaged_package_is_skipped_and_the_model_compiled_again(tmp_path: Path) -> None:
    _run(tmp_path, after=SAVE)
    (package,) = _packages(tmp_path)
    raw = package.read_bytes()
    package.write_bytes(raw[: len(raw) // 2])
    damaged = _run(tmp_path)
    assert damaged["err"] < 1e-4, damaged["err"]
    assert damaged["dynamo_cache"] == {"dynamo_cache_error": 1}, damaged["dynamo_cache"]
    assert damaged["backend_calls"] == 2 and damaged["traced"] == 2
