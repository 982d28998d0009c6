"""Who holds the memory at a `coil bench` model case's warm peak.

    python bench/memory_probe.py CASE [MODES] [--quick] [--referrers MIB] [--torch-config NAME=VALUE ...]
                                                  (MODES comma-separated, default eager,inductor,coil)
    python bench/memory_probe.py --print FILE...  (summarise the JSON lines of earlier runs)

Runs `coil.bench.model_runs.run_model` for CASE exactly as `coil bench` does (one process,
the modes in turn, the fp64 reference alive), with the caching allocator recording every
allocation's Python stack. `--quick` runs it as `coil bench --quick` does (no first-call
processes: each mode compiles cold in this process), else each mode compiles from the caches its
first-call processes filled. For a step returning a CUDA tensor it says whether that tensor's
storage outlived the bench's `del`, a collection and the allocator's next allocation
(`result_fate`: who keeps a returned output), and likewise whether the first call's result (the
compiling call's) is still alive at the warm peak (`first_result`: its use count then, when it
is). `--torch-config NAME=VALUE` (repeatable) sets `torch.NAME` (e.g.
`_functorch.config.check_custom_op_aliasing=False`) before anything compiles: whether a torch
setting changes who holds what. `--referrers MIB` adds, for each CUDA tensor of
at least MIB MiB that Python can still reach after the call, the chains of objects that hold
it (`referrers`: what keeps alive a block the stacks show), and the whole allocation stack of
each live block of at least MIB MiB (tensors and storage objects both). At each mode's warm peak it prints one JSON line: the
bench's figures (`peak_mib`, `peak_allocated_mib`, memory by pool), and the blocks still
allocated after the call, per pool, grouped by the first stack frame in coil (else the first
outside torch), largest first; plus, per pool, the free bytes inside segments that also hold a
live block (what `empty_cache` cannot return), and coil's CUDA-graph runners by pool
(`coil.bench.measure.runner_lines`: which graph a pool's memory serves). The recording slows the
compile and the step; the memory figures are unchanged.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

MiB = 1 << 20


def _site(frames: list[dict[str, Any]]) -> str:
    """The frame that explains an allocation: the first in coil, else the first outside torch."""
    def fmt(f: dict[str, Any]) -> str:
        name = str(f.get("filename", "?"))
        tail = "/".join(name.split("/")[-2:])
        return f"{tail}:{f.get('line')}:{f.get('name')}"

    for f in frames:
        if "/coil/" in str(f.get("filename", "")):
            return fmt(f)
    for f in frames:
        name = str(f.get("filename", ""))
        if "/torch/" not in name and "/triton/" not in name and "/transformers/" not in name:
            return fmt(f)
    return fmt(frames[0]) if frames else "?"


def holders(top: int = 12, stacks_mib: float | None = None) -> dict[str, Any]:
    """Live blocks per pool grouped by `_site`, and the pinned free bytes per pool; with
    `stacks_mib`, also the whole allocation stack of each live block of at least that size."""
    import torch

    snap = torch.cuda.memory._snapshot()
    live: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    pinned: collections.Counter[str] = collections.Counter()
    pinners: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    stacks: dict[str, list[list[Any]]] = collections.defaultdict(list)
    for seg in snap["segments"]:
        pool = str(tuple(seg.get("segment_pool_id", (0, 0))))
        blocks = seg.get("blocks", [])
        sites: collections.Counter[str] = collections.Counter()
        free = 0
        for b in blocks:
            if b["state"] == "active_allocated":
                site = _site(b.get("frames", []))
                if stacks_mib is not None and b["size"] >= stacks_mib * MiB:
                    stacks[pool].append([round(b["size"] / MiB, 1)] + [
                        f"{str(f.get('filename', '?')).rsplit('/', 2)[-1]}:{f.get('line')}:{f.get('name')}"
                        for f in b.get("frames", [])])
                live[pool][site] += b["size"]
                sites[site] += b["size"]
            else:
                free += b["size"]
        if sites and free:
            pinned[pool] += free
            # the segment's free bytes, charged to the live blocks' sites (largest first), with
            # the segment's size and stream
            names = "+".join(f"{s}({n / MiB:.1f})" for s, n in sites.most_common(3))
            pinners[pool][f"seg {seg['total_size'] / MiB:.0f} MiB stream {seg.get('stream')}: {names}"] += free
    return {pool: {"live_mib": round(sum(c.values()) / MiB, 1),
                   "pinned_free_mib": round(pinned[pool] / MiB, 1),
                   "top": [(site, round(n / MiB, 1)) for site, n in c.most_common(top)],
                   "pinned_by": [(k, round(n / MiB, 1)) for k, n in pinners[pool].most_common(top)],
                   "stacks": stacks[pool]}
            for pool, c in live.items()}


def _name(o: Any, held: Any) -> str:
    """One link of a referrer chain: `o`'s type and where in it `held` sits."""
    import types

    if isinstance(o, types.FrameType):
        return f"frame {o.f_code.co_name} {o.f_code.co_filename.rsplit('/', 2)[-1]}:{o.f_lineno}"
    if isinstance(o, dict) and "__builtins__" in o:
        keys = [k for k, v in o.items() if v is held][:3]
        return f"global {', '.join(map(str, keys))} of {o.get('__name__')}"
    if isinstance(o, dict):
        keys = [k for k, v in o.items() if v is held][:3]
        return f"dict[{', '.join(map(repr, keys))}]"
    if isinstance(o, (list, tuple)):
        return f"{type(o).__name__}[{len(o)}]"
    return type(o).__qualname__


def referrers(min_mib: float, depth: int = 5) -> list[list[str]]:
    """For each real CUDA tensor (not a fake one in an FX node's meta) or storage object over at
    least `min_mib` MiB of storage that the garbage collector reaches, the chains of objects that refer to it (at most 4 a link,
    `depth` links, ending at a module's globals), this function's own frames and containers left
    out."""
    import gc
    import types

    import torch

    gc.collect()
    found = [o for o in gc.get_objects() if _cuda_storage_mib(o) >= min_mib]
    mine: set[int] = {id(found)}
    chains: list[list[str]] = []
    for t in found:
        head = (f"tensor {tuple(t.shape)} {t.dtype} {_cuda_storage_mib(t):.1f} MiB" if isinstance(t, torch.Tensor)
                else f"{type(t).__name__} {_cuda_storage_mib(t):.1f} MiB")
        todo: list[tuple[list[str], Any]] = [([head], t)]
        mine.add(id(todo))
        while todo:
            path, held = todo.pop()
            refs = [r for r in gc.get_referrers(held) if id(r) not in mine
                    and not (isinstance(r, types.FrameType) and r.f_code is referrers.__code__)]
            mine.add(id(refs))
            if not refs or len(path) > depth or isinstance(held, types.ModuleType) or path[-1].startswith("global "):
                chains.append(path)
                continue
            for r in refs[:4]:
                nxt = ([*path, _name(r, held)], r)
                mine.update({id(nxt), id(nxt[0])})
                todo.append(nxt)
            del refs, held  # no reference of this frame left to the next link's search
    del found
    return chains


def _cuda_storage_mib(o: Any) -> float:
    """MiB of the CUDA storage `o` holds: a real tensor's (not a fake one in an FX node's meta)
    or a storage object's; 0 for anything else."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensor

    if isinstance(o, torch.Tensor) and not isinstance(o, FakeTensor) and o.is_cuda:
        return float(o.untyped_storage().nbytes()) / MiB
    if isinstance(o, torch.UntypedStorage | torch.TypedStorage) and o.device.type == "cuda":
        return float(o.nbytes()) / MiB
    return 0.0


def result_storage(r: Any) -> tuple[Any, int] | None:
    """A weak reference to the storage of the step's result (a CUDA tensor) and the storage's
    use count as the step returns it (1: the result alone holds it); None for other results."""
    import torch

    if not isinstance(r, torch.Tensor) or not r.is_cuda:
        return None
    storage = r.untyped_storage()
    uses = torch._C._storage_Use_Count(storage._cdata) - 1  # less `storage` itself
    return storage._weak_ref(), uses


def result_fate(held: tuple[Any, int] | None) -> dict[str, Any]:
    """Whether the result's storage outlived the bench dropping it (`alive_after_del`), a full
    collection (`alive_after_gc`: not a reference cycle) and the caching allocator's next
    allocation after a synchronize (`alive_after_alloc`: not a block waiting on a recorded
    stream's event), with its use count as returned (`uses_at_return`)."""
    import gc

    import torch

    if held is None:
        return {}
    weak, uses = held
    fate = {"uses_at_return": uses, "alive_after_del": not torch.UntypedStorage._expired(weak)}
    gc.collect()
    fate["alive_after_gc"] = not torch.UntypedStorage._expired(weak)
    torch.cuda.synchronize()
    torch.empty(1 << 20, device="cuda")
    fate["alive_after_alloc"] = not torch.UntypedStorage._expired(weak)
    torch.UntypedStorage._free_weak_ref(weak)  # type: ignore[no-untyped-call]
    return fate


def still_alive(held: tuple[Any, int] | None) -> dict[str, Any]:
    """Whether the storage of an earlier result (`result_storage`) is still alive, and if it is,
    how many references hold it now (its weak reference left out)."""
    import torch

    if held is None:
        return {}
    weak, uses = held
    if torch.UntypedStorage._expired(weak):
        return {"uses_at_return": uses, "alive": False}
    storage = torch.UntypedStorage._new_with_weak_ptr(weak)
    return {"uses_at_return": uses, "alive": True, "uses_now": torch._C._storage_Use_Count(storage._cdata) - 1,
            "mib": round(storage.nbytes() / MiB, 1)}


def set_torch_config(setting: str) -> None:
    """`NAME=VALUE`: set `torch.NAME` to VALUE (a Python literal, else the string)."""
    import ast
    import importlib

    import torch

    name, _, text = setting.partition("=")
    owner_path, _, attr = f"torch.{name}".rpartition(".")
    owner = importlib.import_module(owner_path) if owner_path != "torch" else torch
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        value = text
    if not hasattr(owner, attr):
        raise SystemExit(f"memory_probe: torch.{name} does not exist")
    setattr(owner, attr, value)


def summarise(path: str) -> None:
    """Print a probe's JSON lines as an indented summary; other lines of the file (warnings a
    device log mixes in) are skipped."""
    for line in Path(path).read_text().splitlines():
        if not line.startswith("{"):
            continue
        d = json.loads(line)
        if "summary" in d:
            print(json.dumps({m: {k: v for k, v in r.items() if k in ("peak_mib", "accuracy_ok", "error")}
                              for m, r in d["summary"].items()}))
            continue
        print(d["mode"], "peak", d["peak_mib"], "allocated", d["peak_allocated_mib"])
        for pool, h in d["holders"].items():
            r = d["by_pool"].get(pool, {})
            print("  pool", pool, "reserved", round(r.get("reserved_mib", 0), 1), "live", h["live_mib"],
                  "pinned free", h["pinned_free_mib"])
            for site, mib in h["top"][:5]:
                print("     ", mib, site[:120])
            for site, mib in h.get("pinned_by", [])[:6]:
                print("      pinned", mib, site[:300])
            for stack in h.get("stacks", []):
                print("      stack", stack[0], "MiB:", " <- ".join(stack[1:])[:1500])
        for line in d.get("runners", []):
            print("  runner", line[:300])
        if d.get("result"):
            print("  result", d["result"])
        if d.get("first_result"):
            print("  first result", d["first_result"])
        for chain in d.get("referrers", []):
            print("  held:", " <- ".join(chain)[:400])


def main(argv: list[str]) -> int:
    if argv[:1] == ["--print"]:
        for path in argv[1:]:
            print("==", path)
            summarise(path)
        return 0
    import coil.backend  # noqa: F401  (registers backend="coil")
    import torch
    from coil.bench import measure, model_runs

    quick = "--quick" in argv
    argv = [a for a in argv if a != "--quick"]
    min_mib = None
    if "--referrers" in argv:
        i = argv.index("--referrers")
        min_mib = float(argv[i + 1])
        del argv[i:i + 2]
    while "--torch-config" in argv:
        i = argv.index("--torch-config")
        set_torch_config(argv[i + 1])
        del argv[i:i + 2]
    case = argv[0]
    modes = tuple((argv[1] if len(argv) > 1 else "eager,inductor,coil").split(","))
    torch.cuda.memory._record_memory_history(enabled="state", context="alloc", stacks="python")
    original = measure.warm_peak
    current: list[str] = []
    first: list[Any] = [None]  # the storage of the current mode's first result
    real_first = model_runs.compile_and_step  # type: ignore[attr-defined]

    def first_step(*args: Any) -> Any:
        seconds, step, out = real_first(*args)
        first[0] = result_storage(out)
        return seconds, step, out

    def probed(fn: Any, base: dict[str, float] | None = None) -> dict[str, Any]:
        result: list[Any] = []

        def step() -> Any:
            r = fn()
            result.append(result_storage(r))
            return r

        out = original(step, base)
        print(json.dumps({"case": case, "mode": current[-1] if current else "?",
                          "peak_mib": round(out["peak_mib"], 1),
                          "peak_allocated_mib": round(out["peak_allocated_mib"], 1),
                          "by_pool": out["after_call_by_pool"], "holders": holders(stacks_mib=min_mib),
                          "runners": measure.runner_lines(),
                          "first_result": still_alive(first[0]),  # before result_fate's collection
                          "result": result_fate(result[0]),
                          "referrers": referrers(min_mib) if min_mib is not None else []}), flush=True)
        return out

    measure.warm_peak = probed  # type: ignore[assignment]  # run_model looks it up per call
    model_runs.compile_and_step = first_step  # type: ignore[attr-defined,assignment]  # run_model looks it up per call
    real_cold = measure.cold_caches

    @contextlib.contextmanager
    def cold(root: Path, tag: str) -> Any:
        current.append(tag.rsplit("-", 1)[-1])
        with real_cold(root, tag) as env:
            yield env

    with tempfile.TemporaryDirectory() as root:
        res = model_runs.run_model(case, functools.partial(cold, Path(root)), modes,
                                   model_runs.CaseSettings(quick=quick))
    brief = {m: {k: res.get(m, {}).get(k) for k in ("ms", "peak_mib", "first_call_s", "warm_first_call_s",
                                                    "warm_graph_caches", "accuracy_ok", "error")} for m in modes}
    print(json.dumps({"case": case, "summary": brief}, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
