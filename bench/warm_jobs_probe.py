"""What a first call sends to coil's compile workers: `coil bench`'s new-process first call
(`python -m coil.backend.bench_models CASE MODE`) with the compile pool watched.

    python bench/warm_jobs_probe.py CASE [MODE]

Prints bench_models' lines, then `pool_started=N` (times a pool started its workers) and
`jobs_sent=[...]` (the kernel name of each job sent, in order). On a warm start (every graph from
the AOT and graph caches, every binary in Triton's cache) both should be empty: a job there means
a kernel the cold process compiled without leaving its marker (runtime README, "Compile
workers"), and the pool's start competes with Dynamo's tracing for the CPU.
"""

from __future__ import annotations

import sys
from typing import Any


def main(argv: list[str]) -> int:
    from coil.backend import bench_models
    from coil.runtime.compile_pool import CompilePool

    started: list[int] = []
    sent: list[str] = []
    real_start, real_run = CompilePool.start, CompilePool.run

    def start(self: CompilePool) -> None:
        started.append(1)
        real_start(self)

    def run(self: CompilePool, jobs: Any) -> Any:
        sent.extend(j.name for j in jobs)
        return real_run(self, jobs)

    CompilePool.start = start  # type: ignore[method-assign]
    CompilePool.run = run  # type: ignore[method-assign]
    case, mode = argv[0], (argv[1] if len(argv) > 1 else "coil")
    rc = bench_models.main([case, mode])
    print(f"pool_started={len(started)}")
    print(f"jobs_sent={sent}")
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
