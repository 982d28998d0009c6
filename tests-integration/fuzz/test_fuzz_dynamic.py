"""The graph fuzzer's dynamic mode in CI: derandomized programs compiled with `dynamic=True`,
coil against eager. Every size is then a symbol in coil's kernels and wrapper, and so are the
Python ints the interpreted programs pass (slice bounds, indices, shapes): symbolic index
printing, grids, empty results of symbolic size, float scalars made of sizes (`1 / numel`),
which static shapes never reach. Below them, the dynamic-mode programs that failed, reduced."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings

from .harness import check
from .programs import Input, Op, Program, programs


@settings(max_examples=24, derandomize=True, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large])
@given(programs(split=False, dynamic=True))
def test_fuzz_dynamic_slice(prog: Program) -> None:
    check(prog)


def test_torch_max_of_sizes_is_printed() -> None:
    """A size-1 dim's stride of an offset view is torch's `Max(1, s)` (not a subclass of sympy's
    Max): the wrapper could not print it."""
    check(Program(
        [Input((100, 1), "float32", "offset", 1), Input((1,), "float32"), Input((5,), "int32", "offset", 0)],
        [Op("relu", (2,), ()), Op("reshape", (3,), (1, 5, 1)), Op("exp", (4,), ())],
        [5, 0], seed=10905, split_min=2, dynamic=True))


def test_a_slice_past_the_end_of_symbolic_size_is_empty() -> None:
    """`x[3:4:2]` of a 3-element tensor, its bounds symbols: the storage extent of the empty
    result was negative (-1 elements) and the memory planner refused the buffer."""
    check(Program(
        [Input((), "bool"), Input((1, 7, 4), "bool", "offset", 0), Input((4,), "float16", "expanded", 0)],
        [Op("index_select", (2,), (0, 3, 2, 0)), Op("slice", (3,), (0, 3, 4, 2)), Op("softmax", (4,), (0,)),
         Op("log_softmax", (5,), (0,)), Op("cast", (0,), ("int32",))],
        [7, 6], seed=923, dynamic=True))
