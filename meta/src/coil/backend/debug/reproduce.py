"""Repro scripts: save one post-AOT graph so that `python repro.py` recompiles it standalone.

`capture` (cheap: text and metadata only) runs before the post-grad passes, which edit the graph
in place; `write_repro` writes, into a graph's debug folder:

- `repro_graph.py`: the graph's code (`gm.code`) as `class Repro(torch.nn.Module)`, editable;
- `repro_inputs.json`: each placeholder's shape, stride, storage offset, dtype and device
  (or its int value), and the graph kind (forward, backward, inference);
- `repro_constants.pt`: the graph's tensor attributes (get_attr targets), when it has any;
- `repro.py`: builds random inputs with that metadata, traces `Repro` (torch.fx.symbolic_trace),
  restores node names and every node's `meta["val"]` (FakeTensors), runs it eagerly, compiles it with
  `coil.backend.compile_graph` (fallback off, so a compile error raises), prints how many kernels
  and externs the compile made, runs the result and compares. It prints `MATCH` and exits 0 when
  the outputs agree, exits 1 on a mismatch.
"""

from __future__ import annotations

import json
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.fx
from torch._subclasses.fake_tensor import unset_fake_temporarily
from torch.fx.graph import _custom_builtins


@dataclass
class GraphCapture:
    """What a repro needs of one graph, taken before any pass edits it."""

    name: str
    kind: str
    readable: str
    code: str
    imports: list[str]
    inputs: list[dict[str, Any]]
    node_names: list[str]
    constants: dict[str, torch.Tensor] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def _example(size: Any) -> int:
    """An example value of a size: a symbolic one's hint (the value it was traced with; 1 for a
    data-dependent one). Never `int(size)`: on a SymInt that adds a guard, which would
    specialise the graph being compiled, so the debug dir would change what is compiled."""
    if isinstance(size, torch.SymInt):
        hint = size.node.hint
        return int(hint) if isinstance(hint, int) else 1
    return int(size)


def _input_meta(node: torch.fx.Node) -> dict[str, Any]:
    val = node.meta.get("val")
    if isinstance(val, torch.Tensor):
        return {"name": node.name, "kind": "tensor", "shape": [_example(s) for s in val.shape],
                "stride": [_example(s) for s in val.stride()], "offset": _example(val.storage_offset()),
                "dtype": str(val.dtype).removeprefix("torch."), "device": str(val.device)}
    if isinstance(val, torch.SymInt):
        return {"name": node.name, "kind": "scalar", "value": _example(val)}
    if isinstance(val, int | float | bool):
        return {"name": node.name, "kind": "scalar", "value": val}
    return {"name": node.name, "kind": "unknown", "repr": repr(val)}


def _imports(gm: torch.fx.GraphModule, notes: list[str]) -> list[str]:
    code = gm.graph.python_code(root_module="self")
    out = []
    for name, obj in code.globals.items():
        builtin = _custom_builtins.get(name)
        if builtin is not None:
            out.append(builtin.import_str)
            continue
        module, qual = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
        if isinstance(obj, types.ModuleType):
            out.append(f"import {obj.__name__} as {name}")
        elif module and qual and "<" not in qual:
            out.append(f"import {module}\n{name} = {module}.{qual}")
        else:
            notes.append(f"global {name!r} ({obj!r}) could not be written as an import; repro_graph.py needs it")
    return out


def capture(gm: torch.fx.GraphModule, name: str, kind: str) -> GraphCapture:
    """Take the text and metadata a repro needs (call before post-grad passes)."""
    notes: list[str] = []
    inputs = [_input_meta(n) for n in gm.graph.nodes if n.op == "placeholder"]
    constants: dict[str, torch.Tensor] = {}
    for n in gm.graph.nodes:
        if n.op == "get_attr":
            value: Any = gm
            for atom in str(n.target).split("."):
                value = getattr(value, atom)
            if isinstance(value, torch.Tensor):
                # the compile may run under AOTAutograd's FakeTensorMode: copy the real tensor
                with unset_fake_temporarily():
                    constants[str(n.target)] = value.detach().clone()
            else:
                notes.append(f"attribute {n.target} is a {type(value).__name__}, not saved")
    node_names = [n.name for n in gm.graph.nodes if n.op not in ("placeholder", "output")]
    return GraphCapture(name, kind, gm.print_readable(print_output=False), gm.code, _imports(gm, notes),
                        inputs, node_names, constants, notes)


GRAPH_MODULE = '''\
# The post-AOT FX graph {name} ({kind}), as coil received it (before post-grad passes).
# Edit freely to shrink a failure; repro.py traces `Repro` back into a GraphModule.
{imports}


class Repro(torch.nn.Module):
{code}
'''

REPRO = '''\
#!/usr/bin/env python
"""Repro of coil graph {name} ({kind}): recompile it with coil and compare with eager.

Run: python repro.py [--seed N]. Prints MATCH and exits 0 when coil agrees with eager; exits 1 on
a mismatch; a compile error raises (CoilCompileError names the stage, node and op).
"""

import argparse
import json
import sys
from pathlib import Path

import torch
import torch.fx
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from repro_graph import Repro  # noqa: E402

NAME, KIND = {name!r}, {kind!r}


def make_inputs(meta, seed):
    gen = torch.Generator().manual_seed(seed)
    out = []
    for m in meta:
        if m["kind"] == "scalar":
            out.append(m["value"])
            continue
        if m["kind"] != "tensor":
            raise SystemExit(f"input {{m['name']}} has no tensor metadata: {{m.get('repr')}}")
        dtype = getattr(torch, m["dtype"])
        extent = m["offset"] + 1 + sum((s - 1) * st for s, st in zip(m["shape"], m["stride"]))
        extent = 0 if 0 in m["shape"] else extent
        if dtype.is_floating_point or dtype.is_complex:
            flat = torch.randn(max(extent, 1), generator=gen).to(dtype)
        elif dtype == torch.bool:
            flat = torch.rand(max(extent, 1), generator=gen) > 0.5
        else:
            flat = torch.randint(0, 2, (max(extent, 1),), generator=gen).to(dtype)
        t = flat.to(m["device"]).as_strided(m["shape"], m["stride"], m["offset"])
        out.append(t)
    return out


def build(inputs):
    module = Repro()
    constants = HERE / "repro_constants.pt"
    if constants.exists():
        for target, value in torch.load(constants, weights_only=True).items():
            owner = module
            *path, leaf = target.split(".")
            for atom in path:
                if not hasattr(owner, atom):
                    owner.add_module(atom, torch.nn.Module())
                owner = getattr(owner, atom)
            owner.register_buffer(leaf, value)
    gm = torch.fx.symbolic_trace(module)
    _restore_names(gm)
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    fake = [mode.from_tensor(x) if isinstance(x, torch.Tensor) else x for x in inputs]
    with mode:
        _Meta(gm, mode).run(*fake)
    return gm


class _Meta(torch.fx.Interpreter):
    """Runs the graph on FakeTensors and stores each node's result as meta["val"]."""

    def __init__(self, gm, mode):
        super().__init__(gm)
        self.mode = mode

    def run_node(self, n):
        out = super().run_node(n)
        if isinstance(out, torch.Tensor) and not isinstance(out, FakeTensor):
            out = self.mode.from_tensor(out)
        if n.op != "output":
            n.meta["val"] = out
        return out


def _restore_names(gm):
    """Give the traced nodes the names they had in coil (so errors name the same nodes)."""
    names = json.loads((HERE / "repro_inputs.json").read_text()).get("node_names", [])
    nodes = [n for n in gm.graph.nodes if n.op not in ("placeholder", "output")]
    if len(nodes) != len(names):
        return
    for node, name in zip(nodes, names):
        if node.name != name:
            try:
                node._rename(name)
            except Exception:
                return
    gm.recompile()


def tolerance(dtype):
    if dtype in (torch.float16, torch.bfloat16):
        return dict(rtol=2e-2, atol=2e-2)
    if dtype == torch.float32:
        return dict(rtol=1e-3, atol=1e-4)
    return {{}}


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    meta = json.loads((HERE / "repro_inputs.json").read_text())
    inputs = make_inputs(meta["inputs"], args.seed)
    import coil.lowering_ir  # noqa: F401  (registers coil's torch.library ops the graph may call)

    gm = build(inputs)
    expected = gm(*[x.clone() if isinstance(x, torch.Tensor) else x for x in inputs])

    from coil.backend import COMPILED

    from coil.backend import compile_graph

    from coil.knobs import knobs
    with knobs.override(fallback_on_error=False):
        compiled = compile_graph(gm, inputs, kind=KIND)
    stats = COMPILED[-1]
    print(f"coil repro {{NAME}}: compiled to {{stats.kernels}} kernels and {{stats.externs}} externs")
    got = compiled(list(inputs))
    expected = list(expected) if isinstance(expected, (list, tuple)) else [expected]
    got = list(got) if isinstance(got, (list, tuple)) else [got]
    if len(got) != len(expected):
        print(f"coil repro {{NAME}}: MISMATCH: {{len(got)}} outputs, eager has {{len(expected)}}")
        return 1
    bad = 0
    for i, (g, e) in enumerate(zip(got, expected)):
        if not isinstance(e, torch.Tensor):
            if g != e:
                print(f"output {{i}}: {{g!r}} != eager {{e!r}}")
                bad += 1
            continue
        try:
            torch.testing.assert_close(g, e, equal_nan=True, **tolerance(e.dtype))
        except AssertionError as err:
            print(f"output {{i}}: {{err}}")
            bad += 1
    if bad:
        print(f"coil repro {{NAME}}: MISMATCH in {{bad}} of {{len(got)}} outputs")
        return 1
    print(f"coil repro {{NAME}}: MATCH ({{len(got)}} outputs agree with eager)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
'''


def write_repro(cap: GraphCapture, folder: Path) -> None:
    """Write repro.py and what it loads into `folder` (see the module docstring)."""
    code = "\n".join(("    " + ln) if ln.strip() else "" for ln in cap.code.strip("\n").splitlines())
    imports = "\n".join(dict.fromkeys(["import torch", *cap.imports]))
    (folder / "repro_graph.py").write_text(GRAPH_MODULE.format(name=cap.name, kind=cap.kind, imports=imports,
                                                               code=code))
    (folder / "repro_inputs.json").write_text(json.dumps({"graph": cap.name, "kind": cap.kind,
                                                          "inputs": cap.inputs, "notes": cap.notes,
                                                          "node_names": cap.node_names}, indent=1))
    if cap.constants:
        torch.save(cap.constants, folder / "repro_constants.pt")
    (folder / "repro.py").write_text(REPRO.format(name=cap.name, kind=cap.kind))
