"""The frontend cache (COIL_FRONTEND_CACHE): a warm start that skips AOTAutograd altogether.

torch's AOTAutograd cache (`aot_cache`) already skips AOTAutograd's tracing and coil's pipeline
on a warm start, but computing its key costs a process a large share of that warm start before
anything loads: the key imports Inductor's compiler and every Inductor device backend
(`FxGraphHashDetails` calls `init_backend_registration()`; docs/perf.md). This cache sits in
front of it: keyed on the Dynamo graph as the backend receives it, it holds the one compiled
inference graph AOTAutograd made of it, and a hit calls that graph directly.
(`coil.backend.pipeline.backend` also imports AOTAutograd only when it calls it; with
backend="coil" given by name, torch's backend registry imports it anyway, through
`torch._dynamo.backends.common`.)

Contract:

- `lookup(gm, example_inputs)` (before the pre-grad passes) gives a `Lookup`: "hit" with the
  stored `Entry`, "miss" (look-up done, nothing stored: the backend compiles and may `store`),
  or "off" with the reason (`Lookup.reason`, logged at INFO by the caller). Never raises.
- It serves only what it can serve exactly as AOTAutograd would: an inference graph (grad
  mode off, or no input requiring grad) whose inputs are plain dense tensors on the CPU or
  CUDA with static shapes, none passed twice; a Dynamo graph with no parameters, buffers or
  submodules other than GraphModules (all inputs, as Dynamo gives them by default); not under
  torch's caching precompile (Dynamo's package records AOTAutograd's result by backend id); and
  only a graph torch's own AOTAutograd cache would accept (`check_cacheable`: every function it
  calls is known to torch, since a key names a function without its code).
- `Recorder` / `recording()`: while active, the inference compiler reports the graph it
  compiled (`note`), with whether AOTAutograd's metadata for it is trivial (`plain_metadata`:
  no input mutated, every output a fresh tensor, no intermediate bases, effect tokens,
  subclasses, RNG functionalization, grad-mode change or dynamic outputs). Only then is the
  runtime wrapper AOTAutograd puts around the graph the identity, apart from grad mode off and
  autocast off (`runtime`), and only then is an entry stored.
- `store(lookup, recorder)` writes the entry: the compiled graph as `aot_cache.PortableGraph`
  text (wrapper, kernel sources, stats) and its constants by value (base64), atomically
  (`coil.runtime.disk_cache` blob: checksummed, `<COIL_CACHE_DIR>/frontend/<key[:2]>/<key>.blob`).
  Never raises: it returns "stored" or why not.
- `runtime(call, disable_amp)`: the callable Dynamo gets: runs the boxed graph with grad mode
  off and, when autocast was on at compile time, autocast off (as AOTAutograd's RuntimeWrapper).

The key (sha256): the Dynamo graph (`graph_cache.add_graph`: canonical print, tensor attributes
by value), each input's dtype, device, layout, sizes, strides, storage offset and
requires_grad, grad mode, autocast state (per device type, dtype, cache), the default dtype,
deterministic algorithms, float32 matmul precision, the cuDNN and fused-attention switches of
torch.backends, torch's functorch config, and coil's code, versions and knobs
(`graph_cache.code_fingerprint`, `knob_fingerprint`) and CUDA devices.

A damaged entry (checksum, format, parse, or a load that fails) reads as a miss and is
rebuilt by the full path, whose store replaces it. When torch's own AOTAutograd cache serves
the graph in the same call, nothing is stored (AOTAutograd's metadata is not available on its
hit); a later process that misses both stores it.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import hashlib
import json
import logging
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
import torch.fx
from coil.backend.caches import graph_cache
from coil.backend.caches.aot_cache import ENTRY_KEY, pack_tensor, torch_refusal, unpack_tensor
from coil.knobs import knobs
from coil.runtime import disk_cache

log = logging.getLogger("coil.backend")

__all__ = ["Entry", "Lookup", "Recorder", "lookup", "plain_metadata", "recording", "runtime", "store"]

FORMAT_VERSION = 1
NAMESPACE = "frontend"
_AUTOCAST_DEVICES = ("cpu", "cuda")


@dataclasses.dataclass(frozen=True)
class Entry:
    """A stored graph: `text` is an AOT-cache graph text (`aot_cache.PortableGraph.text`, parsed
    with `graph_cache.parse(text, aot_cache.ENTRY_KEY)`), `constants` its constants by value."""

    text: str
    constants: dict[str, torch.Tensor]


@dataclasses.dataclass
class Lookup:
    """One backend call's look-up: `status` "hit", "miss" or "off"; `reason` why "off"."""

    status: str
    key: str | None = None
    entry: Entry | None = None
    reason: str = ""


@dataclasses.dataclass
class Recorder:
    """What the inference compiler reported during one backend call (`note`)."""

    graphs: list[tuple[Any, str | None]] = dataclasses.field(default_factory=list)

    def note(self, graph: Any, metadata_problem: str | None) -> None:
        """One compiled inference graph: its `PortableGraph` (or why it cannot be stored, a str)
        and what keeps AOTAutograd's metadata from being trivial (None: nothing)."""
        self.graphs.append((graph, metadata_problem))


_RECORDER: Recorder | None = None


@contextlib.contextmanager
def recording(active: bool) -> Iterator[Recorder | None]:
    """Collect the inference graphs compiled inside the block (when `active`)."""
    global _RECORDER
    if not active:
        yield None
        return
    outer, _RECORDER = _RECORDER, Recorder()
    try:
        yield _RECORDER
    finally:
        _RECORDER = outer


def recorder() -> Recorder | None:
    """The active recorder, if any (read by the inference compiler)."""
    return _RECORDER


def _unusable(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> str | None:
    """Why this call cannot be served by the frontend cache, or None."""
    if not knobs.frontend_cache:
        return "COIL_FRONTEND_CACHE=0"
    reason = graph_cache.skip_reason()
    if reason is not None:
        return reason
    if _torch_caches_disabled():
        return "TORCHINDUCTOR_FORCE_DISABLE_CACHES=1"
    if getattr(gm, "_backend_id", None) is not None or _caching_precompile():
        return "torch's caching precompile records AOTAutograd's result"
    if next(gm.parameters(), None) is not None or next(gm.buffers(), None) is not None:
        return "the Dynamo graph has parameters or buffers of its own"
    if any(not isinstance(m, torch.fx.GraphModule) for _, m in gm.named_modules()):
        return "the Dynamo graph calls a submodule"
    seen: set[int] = set()
    for i, x in enumerate(example_inputs):
        if type(x) not in (torch.Tensor, torch.nn.Parameter):
            return f"input {i} is a {type(x).__name__}"
        if x.device.type not in ("cpu", "cuda") or x.layout != torch.strided:
            return f"input {i} is on {x.device} with layout {x.layout}"
        if id(x) in seen:
            return f"input {i} is passed twice"
        seen.add(id(x))
    for node in gm.graph.find_nodes(op="placeholder"):
        v = node.meta.get("example_value")
        if not isinstance(v, torch.Tensor) or not _static(v):
            return f"placeholder {node.name} is not a tensor of static shape"
    if torch.is_grad_enabled() and any(x.requires_grad for x in example_inputs):
        return "a training graph (grad mode on, an input requires grad)"
    return _refused_by_torch(gm)


def _refused_by_torch(gm: torch.fx.GraphModule) -> str | None:
    """Why torch's AOTAutograd cache would refuse this graph (`aot_cache.torch_refusal`), or
    None. The frontend cache keys graphs the same way, so it refuses the same ones."""
    try:
        why = torch_refusal(gm)
    except ImportError as e:
        return f"this torch has no AOTAutograd cache checks ({e})"
    return None if why is None else f"torch's AOTAutograd cache would refuse this graph: {why}"


def _static(v: torch.Tensor) -> bool:
    return all(isinstance(s, int) for s in (*v.shape, *v.stride(), v.storage_offset()))


def _torch_caches_disabled() -> bool:
    try:
        from torch._inductor import config as inductor_config
    except ImportError:
        return False
    return bool(getattr(inductor_config, "force_disable_caches", False))


def _caching_precompile() -> bool:
    return bool(getattr(torch._dynamo.config, "caching_precompile", False))


def key(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> str:
    """The key of this backend call (see the module docstring). Raises graph_cache.Uncacheable."""
    h = hashlib.sha256()

    def add(*parts: object) -> None:
        for p in parts:
            h.update(str(p).encode("utf-8"))
            h.update(b"\0")

    add(f"coil-frontend-v{FORMAT_VERSION}", graph_cache.code_fingerprint(), graph_cache.knob_fingerprint())
    devices: set[torch.device] = set()
    graph_cache.add_graph(add, gm, devices)
    for i, x in enumerate(example_inputs):
        add("input", i, graph_cache.describe(x, devices), x.requires_grad)
    add("grad", torch.is_grad_enabled(), "default dtype", torch.get_default_dtype(),
        "deterministic", torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(), "matmul", torch.get_float32_matmul_precision())
    for d in _AUTOCAST_DEVICES:
        add("autocast", d, torch.is_autocast_enabled(d), torch.get_autocast_dtype(d))
    add("autocast cache", torch.is_autocast_cache_enabled(), "backends", _backend_flags())
    from torch._functorch import config as functorch_config

    add("functorch", sorted((k, repr(v)) for k, v in functorch_config.get_config_copy().items()))
    graph_cache.add_devices(add, devices)
    return h.hexdigest()


def _backend_flags() -> list[object]:
    """The torch.backends switches AOTAutograd's trace may depend on: which fused attention
    `scaled_dot_product_attention` dispatches to, and whether cuDNN kernels (batch norm) are used."""
    cuda = torch.backends.cuda
    flags: list[object] = [torch.backends.cudnn.enabled, torch.backends.cudnn.deterministic]
    for name in ("flash_sdp_enabled", "mem_efficient_sdp_enabled", "math_sdp_enabled", "cudnn_sdp_enabled"):
        fn = getattr(cuda, name, None)
        flags.append(fn() if callable(fn) else None)
    return flags


def lookup(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Lookup:
    """The look-up for one backend call (module docstring). Never raises."""
    try:
        reason = _unusable(gm, example_inputs)
        if reason is not None:
            return Lookup("off", reason=reason)
        k = key(gm, example_inputs)
    except Exception as e:  # Uncacheable, or anything the key could not describe
        return Lookup("off", reason=f"no key: {type(e).__name__}: {e}")
    entry = _load(k)
    return Lookup("hit" if entry is not None else "miss", k, entry)


def _path(k: str) -> Any:
    return disk_cache.blob_path(knobs.cache_dir, NAMESPACE, k)


def _load(k: str) -> Entry | None:
    path = _path(k)
    text = disk_cache.read_blob(path, k)
    if text is None:
        return None
    try:
        doc = json.loads(text)
        if doc.get("format") != FORMAT_VERSION or doc.get("key") != k or not isinstance(doc["graph"], str):
            raise ValueError("another format or key")
        constants = {str(n): unpack_tensor((p[0], tuple(p[1]), tuple(p[2]), int(p[3]), str(p[4]),
                                            base64.b64decode(p[5])))
                     for n, p in doc["constants"].items()}
        return Entry(doc["graph"], constants)
    except Exception as e:  # a damaged or foreign entry: rebuilt by the full path
        log.info("frontend cache: discarding entry %s (%s): rebuilding it", path, e)
        return None


def store(found: Lookup, rec: Recorder | None) -> str:
    """Store the graph `rec` saw under `found.key` when it can be served (module docstring).
    Returns what happened: "stored", or why not (logged at INFO). Never raises: the graph is
    compiled and runs whether or not it is stored."""
    try:
        why = _why_not_stored(found, rec)
        if why is None:
            assert rec is not None and found.key is not None
            graph = rec.graphs[0][0]
            packed = {}
            for n, t in graph.constants.items():
                dtype, size, stride, offset, device, raw = pack_tensor(t)
                packed[n] = [dtype, list(size), list(stride), offset, device, base64.b64encode(raw).decode("ascii")]
            doc = {"format": FORMAT_VERSION, "key": found.key, "graph": graph.text, "constants": packed}
            disk_cache.write_blob(_path(found.key), found.key, json.dumps(doc))
            return "stored"
    except Exception as e:  # an unwritable folder, a constant that does not pack
        why = f"could not write it: {type(e).__name__}: {e}"
    log.info("frontend cache: not storing this graph: %s", why)
    return why


def _why_not_stored(found: Lookup, rec: Recorder | None) -> str | None:
    if found.status != "miss" or rec is None:
        return f"the look-up was {found.status}"
    if len(rec.graphs) != 1:
        return f"{len(rec.graphs)} inference graphs were compiled (torch's AOTAutograd cache served it, or a training graph)"
    graph, problem = rec.graphs[0]
    if isinstance(graph, str):
        return graph
    if problem is not None:
        return problem
    if not graph_cache.parse(graph.text, ENTRY_KEY).static_shapes:
        return "the compiled graph has symbolic shapes"
    return None


def plain_metadata(n_inputs: int) -> str | None:
    """Read inside the inference compiler: what makes AOTAutograd's metadata of the graph being
    compiled more than trivial (module docstring), or None when it is trivial. Never raises."""
    context = torch._guards.TracingContext.try_get()
    meta = getattr(context, "fw_metadata", None)
    if meta is None:
        return "no AOTAutograd metadata"
    try:
        if len(meta.input_info) != n_inputs:
            return "AOTAutograd changed the inputs (duplicates, synthetic bases)"
        for i, info in enumerate(meta.input_info):
            if info.mutates_data or info.mutates_metadata or getattr(info, "mutates_storage_metadata", False):
                return f"input {i} is mutated"
        from torch._functorch._aot_autograd.schemas import OutputType

        for i, out in enumerate(meta.output_info):
            if out.output_type != OutputType.non_alias:
                return f"output {i} is {out.output_type.name}"
        checks = {
            "intermediate bases": meta.num_intermediate_bases,
            "effect tokens": len(meta.tokens),
            "RNG functionalization": meta.is_rng_op_functionalized,
            "a grad-mode change": meta.grad_enabled_mutation is not None,
            "dynamic outputs": getattr(meta, "dynamic_outputs", False),
            "tensor subclasses": any(type(m).__name__ == "SubclassCreationMeta"
                                     for m in (*meta.subclass_inp_meta, *meta.subclass_fw_graph_out_meta)),
        }
    except Exception as e:  # another AOTAutograd than this was written against: never fail the compile
        return f"unknown AOTAutograd metadata ({type(e).__name__}: {e})"
    found = [name for name, v in checks.items() if v]
    return ", ".join(found) if found else None


def runtime(call: Callable[[list[Any]], Any], disable_amp: bool) -> Callable[..., Any]:
    """The callable Dynamo gets on a hit: `call` (boxed) with grad mode off and, with
    `disable_amp`, autocast off, as AOTAutograd's RuntimeWrapper runs an inference graph."""
    set_grad = torch._C._set_grad_enabled
    no_autocast = torch._C._DisableAutocast

    def forward(*args: Any) -> Any:
        grad = torch.is_grad_enabled()
        if grad:
            set_grad(False)
        try:
            if disable_amp:
                with no_autocast():
                    return call(list(args))
            return call(list(args))
        finally:
            if grad:
                set_grad(True)

    return forward
