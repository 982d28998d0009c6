"""Launch configuration (block sizes, warps, the reduction strategy) and codegen options."""

from __future__ import annotations

from dataclasses import dataclass

from coil.lowering_ir.split_rule import SPLIT_MIN_PROGRAMS

STRATEGIES = ("auto", "persistent", "looped", "outer")

# CUDA tiles of an "outer" reduction (the reduced dim is strided, the kept one contiguous): each
# program owns OUTER_XBLOCK neighbouring outputs, so every load of the [XBLOCK, RBLOCK] tile reads
# OUTER_XBLOCK consecutive elements of each of RBLOCK rows (128 B of bf16, 256 B of fp32: whole
# cache lines), and accumulates in registers until one tl.sum/max/... at the end of the loop.
# OUTER_XBLOCK is public API: lowering's split-reduction rule takes it as the number of outputs
# one program of such a kernel reduces.
# OUTER_RBLOCK 8 rather than 16: the shorter step is faster on every strided sum measured, from a
# split reduction's short chunks to ResNet-50's batch-norm shapes (docs/perf.md, "Codegen, runtime and lowering choices").
OUTER_XBLOCK = 64
OUTER_RBLOCK = 8
OUTER_WARPS = 4
OUTER_TINY_RMAX = 1024  # see `choose`: tiny grids over short strided rows go persistent
SPREAD_MIN_TILE = 512   # see `_spread`
# rows up to this long are reduced persistently by "auto" (see `choose`), and the tile budgets
# (elements of one [XBLOCK, RBLOCK] block) on CUDA and on the interpreter
RMAX_PERSISTENT = 1 << 14
CUDA_BUDGET = 4096
INTERP_BUDGET = 1 << 16


def next_pow2(n: int) -> int:
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


@dataclass(frozen=True)
class CodegenOptions:
    """Switches of the kernel generator that add checks but never change what a kernel computes.

    Attributes:
        debug_asserts: before every indirect (data-dependent) load and every scatter store, emit
            `tl.device_assert`s that each loaded index lies inside the dimension it indexes and
            that the whole storage index lies inside the buffer (`[0, storage extent)`), lanes
            masked off exempt. A kernel with asserts has `KernelSource.debug` set: it must be
            compiled in Triton's debug mode (`coil.runtime.KernelSpec(debug=True)`), without
            which `device_assert` is compiled out. Slow; for debugging.

    Frozen and validated on construction (a `TypeError` for a non-bool switch).
    """

    debug_asserts: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.debug_asserts, bool):
            raise TypeError(f"CodegenOptions.debug_asserts must be a bool, got {self.debug_asserts!r}")


@dataclass(frozen=True)
class KernelConfig:
    """Block sizes and launch options. `strategy` is "pointwise", "persistent", "looped" or "outer"."""

    strategy: str
    xblock: int
    rblock: int
    num_warps: int


def choose(xnumel: int, rnumel: int, is_reduction: bool, target: str, strategy: str = "auto",
           x_contiguous: bool = False) -> KernelConfig:
    """Pick a configuration. On the interpreter, big blocks (few programs) run fastest.

    Reductions (`strategy` "auto" picks; any other value forces that one):
      - "persistent": the whole row in one RBLOCK (one read of the input). On CUDA rows of up to
        16384 elements (RMAX_PERSISTENT: 8192-wide layer norms, softmax and RMS norms then keep
        their row in registers, as Inductor's kernels do).
      - "looped": a loop over r in RBLOCK steps accumulating into an [XBLOCK, RBLOCK] register
        tile, reduced once after the loop; for rows too long to be persistent.
      - "outer": the looped kernel with a wide x block (OUTER_XBLOCK on CUDA) and a small RBLOCK,
        for reductions whose loads are contiguous along x and strided along r (`x_contiguous`,
        e.g. a sum over dim 0 of a row-major matrix, or per-channel statistics of a
        channels-last image): each load reads XBLOCK consecutive elements per row. A persistent
        kernel over a long strided row would give each program one column instead: uncoalesced
        loads, one element per row.

    "auto" on CUDA picks "outer" when `x_contiguous` and the row is longer than one outer step
    (OUTER_RBLOCK), except when that tiling would leave fewer than SPLIT_MIN_PROGRAMS programs
    over rows of at most OUTER_TINY_RMAX (the second kernel of a split reduction: a few hundred
    partials for each of a few hundred outputs): then "persistent" with one or a few outputs per
    program, strided loads but hundreds of programs at once instead of a handful looping.
    Short strided rows (up to 64 elements, e.g. the chunks of a split reduction) are "outer"
    too: the outer tiling reads them faster than any persistent tile (docs/perf.md, "Codegen
    choices"). Otherwise rows up to
    RMAX_PERSISTENT are persistent, longer ones looped. "auto" never picks "outer" on the
    interpreter: there is no coalescing to gain (its loops run there: forced, it works too).

    On CUDA, persistent and looped blocks hold fewer rows while that leaves too few programs
    (`_spread`).
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"reduction strategy must be one of {STRATEGIES}, not {strategy!r}")
    interp = target != "cuda"
    if not is_reduction:
        cap = 1 << 16 if interp else 1024
        x = min(next_pow2(max(xnumel, 1)), cap)
        # 2 warps for 1024-wide blocks (16 elements per thread), not 4: Triton 3.6 miscompiles a
        # fused max-pool backward (masked int8 + bf16 window loads, then a ReLU mask) at 4 warps
        # (8 per thread), while 2, 8 or 16 are right (bench/triton_miscompile/check.py reproduces
        # it); 2 warps are also the fastest on the bench's pointwise cases (docs/perf.md,
        # "Pointwise warps").
        warps = 2 if x >= 1024 else 4 if x >= 512 else 2
        return KernelConfig("pointwise", max(x, 16 if not interp else 1), 1, warps)
    budget = INTERP_BUDGET if interp else CUDA_BUDGET
    xp, rp = next_pow2(max(xnumel, 1)), next_pow2(max(rnumel, 1))
    if strategy == "auto":
        if x_contiguous and not interp and rp > OUTER_RBLOCK:  # (rows too long for a persistent [64, rp] block are too)
            tiny_grid = -(-xnumel // OUTER_XBLOCK) < SPLIT_MIN_PROGRAMS and rnumel <= OUTER_TINY_RMAX
            strategy = "persistent" if tiny_grid else "outer"
        else:
            strategy = "persistent" if rnumel <= RMAX_PERSISTENT else "looped"
    if strategy == "persistent":
        x = _spread(max(1, min(xp, budget // rp)), rp, xnumel, interp)
        warps = 16 if rp * x >= 8192 else 8 if rp * x >= 2048 else 4
        return KernelConfig("persistent", x, rp, warps)
    if strategy == "outer":
        if interp:  # big tiles: the interpreter's cost is per operation, not per element
            x = min(xp, 1024)
            return KernelConfig("outer", x, max(1, min(rp, budget // x)), 4)
        x = min(xp, OUTER_XBLOCK)
        return KernelConfig("outer", x, min(rp, max(OUTER_RBLOCK, (OUTER_XBLOCK * OUTER_RBLOCK) // x)), OUTER_WARPS)
    r = min(rp, 4096 if interp else 1024)
    x = _spread(max(1, min(xp, budget // r)), r, xnumel, interp)
    return KernelConfig("looped", x, r, 8 if r * x >= 2048 else 4)


# autotuning (`candidates`): at most this many configurations per kernel, the default included,
# and tiles (XBLOCK * RBLOCK elements) at most TILE_CAP_FACTOR times the target's budget (or the
# default's own tile, when that is larger: a persistent row of 16384 elements)
MAX_CANDIDATES = 6
TILE_CAP_FACTOR = 2
MAX_WARPS = 32

# a CUDA loop's candidates also hold these (RBLOCK, warps) with one row per program, beside the
# MAX_CANDIDATES above: a program's row is still in L2 when its second loop reads it again (more
# rows per program, or many programs each walking a narrow block, spill it); long softmax and
# cross-entropy rows run far faster so (docs/perf.md, "Codegen, runtime and lowering choices").
WIDE_LOOPS = ((2048, 16), (4096, 16), (4096, 32), (8192, 16), (8192, 32))


# a CUDA pointwise kernel's candidates beside its 1024-wide, 2-warp default (`candidates`): each
# is the fastest for some of the bench's pointwise cases, by up to about 0.5 % (docs/perf.md,
# "Codegen, runtime and lowering choices"). Neither holds 8 elements per thread, the shape of the Triton 3.6 miscompile
# at 1024 / 4 (`choose`); 1024 / 4 and 2048 / 8 are not offered for that reason (and the tuner
# checks every candidate's outputs against the default's).
POINTWISE_CANDIDATES = ((512, 4), (512, 8))

# offered besides for a pointwise kernel with `plain_loads` (KernelSource): floating loads at affine
# indices under the block's mask alone, which the tuner's check on standard-normal data exercises
# in every lane. The miscompile above needed loads masked by values computed from loaded int8 data
# (all zeros in the check's data: the check would not have seen it). 1024 / 4 is Inductor's choice
# for such kernels, and the faster one for the bench's bf16 pointwise chain (docs/perf.md,
# "Codegen, runtime and lowering choices").
PLAIN_POINTWISE_CANDIDATES = ((1024, 4),)


def candidates(default: KernelConfig, xnumel: int, rnumel: int, target: str, plain_loads: bool = False
               ) -> list[KernelConfig]:
    """Launch configurations worth timing for a kernel whose fixed rule gave `default`.

    Returns `default` first, then at most MAX_CANDIDATES - 1 others (and, for a loop on CUDA,
    the WIDE_LOOPS configurations with one row per program too), all with `default`'s
    strategy: a kernel's source depends on its strategy (a persistent block or a loop over r),
    never on its block sizes or warps, so every candidate launches the same source with other
    constexprs (the tests check that the text does not change).

    - pointwise, on CUDA with the 1024-wide default: POINTWISE_CANDIDATES, and with `plain_loads`
      (the kernel's KernelSource.plain_loads) PLAIN_POINTWISE_CANDIDATES too (those whose block is
      at most next_pow2(xnumel)); on the interpreter `[default]` only;

    - persistent: XBLOCK halved and doubled, warps halved and doubled, both doubled; RBLOCK stays
      `default.rblock` (the whole row, so it still covers it);
    - looped: RBLOCK halved and doubled (512 and 2048 around the CUDA default of 1024), XBLOCK
      doubled and halved, warps doubled; on CUDA also one row per program with each WIDE_LOOPS
      (RBLOCK, warps);
    - outer: RBLOCK doubled and halved, XBLOCK doubled (with RBLOCK halved) and halved (with RBLOCK
      doubled), warps doubled.

    Filtered: blocks are powers of two >= 1; XBLOCK at most next_pow2(xnumel) (wider blocks only
    mask lanes off); a loop's RBLOCK at most next_pow2(rnumel); the tile at most TILE_CAP_FACTOR
    times the target's budget (or the default's tile when larger); warps in 1..MAX_WARPS and at
    most one per 32 tile elements (each thread holds at least one element). `xnumel`/`rnumel`
    are the sizes (hints for symbolic ones) the default was chosen for.
    """
    interp = target != "cuda"
    if default.strategy == "pointwise":
        if interp or default.xblock != 1024:
            return [default]
        pairs = POINTWISE_CANDIDATES + (PLAIN_POINTWISE_CANDIDATES if plain_loads else ())
        return [default] + [KernelConfig("pointwise", x, 1, w) for x, w in pairs
                            if x <= next_pow2(max(xnumel, 1)) and 32 * w <= x]
    if default.strategy not in ("persistent", "looped", "outer"):
        return [default]
    xp, rp = next_pow2(max(xnumel, 1)), next_pow2(max(rnumel, 1))
    x, r, w = default.xblock, default.rblock, default.num_warps
    cap = max(TILE_CAP_FACTOR * (INTERP_BUDGET if interp else CUDA_BUDGET), x * r)
    raw: list[tuple[int, int, int]]
    if default.strategy == "persistent":
        raw = [(x // 2, r, w), (2 * x, r, w), (x, r, w // 2), (x, r, 2 * w), (2 * x, r, 2 * w)]
    elif default.strategy == "looped":
        raw = [(x, r // 2, w), (x, 2 * r, w), (2 * x, r, w), (x // 2, r, w), (x, r, 2 * w)]
    else:
        raw = [(x, 2 * r, w), (x, r // 2, w), (2 * x, r // 2, w), (x // 2, 2 * r, w), (x, r, 2 * w)]
    limit = MAX_CANDIDATES
    if default.strategy == "looped" and not interp:
        raw += [(1, wr, ww) for wr, ww in WIDE_LOOPS]
        limit += len(WIDE_LOOPS)
    out = [default]
    for cx, cr, cw in raw:
        cfg = KernelConfig(default.strategy, cx, cr, cw)
        tile = cx * cr
        ok = (cx >= 1 and cr >= 1 and cw >= 1 and cx <= max(xp, x)
              and (default.strategy == "persistent" or cr <= max(rp, r))
              and tile <= cap and cw <= MAX_WARPS and cw * 32 <= max(tile, 32))
        if ok and cfg not in out:
            out.append(cfg)
    return out[:limit]


# autotuning across strategies (`looped_alternatives`): a persistent reduction over rows of at
# least LOOPED_ALT_MIN_R elements, with at least LOOPED_ALT_MIN_X rows, is also timed as a loop of
# these (RBLOCK, warps) with one row per program: for long rows a loop can beat holding the row in
# registers (Inductor keeps loops for a bf16 sum over rows of 8192, an fp32 layer norm over 4096,
# and a loop one block long for a bf16 RMS norm, whose second pass then reads the row from L2);
# 32 warps pay for the widest (docs/perf.md, "Codegen, runtime and lowering choices").
LOOPED_ALT_MIN_R = 4096
LOOPED_ALT_MIN_X = 1024
LOOPED_ALTERNATIVES = ((2048, 16), (4096, 16), (2048, 8), (8192, 16), (4096, 32), (8192, 32))


def looped_alternatives(default: KernelConfig, xnumel: int, rnumel: int, target: str) -> list[KernelConfig]:
    """Looped configurations worth timing beside a persistent kernel's (a loop's source differs
    from the persistent one: the caller generates it, `variants.other_strategy`). Empty unless
    `default` is persistent on CUDA with rows of at least LOOPED_ALT_MIN_R elements and at least
    LOOPED_ALT_MIN_X of them; each RBLOCK is at most the row's next power of two (a loop one block
    long makes two passes over the row where the persistent kernel makes one)."""
    rp = next_pow2(max(rnumel, 1))
    if default.strategy != "persistent" or target != "cuda" or rp < LOOPED_ALT_MIN_R or xnumel < LOOPED_ALT_MIN_X:
        return []
    return [KernelConfig("looped", 1, r, w) for r, w in LOOPED_ALTERNATIVES if r <= rp]


def _spread(x: int, r: int, xnumel: int, interp: bool) -> int:
    """XBLOCK `x` halved on CUDA while the grid has fewer than SPLIT_MIN_PROGRAMS programs (the
    count lowering-ir's split rule aims above, assuming one row per program of a reduction over
    the contiguous dim) and the [x/2, r] tile still holds SPREAD_MIN_TILE elements: e.g. a split
    reduction's 256 partial rows of 64 K elements get 256 programs, not 64 of four rows each,
    and short x-contiguous rows keep blocks wide enough to coalesce. The interpreter keeps big
    blocks."""
    while not interp and x > 1 and -(-xnumel // x) < SPLIT_MIN_PROGRAMS and (x // 2) * r >= SPREAD_MIN_TILE:
        x //= 2
    return x
