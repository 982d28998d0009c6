"""Warm starts through torch's AOTAutograd cache (COIL_AOT_CACHE): skip AOTAutograd and coil.

torch caches the result of `aot_module_simplified` across processes (AOTAutogradCache, in
`<TORCHINDUCTOR_CACHE_DIR>/aotautograd/<key>/`) for a backend whose forward, backward and
inference compilers are `SerializableAOTDispatchCompiler`s returning an `OutputCode`. A hit skips
tracing the joint graph, decompositions, the min-cut partition and the compilers: torch unpickles
the entry, calls each `OutputCode.post_compile`, and rebuilds its runtime wrappers. What coil
provides:

- `CoilOutputCode`: the compiled graph as torch's cache stores it. It holds a `PortableGraph`
  (the graph-cache entry text: wrapper source, kernel specs with their Triton source, stats; and
  the constant tensors by value) or the reason it cannot be stored, and the `Loader` the
  pipeline gave it; `post_compile` after a load rebuilds the callable with that loader (kernels
  through coil.runtime, the wrapper exec'd).
- `torch_settings()`: torch stores such entries only in its "bundled" mode
  (`torch._functorch.config.bundled_autograd_cache`; otherwise an entry names FxGraphCache keys,
  which only Inductor makes), and stores a training graph only once its backward is compiled;
  coil therefore compiles the backward together with the forward
  (`force_non_lazy_backward_lowering`). Both are set only for the duration of coil's call.
- `portable_module(gm)`: the backward module torch keeps in an entry pickles its tensors by
  value (the pipeline's partitioner calls it).
- `salt(gm)`: torch's key covers the Dynamo graph, input metadata, torch/Triton versions and
  torch's configs, not which backend compiled the entry nor coil's knobs. coil stores a salt as
  an attribute of the GraphModule, whose attributes torch's key pickles: sha256 of coil's code
  and knob fingerprints (`graph_cache`), COIL_CACHE_DIR and the CUDA device.
- `unusable(gm)`: why the AOT cache cannot be used for this call (knob off, graph cache off,
  debug output wanted, torch's cache disabled or refusing the graph), or None; logged at INFO.
- `watch()`: torch's verdict for one call ("hit", "miss", "bypass") read from its counters.

Damaged entries: a payload whose checksum does not match fails to unpickle, so torch skips that
file (with its own warning), compiles, and writes a fresh entry. An entry that unpickles but
does not load (`post_compile` raises) makes torch bypass its cache for that call: the graph is
compiled again, correctly, but torch does not rewrite the entry.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import logging
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
import torch.fx
from coil.backend.caches import graph_cache
from coil.knobs import knobs
from torch._inductor.output_code import OutputCode

log = logging.getLogger("coil.backend")

FORMAT_VERSION = 3  # raised whenever CoilOutputCode's pickled fields change: older entries then miss
SALT_ATTRIBUTE = "_coil_aot_cache_salt"
# the key an embedded graph-cache entry is rendered under (the AOT entry is keyed by torch)
ENTRY_KEY = "aotentry"
_TORCH_SETTINGS = {"bundled_autograd_cache": True, "force_non_lazy_backward_lowering": True}


@dataclasses.dataclass(frozen=True)
class PortableGraph:
    """A compiled graph as the AOT cache stores it: `text` is a graph-cache entry
    (`graph_cache.render`, key `ENTRY_KEY`) whose constants map to keys of `constants`.

    Pickled with each constant as raw bytes plus dtype, size, stride and device
    (`pack_tensor`), never as a torch tensor: torch pickles the entry while AOTAutograd's
    FakeTensorMode may be active, and pickling a CUDA tensor copies it to the CPU, which
    FakeTensorMode refuses for a real tensor ("Please convert all Tensors to FakeTensors first
    ... aten._to_copy"): no GPU entry could be stored. Unpickling puts each constant back on its
    device.
    """

    text: str
    constants: dict[str, torch.Tensor]

    def checksum(self) -> str:
        return hashlib.sha256(self.text.encode("utf-8")).hexdigest()

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return _unpickle_graph, (self.text, {k: pack_tensor(t) for k, t in self.constants.items()})


PackedTensor = tuple[str, tuple[int, ...], tuple[int, ...], int, str, bytes]


def pack_tensor(t: torch.Tensor) -> PackedTensor:
    """(dtype name, size, stride, storage offset, device, the bytes of its whole storage): the
    tensor exactly, expanded or overlapping strides included."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    with unset_fake_temporarily():
        storage = t.untyped_storage()
        whole = torch.empty(0, dtype=torch.uint8, device=t.device).set_(storage)
        raw = whole.cpu().numpy().tobytes() if storage.nbytes() else b""
    return (str(t.dtype).removeprefix("torch."), tuple(t.shape), tuple(t.stride()), int(t.storage_offset()),
            str(t.device), raw)


def unpack_tensor(packed: PackedTensor) -> torch.Tensor:
    """The tensor `pack_tensor` packed, on its device. ValueError for an unknown dtype."""
    dtype_name, size, stride, offset, device, raw = packed
    dtype = getattr(torch, dtype_name, None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"coil AOT cache entry: unknown dtype {dtype_name!r}")
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    with unset_fake_temporarily():
        data = torch.frombuffer(bytearray(raw), dtype=torch.uint8) if raw else torch.empty(0, dtype=torch.uint8)
        storage = data.to(device).untyped_storage()
        return torch.empty(0, dtype=dtype, device=device).set_(storage, offset, size, stride)


def _unpickle_graph(text: str, constants: dict[str, PackedTensor]) -> PortableGraph:
    return PortableGraph(text, {k: unpack_tensor(v) for k, v in constants.items()})


@dataclasses.dataclass(frozen=True)
class _PackedAttribute:
    """A graph module's tensor attribute as `pack_tensor` packed it (see `portable_module`)."""

    packed: PackedTensor


def _map_attributes(body: dict[str, Any], fn: Callable[[Any], Any]) -> dict[str, Any]:
    """A module's `__dict__` (as its `__reduce__` gives it) with `fn` applied to every attribute
    and every buffer."""
    out = {k: fn(v) for k, v in body.items()}
    if isinstance(out.get("_buffers"), dict):
        out["_buffers"] = {k: fn(v) for k, v in out["_buffers"].items()}
    return out


def _unpack_attribute(v: Any) -> Any:
    return unpack_tensor(v.packed) if isinstance(v, _PackedAttribute) else v


def _pack_attribute(v: Any) -> Any:
    return _PackedAttribute(pack_tensor(v)) if type(v) is torch.Tensor else v


def _rebuild_module(rebuild: Callable[..., Any], body: dict[str, Any], *rest: Any) -> Any:
    """Unpickle a module `portable_module` made portable: its tensors back, then torch's rebuild."""
    return rebuild(_map_attributes(body, _unpack_attribute), *rest)


def portable_module(gm: torch.fx.GraphModule) -> None:
    """Make `gm` pickle its tensor attributes and buffers by value (`pack_tensor`), like
    `PortableGraph` does its constants.

    torch keeps the backward graph module in the AOTAutograd cache entry (for a lazy backward
    compile) and pickles it while AOTAutograd's FakeTensorMode is active; a real CUDA tensor
    attribute (a constant the graph reads, e.g. GPT-2's 0-d attention mask value) would fail to
    pickle ("Please convert all Tensors to FakeTensors first ... aten._to_copy"), and no entry of
    the graph would be stored: every warm start would miss. The module torch stores is the
    partitioner's (the backward compiler gets a deep copy), so the pipeline's partitioner
    (`coil.backend.pipeline.partition`) calls this. Each fx GraphModule has a class of its own,
    so overriding `__reduce__` there changes this module only; unpickling rebuilds it with every
    tensor back on its device.
    """
    cls = type(gm)
    if getattr(cls, "_coil_portable", False):
        return
    reduce = cls.__reduce__

    def __reduce__(self: torch.fx.GraphModule) -> tuple[Any, tuple[Any, ...]]:
        rebuild, (body, *rest) = reduce(self)
        return _rebuild_module, (rebuild, _map_attributes(body, _pack_attribute), *rest)

    cls.__reduce__ = __reduce__  # type: ignore[assignment,method-assign]
    cls._coil_portable = True  # type: ignore[attr-defined]


# rebuilds a stored graph's boxed callable: (kind, parsed entry, constants by value, the
# compile's static inputs) -> callable; raises LookupError when the entry does not load
Loader = Callable[[str, graph_cache.CachedGraph, dict[str, torch.Tensor], tuple[int, ...]],
                  Callable[[list[Any]], Any]]


class CoilOutputCode(OutputCode):
    """One compiled forward, backward or inference graph, as torch's AOTAutograd cache holds it.

    Called with the boxed convention (a list of inputs). Fresh from a compile it holds the live
    callable; `prepare_for_serialization` (on a copy) drops it, or raises torch's
    `BypassAOTAutogradCache` when the graph is not storable (`refusal`: an eager fallback, a
    constant without plain data). Unpickling checks the payload's sha256 and parses it
    (ValueError when either fails: torch then skips the file); `post_compile` rebuilds the
    callable with `load` (the pipeline's `load_portable`). `load` must be a module-level
    function: it is pickled by reference, so this cache layer never imports the pipeline.
    """

    def __init__(self, kind: str, call: Callable[[list[Any]], Any], graph: PortableGraph | None,
                 refusal: str = "", *, load: Loader, static_inputs: tuple[int, ...] = ()) -> None:
        super().__init__()
        self.kind = kind
        self.load = load
        self.static_inputs = static_inputs  # GraphStats.static_inputs of the compile
        self.graph = graph
        self.refusal = refusal
        self.checksum = graph.checksum() if graph is not None else ""
        self.format = FORMAT_VERSION
        self._call: Callable[[list[Any]], Any] | None = call
        self._parsed: graph_cache.CachedGraph | None = None
        self._boxed_call = True
        self._time_taken_ns = 0  # torch adds it up (None would break its arithmetic)

    def __call__(self, inputs: Sequence[Any]) -> Any:
        if self._call is None:
            raise RuntimeError(f"coil: a cached {self.kind} graph called before post_compile loaded it")
        return self._call(inputs)  # type: ignore[arg-type]

    def prepare_for_serialization(self) -> None:
        if self.graph is None:
            from torch._functorch._aot_autograd.autograd_cache import BypassAOTAutogradCache

            log.info("AOT cache: not storing this %s graph: %s", self.kind, self.refusal)
            raise BypassAOTAutogradCache(f"coil: {self.refusal}")
        self._call = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_call"] = state["_parsed"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        # unpickling, and `copy.copy` (torch copies the result before preparing it)
        graph = state.get("graph")
        if state.get("format") != FORMAT_VERSION or not (graph is None or isinstance(graph, PortableGraph)):
            raise ValueError("coil AOT cache entry of another format")
        self.__dict__.update(state)
        if graph is not None:  # None: a refused graph, copied only to be refused again
            if graph.checksum() != state.get("checksum"):
                raise ValueError("coil AOT cache entry damaged: checksum mismatch")
            self._parsed = graph_cache.parse(graph.text, ENTRY_KEY)

    def post_compile(self, example_inputs: Sequence[Any], constants: Any, graph_kwargs: Any) -> None:
        if self._call is not None:
            return
        assert self.graph is not None
        parsed = self._parsed or graph_cache.parse(self.graph.text, ENTRY_KEY)
        self._call = self.load(self.kind, parsed, self.graph.constants, self.static_inputs)

    def set_triton_bundle(self, triton_bundle: Any) -> None:
        """coil's kernels travel as source in the entry; torch's Triton bundle is not used."""


def portable(graph: str, kind: str, cached: graph_cache.CachedGraph,
             constants: dict[str, torch.Tensor]) -> PortableGraph | str:
    """The PortableGraph of a compiled graph (`cached` as the graph cache would store it, the
    wrapper's constants by value), or why it cannot be stored."""
    for cname, t in constants.items():
        if not isinstance(t, torch.Tensor):  # a higher-order op's subgraph
            return f"constant {cname} is a {type(t).__name__}, not a tensor"
        if not graph_cache.plain_data(t):
            return f"constant {cname} has no plain data ({type(t).__name__} on {t.device})"
    text = graph_cache.render(ENTRY_KEY, graph, kind, cached.wrapper, cached.specs, {c: c for c in constants},
                              cached.device, cached.static_shapes, cached.stats)
    return PortableGraph(text, dict(constants))


def unusable(gm: torch.fx.GraphModule) -> str | None:
    """Why torch's AOTAutograd cache cannot serve this Dynamo graph now, or None."""
    if not knobs.aot_cache:
        return "COIL_AOT_CACHE=0"
    reason = graph_cache.skip_reason()
    if reason is not None:
        return reason
    try:
        from torch._functorch import config as functorch_config
        from torch._functorch._aot_autograd import autograd_cache
        from torch._functorch._aot_autograd.schemas import SerializableAOTDispatchCompiler  # noqa: F401
    except ImportError as e:
        return f"this torch has no serializable AOTAutograd compilers ({e})"
    missing = [n for n in _TORCH_SETTINGS if not hasattr(functorch_config, n)]
    if missing:
        return f"this torch lacks torch._functorch.config.{', '.join(missing)}"
    if not autograd_cache.should_use_local_autograd_cache():
        return "torch's AOTAutograd cache is off (TORCHINDUCTOR_AUTOGRAD_CACHE=0 or force_disable_caches)"
    why = torch_refusal(gm)
    return None if why is None else f"torch refuses this graph: {why}"


def torch_refusal(gm: torch.fx.GraphModule) -> str | None:
    """torch's own reason not to cache `gm` (`check_cacheable`: a call of a function outside its
    allowlist, which a key names without its code; its FX graph cache off), or None. Raises
    ImportError on a torch without the AOTAutograd cache."""
    from torch._functorch._aot_autograd import autograd_cache

    try:
        autograd_cache.check_cacheable(gm)
    except Exception as e:  # BypassAOTAutogradCache and anything else: torch would bypass too
        return str(e)
    return None


def serializable(compiler: Callable[[torch.fx.GraphModule, Sequence[Any]], CoilOutputCode]) -> Any:
    """`compiler` wrapped as torch's SerializableAOTDispatchCompiler (what turns the cache on)."""
    from torch._functorch._aot_autograd.schemas import SerializableAOTDispatchCompiler

    return SerializableAOTDispatchCompiler(CoilOutputCode, compiler)


def salt(gm: torch.fx.GraphModule) -> None:
    """Add coil's part of the key to `gm` (an attribute, which torch's key pickles)."""
    h = hashlib.sha256(f"coil-aot-v{FORMAT_VERSION}".encode())
    parts: list[object] = [graph_cache.code_fingerprint(), graph_cache.knob_fingerprint(), knobs.cache_dir]
    if torch.cuda.is_available():
        i = torch.cuda.current_device()
        parts += [torch.version.cuda, torch.cuda.get_device_name(i), torch.cuda.get_device_capability(i),
                  torch.cuda.get_device_properties(i).multi_processor_count]
    for p in parts:
        h.update(str(p).encode("utf-8") + b"\0")
    setattr(gm, SALT_ATTRIBUTE, h.hexdigest())


@contextlib.contextmanager
def torch_settings() -> Iterator[None]:
    """torch's settings coil's entries need, for the duration of one backend call."""
    from torch._functorch import config as functorch_config

    with functorch_config.patch(_TORCH_SETTINGS):
        yield


@dataclasses.dataclass
class Verdict:
    """What torch's AOTAutograd cache did in one call: "hit", "miss" (looked up, not found: the
    graph was compiled), "bypass" (torch did not look up) or "off" (torch did nothing), and
    whether an entry was written."""

    status: str = "off"
    saved: bool = False


@contextlib.contextmanager
def watch() -> Iterator[Verdict]:
    """Read torch's cache counters around one `aot_module_simplified` call."""
    from torch._dynamo.utils import counters

    verdict = Verdict()
    before = dict(counters["aot_autograd"])
    try:
        yield verdict
    finally:
        after = counters["aot_autograd"]

        def grew(name: str) -> bool:
            return after.get(name, 0) > before.get(name, 0)

        for status in ("hit", "miss", "bypass"):  # a miss whose entry was refused counts both
            if grew(f"autograd_cache_{status}"):
                verdict.status = status
                break
        verdict.saved = grew("autograd_cache_saved")
