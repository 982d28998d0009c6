"""Executing a cached kernel module under a unique module name, and finding its kernel.

The module is compiled from the exact text that the disk cache validated (no `.pyc` is read or
written, so a stale bytecode file can never stand in for a rebuilt entry), and that text is
registered in `linecache` so `inspect.getsource`, which Triton needs to parse the kernel, sees it
too. Each load gets a fresh name `coil_kernel_<key prefix>_<n>` in `sys.modules`.
"""

from __future__ import annotations

import itertools
import linecache
import sys
import threading
from pathlib import Path
from types import ModuleType

_counter = itertools.count()
_counter_lock = threading.Lock()


def load_module(path: Path, text: str, key: str) -> ModuleType:
    """Execute `text` (the content of `path`) as a new module and return it.

    Raises whatever compiling or executing the module raises (SyntaxError, ImportError, ...);
    the half-made module is then removed from `sys.modules`.
    """
    with _counter_lock:
        name = f"coil_kernel_{key[:16]}_{next(_counter)}"
    filename = str(path)
    code = compile(text, filename, "exec", dont_inherit=True)
    # mtime None: linecache.checkcache leaves the entry alone (it is the validated text)
    linecache.cache[filename] = (len(text), None, text.splitlines(keepends=True), filename)
    module = ModuleType(name)
    module.__file__ = filename
    sys.modules[name] = module
    try:
        exec(code, module.__dict__)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


def find_kernel(module: ModuleType, name: str) -> object:
    """The `@triton.jit` object called `name` in `module`.

    Raises `LookupError` when it is missing and `TypeError` when it is not a Triton kernel
    (anything without Triton's `run` and `fn` attributes, e.g. a plain function).
    """
    fn = module.__dict__.get(name)
    if fn is None:
        raise LookupError(f"the module defines no {name!r}")
    if not callable(getattr(fn, "run", None)) or not callable(getattr(fn, "fn", None)):
        raise TypeError(f"{name!r} is a {type(fn).__name__}, not a @triton.jit function")
    return fn
