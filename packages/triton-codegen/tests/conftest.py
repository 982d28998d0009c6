"""Helpers for the triton-codegen tests: build kernel groups, run generated kernels on the CPU.

Kernels run under Triton's interpreter: TRITON_INTERPRET must be set before triton is imported.
"""

# ruff: noqa: E402  (TRITON_INTERPRET is exported before anything can import triton)
from __future__ import annotations

from coil.knobs import knobs

knobs.export(triton_interpret=True)

import importlib.util
import itertools
import os
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import coil.lowering_ir as L
import coil.triton_codegen.kernel as kernel_mod
import pytest
import torch
from coil.scheduler import KernelGroup, Schedule, schedule
from coil.triton_codegen import KernelConfig, KernelSource, generate
from torch.fx.experimental.proxy_tensor import make_fx

_count = itertools.count()
_DIR: list[Path] = []  # the generated kernels' folder (Triton reads the source from a file)


@pytest.fixture(scope="session", autouse=True)
def _kernel_dir(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Generated kernels are written under pytest's temporary directory, which pytest keeps for
    its last few runs: a failing test's kernel can be read after the run."""
    _DIR.append(tmp_path_factory.mktemp("kernels"))


def _ints(xs: Sequence[Any]) -> list[int]:
    return [int(x) for x in xs]


def load_kernel(ks: KernelSource) -> Any:
    """Import the generated module from a file (triton needs the source on disk) -> the jit fn."""
    mod_name = f"coil_tcg_kernel_{next(_count)}"
    path = os.path.join(_DIR[-1], f"{mod_name}.py")
    with open(path, "w") as f:
        f.write(ks.source)
    spec = importlib.util.spec_from_file_location(mod_name, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return getattr(mod, ks.name)


def launch(ks: KernelSource, env: dict[str, torch.Tensor]) -> None:
    fn = load_kernel(ks)
    args = [env[n] for n in ks.pointer_args] + [int(s) for s in ks.size_args]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # masked-off lanes divide by zero on numpy
        fn[(int(ks.grid),)](*args, **ks.constexprs)


def _alloc(buf: L.Buffer) -> torch.Tensor:
    lay = buf.layout
    t = torch.empty_strided(_ints(lay.size), _ints(lay.stride), dtype=lay.dtype)
    if lay.dtype.is_floating_point:
        t.fill_(float("nan"))  # unwritten elements show up
    return t


def _view(env: dict[str, torch.Tensor], ref: Any) -> torch.Tensor:
    base = env[ref.storage.name]
    lay = ref.layout
    return torch.as_strided(base, _ints(lay.size), _ints(lay.stride), base.storage_offset() + int(lay.offset))


class Run:
    """Trace -> lower -> schedule -> generate -> launch (a fixture: conftest is not importable)."""

    sources: list[KernelSource]
    launch = staticmethod(launch)

    @staticmethod
    def reshape_configs(monkeypatch: pytest.MonkeyPatch, kind: str,
                        change: Callable[[KernelConfig], KernelConfig]) -> None:
        """Kernels for which the fixed rule (`kernel.choose`) gives a `kind` configuration
        ("persistent", "looped", ...) get `change(config)` instead, for the rest of the test."""
        real = kernel_mod.choose

        def choose(xnumel: int, rnumel: int, is_reduction: bool, target: str, strategy: str = "auto",
                   x_contiguous: bool = False) -> KernelConfig:
            cfg = real(xnumel, rnumel, is_reduction, target, strategy, x_contiguous)
            return change(cfg) if cfg.strategy == kind else cfg

        monkeypatch.setattr(kernel_mod, "choose", choose)

    @staticmethod
    def loops(source: str) -> int:
        """How many loops over r a kernel source runs."""
        return source.count("for roffset in range(")

    @staticmethod
    def schedule(fn: Callable[..., Any], *inputs: Any, fusion: bool = True) -> Schedule:
        gm = make_fx(fn, decomposition_table=L.decomposition_table(), tracing_mode="fake")(*inputs)
        return schedule(L.lower(gm), fusion=fusion)

    @staticmethod
    def execute(s: Schedule, inputs: Sequence[torch.Tensor], strategy: str = "auto",
                sources: list[KernelSource] | None = None,
                pick: Callable[[KernelSource], KernelSource] | None = None, reread: bool = False) -> list[Any]:
        """Run the schedule's steps in order; `pick` (if given) replaces each generated kernel
        before it launches (a variant under another launch configuration)."""
        g = s.graph
        bufs = g.buffers()
        env: dict[str, torch.Tensor] = {}
        for b in g.inputs:
            if isinstance(b, L.InputBuffer):
                env[b.name] = inputs[b.index]
        for c in g.constants:
            assert c.value is not None
            env[c.name] = c.value
        for st in s.steps:
            if isinstance(st, KernelGroup):
                ks = generate(st, bufs, "interpret", strategy, reread=reread)
                if pick is not None:
                    ks = pick(ks)
                if sources is not None:
                    sources.append(ks)
                assert not set(ks.pointer_args) & set(st.internal)  # internal values never hit memory
                for w in st.stores:
                    env[w] = _alloc(bufs[w])
                launch(ks, env)
                continue

            def conv(x: Any) -> Any:
                if isinstance(x, L.Buffer | L.ReinterpretView):
                    return _view(env, x)
                if isinstance(x, list | tuple):
                    return type(x)(conv(y) for y in x)
                return x

            res = st.kernel(*conv(st.args), **{k: conv(v) for k, v in st.kwargs.items()})

            def put(ref: Any, val: Any) -> None:
                if isinstance(ref, L.Buffer):
                    env[ref.name] = _alloc(ref)
                    env[ref.name].copy_(val)
                elif isinstance(ref, list | tuple):
                    for r, v in zip(ref, val, strict=True):
                        put(r, v)

            if st.results is not None:
                put(st.results, res)
        out = []
        for o in g.outputs:
            out.append(_view(env, o) if isinstance(o, L.Buffer | L.ReinterpretView) else o)
        return out

    @staticmethod
    def run(fn: Callable[..., Any], *inputs: Any, strategy: str = "auto", fusion: bool = True,
            sources: list[KernelSource] | None = None,
            pick: Callable[[KernelSource], KernelSource] | None = None, reread: bool = False) -> list[Any]:
        return Run.execute(Run.schedule(fn, *inputs, fusion=fusion), inputs, strategy, sources, pick, reread)

    @staticmethod
    def check(fn: Callable[..., Any], *inputs: Any, strategy: str = "auto", fusion: bool = True,
              rtol: float = 1e-5, atol: float = 1e-5, sources: list[KernelSource] | None = None) -> None:
        want = fn(*inputs)
        got = Run.run(fn, *inputs, strategy=strategy, fusion=fusion, sources=sources)
        assert len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            assert g.dtype == w.dtype and g.shape == w.shape and g.stride() == w.stride(), (g, w)
            torch.testing.assert_close(g, w, rtol=rtol, atol=atol, equal_nan=True)


@pytest.fixture(scope="session")
def tk() -> type[Run]:
    return Run


@pytest.fixture(params=[8, 64], ids=["r8", "r64"])
def steps(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> int:
    """Looped and outer kernels take RBLOCK = the param: rows of 37 take 5 loop steps, or one."""
    rblock = int(request.param)
    for kind in ("looped", "outer"):
        Run.reshape_configs(monkeypatch, kind, lambda c, k=kind: KernelConfig(k, c.xblock, rblock, c.num_warps))
    return rblock


@pytest.fixture
def no_combos(monkeypatch: pytest.MonkeyPatch) -> None:
    """No combo kernels (coil.scheduler's fusion.COMBO_MAX_PARTS = 1): for tests of one
    kernel's strategy or configurations, whose independent reductions a combo would gather."""
    from coil.scheduler import fusion

    monkeypatch.setattr(fusion, "COMBO_MAX_PARTS", 1)


@pytest.fixture
def no_split() -> Iterator[None]:
    """Reductions are never split (lowering-ir's split_reduction_min above any size)."""
    with knobs.override(split_reduction_min=1 << 30):
        yield


@pytest.fixture
def force_split() -> Iterator[None]:
    """Reductions are split at small sizes (split_reduction_min=16)."""
    with knobs.override(split_reduction_min=16):
        yield
