"""Where each compiled graph's artefacts go: the debug dir (COIL_DEBUG_DIR) and the logs (COIL_LOGS).

`Artefacts.open(gm, name, kind)` is called before any pass runs. With COIL_DEBUG_DIR set it
creates `<dir>/<graph name>/` and writes the input graph and the repro at once (so a compile
that fails, or crashes the process, still leaves a repro); each later stage hands its result to
one method here. Layout (see docs/debugging.md):

    README.txt                 what is here, and notes (e.g. no matplotlib: CSV instead of PNG)
    00_input_graph.txt         the post-AOT FX graph as coil received it
    01_post_grad/NN_<pass>.txt the graph after each post-grad pass that changed it (+ index.txt)
    02_post_grad_graph.txt     the graph after all post-grad passes
    03_lowered_ir.txt          buffers with layouts, each operation with its body
    04_schedule.txt            kernel groups, externs, and every fusion decision with its reason
    05_memory_plan.txt         buffer lifetimes (steps), sizes, reuse
    06_memory_timeline.png     live bytes per step (or 06_memory_timeline.csv without matplotlib)
    07_wrapper.py              the generated wrapper module (Python)
    08_wrapper_fx.txt          the same wrapper as a torch.fx graph (wrapper_codegen.emit_fx_graph)
    kernels/kernelN.py         each kernel's Triton source (first comment: provenance)
    repro.py (+ repro_graph.py, repro_inputs.json, repro_constants.pt)
    error.txt                  only when compiling failed: the error and its traceback
"""

from __future__ import annotations

import logging
import shutil
import traceback
from collections.abc import Sequence
from pathlib import Path

import torch.fx
from coil.backend.debug import logs
from coil.backend.debug.dump import (
    format_ir,
    format_memory_plan,
    format_schedule,
    spans,
    timeline_csv,
)
from coil.backend.debug.reproduce import capture, write_repro
from coil.knobs import knobs
from coil.lowering_ir import LoweredGraph
from coil.memory_planner import Block, timeline_png
from coil.scheduler import Schedule
from coil.triton_codegen import KernelSource
from coil.wrapper_codegen import Line, WrapperProgram, emit_fx_graph

log = logging.getLogger("coil.backend")

README = """\
coil debug artefacts of graph {name} ({kind})

00_input_graph.txt          post-AOT FX graph as coil received it (before post-grad passes)
01_post_grad/               the graph after each post-grad pass that changed it; index.txt lists every pass run
02_post_grad_graph.txt      the graph after all post-grad passes (what lowering saw)
03_lowered_ir.txt           lowered IR: buffers with layouts, operations with their bodies
04_schedule.txt             steps in order, kernel groups, and the fusion log (why pairs were not fused)
05_memory_plan.txt          buffer lifetimes in steps, sizes, storage reuse
06_memory_timeline.*        live bytes per step: PNG, or CSV when matplotlib is not installed
07_wrapper.py               the generated Python wrapper
08_wrapper_fx.txt           the same wrapper as a torch.fx graph: node listing, then the graph's Python
kernels/                    Triton source of every kernel (first comment: the FX nodes it came from)
repro.py                    python repro.py: recompiles this graph from saved metadata, compares with eager
error.txt                   present only when compiling this graph failed
"""


def _graph_text(gm: torch.fx.GraphModule) -> str:
    return gm.graph.python_code(root_module="self").src.strip("\n") + "\n"


class Artefacts:
    """One graph's debug folder (or None) plus the COIL_LOGS selection."""

    def __init__(self, name: str, kind: str, folder: Path | None) -> None:
        self.name = name
        self.kind = kind
        self.folder = folder
        self.notes: list[str] = []
        self.passes: list[str] = []

    @classmethod
    def open(cls, gm: torch.fx.GraphModule, name: str, kind: str) -> Artefacts:
        """Start the artefacts of `gm` (call before post-grad passes, which edit it in place)."""
        root = str(knobs.debug_dir)
        logs.selected()  # a bad COIL_LOGS fails here, before any work
        out = cls(name, kind, Path(root) / name if root else None)
        if out.folder is not None:
            try:
                out.folder.mkdir(parents=True, exist_ok=True)
                for stale in ("01_post_grad", "kernels"):
                    shutil.rmtree(out.folder / stale, ignore_errors=True)
                (out.folder / "error.txt").unlink(missing_ok=True)
                cap = capture(gm, name, kind)
                out.notes += cap.notes
                out._write("00_input_graph.txt", cap.readable)
                write_repro(cap, out.folder)
            except Exception as e:  # debugging aids never break a compile
                log.warning("COIL_DEBUG_DIR: could not write %s: %s", out.folder, e)
            out._readme()
        if "graph" in logs.selected():  # printing a large graph is slow: only when wanted
            logs.emit("graph", f"{name}: input graph", _graph_text(gm))
        return out

    @property
    def wants_passes(self) -> bool:
        """Whether per-pass graphs are wanted (debug dir set or COIL_LOGS has graph)."""
        return self.folder is not None or "graph" in logs.selected()

    def _write(self, rel: str, text: str) -> None:
        if self.folder is None:
            return
        try:
            path = self.folder / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        except OSError as e:
            log.warning("COIL_DEBUG_DIR: could not write %s: %s", rel, e)

    def _readme(self) -> None:
        notes = "".join(f"\nnote: {n}" for n in self.notes)
        self._write("README.txt", README.format(name=self.name, kind=self.kind) + notes + ("\n" if notes else ""))

    def after_pass(self, pass_name: str, gm: torch.fx.GraphModule, modified: bool) -> None:
        """Record one post-grad pass (its graph when it changed something)."""
        n = len(self.passes)
        self.passes.append(f"{n:02d} {pass_name}: {'modified' if modified else 'no change'}")
        if modified:
            text = _graph_text(gm)
            self._write(f"01_post_grad/{n:02d}_{pass_name}.txt", text)
            logs.emit("graph", f"{self.name}: after pass {pass_name}", text)
        self._write("01_post_grad/index.txt", "\n".join(self.passes) + "\n")

    def post_grad(self, gm: torch.fx.GraphModule) -> None:
        if self.folder is not None:  # printing a large graph is slow: only when written
            self._write("02_post_grad_graph.txt", gm.print_readable(print_output=False))

    def ir(self, lowered: LoweredGraph) -> None:
        if self.folder is not None:
            self._write("03_lowered_ir.txt", format_ir(lowered))

    def schedule(self, sched: Schedule) -> None:
        if self.folder is not None or "fusion" in logs.selected():
            text = format_schedule(sched)
            self._write("04_schedule.txt", text)
            logs.emit("fusion", f"{self.name}: schedule and fusion decisions", text)

    def memory_plan(self, sched: Schedule, program: WrapperProgram) -> None:
        if self.folder is None and "memory_plan" not in logs.selected():
            return
        text = format_memory_plan(sched, program)
        self._write("05_memory_plan.txt", text)
        logs.emit("memory_plan", f"{self.name}: memory plan", text)
        if self.folder is None:
            return
        all_spans = spans(sched)
        try:
            blocks = [Block(s.name, s.first, s.last + 1, s.nbytes) for s in all_spans]
            timeline_png(blocks, self.folder / "06_memory_timeline.png", title=f"{self.name}: live bytes per step")
        except ImportError:
            self._write("06_memory_timeline.csv", timeline_csv(all_spans))
            self.notes.append("matplotlib is not installed (pip install 'coil-memory-planner[plot]'): "
                              "the memory timeline is 06_memory_timeline.csv, not a PNG")
            self._readme()
        except Exception as e:
            log.warning("COIL_DEBUG_DIR: memory timeline failed: %s", e)

    def kernels(self, sources: list[KernelSource]) -> None:
        for s in sources:
            self._write(f"kernels/{s.name}.py", s.source)
            logs.emit("kernels", f"{self.name}: {s.name}", s.source)

    def wrapper(self, source: str) -> None:
        self._write("07_wrapper.py", source)
        logs.emit("wrapper", f"{self.name}: wrapper", source)

    def wrapper_fx(self, lines: Sequence[Line]) -> None:
        """08_wrapper_fx.txt: the Wrapper IR as a torch.fx graph (one `launch` node per kernel
        call, allocations, extern calls, frees), printed, then the Python FX generates for it."""
        if self.folder is None:
            return
        try:
            graph = emit_fx_graph(lines)
            code = graph.python_code(root_module="self").src.strip("\n")
        except Exception as e:  # debugging aids never break a compile
            log.warning("COIL_DEBUG_DIR: the FX wrapper failed: %s", e)
            return
        self._write("08_wrapper_fx.txt", f"{graph}\n\n# the same graph as torch.fx Python\n{code}\n")

    def failed(self, error: BaseException) -> None:
        """Record a failed compile: error.txt next to the repro written at open."""
        if self.folder is None:
            return
        tb = "".join(traceback.format_exception(type(error), error, error.__traceback__))
        self._write("error.txt", f"{error}\n\n{tb}\nreproduce: python {self.folder / 'repro.py'}\n")
        log.warning("coil: %s failed to compile; repro written to %s", self.name, self.folder / "repro.py")
