"""A training step and an inference call of models.MLP in a fresh Python process, for the cache
tests (test_graph_cache.py, test_aot_cache.py, test_precompile.py): `run_mlp(report, env)` runs the script with
`report` (Python source of an expression over `err` and coil's stats) printed as its last line of
JSON, and returns that dict. `err` is the largest difference from eager over the training step's
output and gradients and the inference output."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent

SCRIPT = """
import json, sys
import torch
sys.path.insert(0, sys.argv[1])
from models import MLP
from coil.backend import COMPILED
from coil.backend.stats import BACKEND_CALLS
from torch._dynamo.utils import counters

torch.manual_seed(0)
model = MLP()
x = torch.randn(8, 16)
ref = model(x)
ref.square().sum().backward()
ref_grads = [p.grad.clone() for p in model.parameters()]
model.zero_grad()
compiled = torch.compile(model, backend="coil")
out = compiled(x)
out.square().sum().backward()
err = max([(out - ref).abs().max().item()] + [(p.grad - g).abs().max().item()
                                               for p, g in zip(model.parameters(), ref_grads)])
model.eval()
with torch.no_grad():
    err = max(err, (compiled(x) - model(x)).abs().max().item())
AFTER
print(json.dumps(REPORT))
"""


def run_mlp(report: str, env: dict[str, str], timeout: float = 900, after: str = "") -> dict[str, Any]:
    """Run the script in a new process with `env`, with the statement `after` run once the
    model's calls are done; its stderr is returned under "stderr"."""
    script = SCRIPT.replace("AFTER", after or "pass").replace("REPORT", report)
    p = subprocess.run([sys.executable, "-c", script, str(HERE)], env=env,
                       capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, p.stderr[-3000:]
    result: dict[str, Any] = json.loads(p.stdout.strip().splitlines()[-1])
    result["stderr"] = p.stderr
    return result
