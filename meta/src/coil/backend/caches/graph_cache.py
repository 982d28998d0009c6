"""The whole-graph cache (COIL_GRAPH_CACHE): a compiled AOT graph, stored on disk, reused by key.

Before the pipeline runs on a graph, `lookup` computes the graph's key (`graph_key`) and loads a
stored `CachedGraph` when there is one; `compile_graph` then skips post-grad passes, lowering,
scheduling and codegen, and only loads the kernels (`coil.runtime.compile_kernels`, which finds
them in the kernel disk cache) and executes the stored wrapper. After a full compile, `store`
writes the entry (`coil.runtime.disk_cache.write_blob`: atomic, checksummed) to
`<COIL_CACHE_DIR>/graphs/<key[:2]>/<key>.blob`.

The key (sha256) covers everything the compiled code depends on:
- the graph: the canonical print (`str(graph)`: every node's name, op, target, args and kwargs)
  of the graph and of every GraphModule attribute, the graph kind (forward, backward,
  inference) and whether the wrapper checks its inputs;
- every placeholder's `meta["val"]`: for tensors dtype, device, layout, sizes, strides and
  storage offset (symbolic ones as their sympy expressions); SymInts and constants as text;
- every tensor attribute the graph reads (`get_attr`): metadata and a sha256 of its bytes;
- the ShapeEnv: each size symbol's hint, value range, and the replacements it knows;
- the knobs that change the output (`knob_fingerprint`: every knob coil.backend owns except the
  debugging/runtime-only ones listed in `IGNORED_KNOBS`, and the other packages' knobs listed in
  `KEYED_ELSEWHERE`);
- versions (`code_fingerprint`): Python, torch, triton, every coil distribution, and a sha256 of
  the source files of every coil package (so an edited checkout never reuses stale entries);
- on CUDA, the device's name, compute capability and SM count (lowering's split rule reads it).

A graph is not cached ("uncacheable") when its key cannot be formed (an attribute that is
neither a tensor nor a GraphModule, a tensor without data, an unknown placeholder value) or when
a constant the wrapper captures is not an attribute of the graph as received.

An entry is JSON with a `format` field (`FORMAT_VERSION`) and its own key; one that fails to
read, parse or validate (format, key, fields, `KernelSpec` validation) is a miss, reported at
INFO on `coil.backend` (no warning), and is rebuilt by the full pipeline, whose store replaces
it. A hit whose kernels or wrapper then fail to load is treated the same way.

The lookup is skipped ("bypass") while debug output that needs the pipeline is wanted
(COIL_DEBUG_DIR, or COIL_LOGS with graph, fusion, kernels, wrapper, memory_plan or autotune): the full
pipeline runs and writes every artefact, and its result is stored. COIL_CHECK_LIFETIMES
instruments the wrapper with the schedule's lifetimes, so it neither looks up nor stores.

`render` and `parse` write and read an entry's text; torch's AOTAutograd cache (`aot_cache`)
embeds the same text in its entries, with the constants by value instead of attribute names.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.metadata
import json
import logging
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.fx
from coil.backend.debug import logs
from coil.knobs import KNOBS, knobs
from coil.runtime import KernelSpec, TensorArg, disk_cache

log = logging.getLogger("coil.backend")

FORMAT_VERSION = 1
NAMESPACE = "graphs"
# coil.backend's knobs that do not change the compiled code (debugging aids, run-time switches
# read at load); every other knob coil.backend owns is part of the key
IGNORED_KNOBS = frozenset({
    "logs", "debug_dir", "progress", "check_nan", "check_lifetimes", "fallback_on_error",
    "graph_cache", "cuda_graphs", "cuda_graph_lazy_clones", "aot_cache", "prehash",
    "frontend_cache",
})
# the knobs of other packages that change the compiled code (fx-passes' verify only checks)
KEYED_ELSEWHERE = ("reinplace", "pad_mm", "channels_last", "split_reduction_min", "inline", "triton_interpret")
# COIL_LOGS artefacts that only the full pipeline produces (their selection bypasses the lookup)
PIPELINE_LOGS = frozenset({"graph", "fusion", "kernels", "wrapper", "memory_plan", "autotune"})
_PACKAGES = ("coil.backend", "coil.fx_passes", "coil.knobs", "coil.lowering_ir", "coil.memory_planner", "coil.runtime",
             "coil.scheduler", "coil.triton_codegen", "coil.wrapper_codegen")
_DISTRIBUTIONS = ("coil", "coil-fx-passes", "coil-knobs", "coil-lowering-ir", "coil-memory-planner", "coil-runtime",
                  "coil-scheduler", "coil-triton-codegen", "coil-wrapper-codegen", "torch", "triton")


class Uncacheable(Exception):
    """The graph has something the key cannot describe; the message says what."""


@dataclass(frozen=True)
class CachedGraph:
    """What a hit restores: everything `compile_graph` needs after code generation.

    `constants` maps the wrapper's constant names to attributes of the GraphModule (read from the
    graph being compiled, never stored); `stats` holds the GraphStats fields describing the code.
    """

    wrapper: str
    specs: tuple[KernelSpec, ...]
    constants: dict[str, str]
    device: str
    static_shapes: bool
    stats: dict[str, Any]


@dataclass
class Lookup:
    """One graph's cache state: `status` ("hit", "miss", "bypass", "uncacheable", "off"), its key
    (None unless hit/miss/bypass), the loaded entry on a hit, and the graph's tensor attributes
    by identity (taken before the passes edit the graph)."""

    status: str
    key: str | None = None
    cached: CachedGraph | None = None
    attributes: dict[int, str] = field(default_factory=dict)

    @property
    def stores(self) -> bool:
        """Whether a full compile of this graph should be stored."""
        return self.key is not None


def skip_reason() -> str | None:
    """Why a cache that would skip coil's pipeline (the AOT cache, the frontend cache) must not
    serve now, or None: the graph cache is off, COIL_CHECK_LIFETIMES instruments the wrapper,
    or debug output that only the pipeline writes is wanted."""
    if not knobs.graph_cache:
        return "COIL_GRAPH_CACHE=0"
    if knobs.check_lifetimes:
        return "COIL_CHECK_LIFETIMES instruments the wrapper"
    if knobs.debug_dir or PIPELINE_LOGS & logs.selected():
        return "debug output wanted (COIL_DEBUG_DIR or a pipeline COIL_LOGS artefact)"
    return None


def lookup(gm: torch.fx.GraphModule, kind: str, check_inputs: bool) -> Lookup:
    """The graph's cache state, with the stored entry on a hit. Call before any pass runs."""
    if not knobs.graph_cache or knobs.check_lifetimes:
        return Lookup("off")
    try:
        key = graph_key(gm, kind, check_inputs)
    except Exception as e:  # Uncacheable, or anything the key could not describe
        log.info("graph cache: not caching this %s graph: %s", kind, e)
        return Lookup("uncacheable")
    attributes = {id(v): t for t, v in _tensor_attributes(gm)}
    if knobs.debug_dir or PIPELINE_LOGS & logs.selected():
        return Lookup("bypass", key, None, attributes)
    cached = load(key)
    return Lookup("hit" if cached is not None else "miss", key, cached, attributes)


def store(entry: Lookup, graph: str, kind: str, wrapper: str, specs: list[KernelSpec],
          constants: dict[str, torch.Tensor], device: torch.device, static_shapes: bool,
          stats: dict[str, Any]) -> bool:
    """Write a freshly compiled graph under `entry.key`; False when it is not storable (a
    constant that is not a graph attribute) or the write failed (logged at INFO)."""
    assert entry.key is not None
    names = constant_targets(entry, graph, constants)
    if names is None:
        return False
    text = render(entry.key, graph, kind, wrapper, specs, names, device, static_shapes, stats)
    path = disk_cache.blob_path(knobs.cache_dir, NAMESPACE, entry.key)
    try:
        disk_cache.write_blob(path, entry.key, text)
    except OSError as e:
        log.info("graph cache: could not write %s: %s", path, e)
        return False
    return True


def constant_targets(entry: Lookup, graph: str, constants: dict[str, torch.Tensor]) -> dict[str, str] | None:
    """The graph attribute each of the wrapper's constants is (by identity), or None (logged at
    INFO) when one is not an attribute of the graph as received."""
    names: dict[str, str] = {}
    for cname, tensor in constants.items():
        target = entry.attributes.get(id(tensor))
        if target is None:
            log.info("graph cache: %s captures a constant that is not a graph attribute: not stored", graph)
            return None
        names[cname] = target
    return names


def render(key: str, graph: str, kind: str, wrapper: str, specs: list[KernelSpec] | tuple[KernelSpec, ...],
           constants: dict[str, str], device: torch.device | str, static_shapes: bool, stats: dict[str, Any]) -> str:
    """The JSON text of an entry (what `parse` reads back): `constants` maps each wrapper
    constant to the name it is looked up by when the entry is loaded."""
    doc = {
        "format": FORMAT_VERSION, "key": key, "graph": graph, "kind": kind, "device": str(device),
        "static_shapes": static_shapes, "wrapper": wrapper, "constants": constants,
        "kernels": [_spec_json(s) for s in specs], "stats": stats,
    }
    return json.dumps(doc)


def load(key: str) -> CachedGraph | None:
    """The entry stored under `key`, or None (missing, damaged or of another format)."""
    path = disk_cache.blob_path(knobs.cache_dir, NAMESPACE, key)
    text = disk_cache.read_blob(path, key)
    if text is None:
        return None
    try:
        return parse(text, key)
    except ValueError as e:
        log.info("graph cache: discarding entry %s (%s): rebuilding it", path, e)
        return None


def parse(text: str, key: str) -> CachedGraph:
    """The entry `render` wrote under `key`. Raises ValueError when `text` is not one (another
    format or key, a missing or malformed field, a kernel spec that does not validate)."""
    try:
        doc = json.loads(text)
        if doc.get("format") != FORMAT_VERSION or doc.get("key") != key:
            raise ValueError(f"format {doc.get('format')!r}, key {str(doc.get('key'))[:12]}")
        constants = doc["constants"]
        stats = doc["stats"]
        if not isinstance(constants, dict) or not isinstance(stats, dict) or not isinstance(doc["wrapper"], str):
            raise ValueError("malformed fields")
        return CachedGraph(doc["wrapper"], tuple(_spec_from_json(k) for k in doc["kernels"]),
                           {str(k): str(v) for k, v in constants.items()}, str(doc["device"]),
                           bool(doc["static_shapes"]), stats)
    except (KeyError, TypeError, AttributeError) as e:
        raise ValueError(f"{type(e).__name__}: {e}") from e


def constant_values(gm: torch.fx.GraphModule, cached: CachedGraph) -> dict[str, torch.Tensor]:
    """The wrapper's constants, read from `gm`'s attributes. Raises LookupError when one is
    missing or not a tensor (the entry does not fit this graph)."""
    out: dict[str, torch.Tensor] = {}
    for cname, target in cached.constants.items():
        value = getattr(gm, target, None)
        if not isinstance(value, torch.Tensor):
            raise LookupError(f"graph attribute {target!r} is not a tensor")
        out[cname] = value
    return out


# -- the key ---------------------------------------------------------------------------------------

def graph_key(gm: torch.fx.GraphModule, kind: str, check_inputs: bool) -> str:
    """The cache key of `gm` (see the module docstring). Raises Uncacheable."""
    h = hashlib.sha256()

    def add(*parts: object) -> None:
        for p in parts:
            h.update(str(p).encode("utf-8"))
            h.update(b"\0")

    add(f"coil-graph-v{FORMAT_VERSION}", kind, check_inputs, code_fingerprint(), knob_fingerprint())
    devices: set[torch.device] = set()
    add_graph(add, gm, devices)
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            add("input", node.name, describe(node.meta.get("val"), devices))
    add("shape env", _shape_env(gm))
    add_devices(add, devices)
    return h.hexdigest()


def add_graph(add: Callable[..., None], gm: torch.fx.GraphModule, devices: set[torch.device]) -> None:
    """Feed `add` the part of a key that fixes `gm` itself: the canonical print of its graph and
    of every GraphModule attribute, and every tensor attribute the graph reads (metadata and a
    sha256 of its bytes; their devices go to `devices`). Raises Uncacheable for an attribute
    that is neither a tensor nor a GraphModule."""
    for name, mod in gm.named_modules():
        if isinstance(mod, torch.fx.GraphModule):
            # the graph's canonical print (every node: name, op, target, args, kwargs); cheaper
            # than `mod.code`, which makes a lazy AOT module generate its Python (slow on big graphs)
            add("module", name, type(mod.graph._codegen).__name__, str(mod.graph))
    for target, value in _attributes(gm):
        if isinstance(value, torch.Tensor):
            add("constant", target, describe(value, devices), _digest(value))
        elif not isinstance(value, torch.fx.GraphModule):
            raise Uncacheable(f"attribute {target!r} is a {type(value).__name__}")


def add_devices(add: Callable[..., None], devices: set[torch.device]) -> None:
    """Feed `add` the CUDA version and each CUDA device's name, compute capability and SM count
    (the split-reduction rule's machine fact, `coil.lowering_ir.SplitRule`)."""
    for d in sorted(devices, key=str):
        if d.type == "cuda":
            index = d.index if d.index is not None else torch.cuda.current_device()
            add("cuda", torch.version.cuda, torch.cuda.get_device_name(index), torch.cuda.get_device_capability(index),
                torch.cuda.get_device_properties(index).multi_processor_count)


def _attributes(gm: torch.fx.GraphModule) -> list[tuple[str, Any]]:
    """(target, value) of every get_attr node, in graph order."""
    out = []
    for node in gm.graph.nodes:
        if node.op == "get_attr":
            value: Any = gm
            for part in str(node.target).split("."):
                value = getattr(value, part, None)
            out.append((str(node.target), value))
    return out


def _tensor_attributes(gm: torch.fx.GraphModule) -> list[tuple[str, torch.Tensor]]:
    return [(t, v) for t, v in _attributes(gm) if isinstance(v, torch.Tensor)]


def describe(val: Any, devices: set[torch.device]) -> str:
    """Text that fixes everything coil reads from a placeholder or constant value."""
    if isinstance(val, torch.Tensor):
        devices.add(val.device)
        return (f"tensor {val.dtype} {val.device} {val.layout} {type(val).__name__ if not _plain(val) else ''}"
                f"{[str(s) for s in val.shape]} {[str(s) for s in val.stride()]} {val.storage_offset()}")
    if isinstance(val, torch.SymInt | torch.SymFloat | torch.SymBool):
        return f"{type(val).__name__} {val.node.expr}"
    if val is None or isinstance(val, bool | int | float | str | torch.dtype | torch.device):
        return f"{type(val).__name__} {val!r}"
    raise Uncacheable(f"a placeholder value of type {type(val).__name__}")


def _plain(t: torch.Tensor) -> bool:
    from torch._subclasses.fake_tensor import FakeTensor

    return type(t) in (torch.Tensor, torch.nn.Parameter, FakeTensor)


def plain_data(t: torch.Tensor) -> bool:
    """Whether `t` is a real, dense tensor with its data (not fake, meta, sparse or a subclass)."""
    return type(t) in (torch.Tensor, torch.nn.Parameter) and t.device.type != "meta" and not t.is_sparse


def _digest(t: torch.Tensor) -> str:
    """sha256 of a constant tensor's elements (the values may be folded into the code)."""
    if t.device.type == "meta" or not _plain(t) or t.is_sparse:
        raise Uncacheable("a constant tensor without plain data")
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    with unset_fake_temporarily():  # the compile may run under AOTAutograd's FakeTensorMode
        raw = t.detach().contiguous().reshape(-1).view(torch.uint8)
        return hashlib.sha256(raw.cpu().numpy().tobytes()).hexdigest()


def _shape_env(gm: torch.fx.GraphModule) -> str:
    """The ShapeEnv facts lowering may use: hints, value ranges and replacements of its symbols."""
    for node in gm.graph.nodes:
        env = getattr(getattr(node.meta.get("val"), "fake_mode", None), "shape_env", None)
        if env is None:
            continue
        hints = getattr(env, "backed_var_to_val", None)
        if hints is None:
            hints = env.var_to_val
        ranges = getattr(env, "var_to_range", {})
        parts = [f"{s}={hints[s]} in {ranges.get(s)}" for s in sorted(hints, key=str)]
        replacements = getattr(env, "replacements", {})
        parts += [f"{s}->{e}" for s, e in sorted(replacements.items(), key=lambda kv: str(kv[0]))]
        return "; ".join(parts)
    return ""


def knob_fingerprint() -> str:
    """Every knob that may change the compiled code, as text (read now: overrides count)."""
    owned = sorted(n for n, k in KNOBS.items() if k.owner == "coil.backend" and n not in IGNORED_KNOBS)
    parts = [f"backend.{n}={getattr(knobs, n)!r}" for n in owned]
    parts += [f"{KNOBS[n].owner.removeprefix('coil.')}.{n}={getattr(knobs, n)!r}" for n in KEYED_ELSEWHERE]
    return ", ".join(parts)


@functools.cache
def code_fingerprint() -> str:
    """Versions of Python, torch, triton and every coil distribution, and a sha256 of the source
    of every coil package (computed once per process)."""
    h = hashlib.sha256(sys.version.encode())
    for dist in _DISTRIBUTIONS:
        try:
            version = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            version = "not installed"
        h.update(f"{dist}={version}\0".encode())
    h.update(f"torch={torch.__version__}\0".encode())
    for name in _PACKAGES:
        module = importlib.import_module(name)
        for root in map(Path, module.__path__):
            for f in sorted(root.rglob("*.py")):
                h.update(f"{name}/{f.relative_to(root).as_posix()}\0".encode())
                h.update(f.read_bytes())
    return h.hexdigest()


# -- JSON of kernel specs --------------------------------------------------------------------------

def _spec_json(s: KernelSpec) -> dict[str, Any]:
    args = [{"tensor": str(a.dtype).removeprefix("torch.")} if isinstance(a, TensorArg) else a for a in s.args]
    return {"name": s.name, "source": s.source, "args": args, "constexprs": dict(s.constexprs),
            "num_warps": s.num_warps, "num_stages": s.num_stages, "debug": s.debug}


def _spec_from_json(d: dict[str, Any]) -> KernelSpec:
    args: list[TensorArg | int] = []
    for a in d["args"]:
        if isinstance(a, dict):
            dtype = getattr(torch, str(a["tensor"]), None)
            if not isinstance(dtype, torch.dtype):
                raise ValueError(f"unknown dtype {a['tensor']!r}")
            args.append(TensorArg(dtype))
        else:
            args.append(a)
    return KernelSpec(d["name"], d["source"], tuple(args), dict(d["constexprs"]), num_warps=d["num_warps"],
                      num_stages=d["num_stages"], debug=d["debug"])
