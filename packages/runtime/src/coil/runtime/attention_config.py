"""Launch configurations of coil's attention kernels: a fixed rule, no run-time tuning.

The op runs inside CUDA-graph capture, where nothing may be timed, so the tiles come from a rule
on the head size, the sequence lengths, the dtype and the variant (`forward_config`,
`backward_config`). `benchmarks/attention_bench.py` times the `FORWARD_CANDIDATES` and
`BACKWARD_CANDIDATES` on a GPU; the rule is the winners of that bench, written down.

The rule (GPU) is the tables below, chosen so that no kernel spills registers (ptxas for sm_90);
where the bench's tile sweep on the H200 has spoken (`--cases padding_bias,causal --passes fwd`:
docs/perf.md, "Attention kernels"), its winners. A masked variant (a bias or keep tensor) holds a
mask tile beside the scores, so it gets more warps or fewer stages:

    16-bit inputs     forward        dK/dV (keys x queries)   dQ (queries x keys)
    D <= 64           128x64 w4 s3   128x32 w8 s3             128x32 w4 s3
      causal          64x64 w4 s3    (as above)               (as above)
      masked          128x64 w8 s3   128x32 w8 s3             128x32 w8 s3
      bias, no keep   128x64 w4 s2   (as masked)              (as masked)
    D <= 128          128x64 w8 s3   128x32 w8 s2             128x32 w8 s2
      masked          128x64 w8 s2   64x32 w8 s1              128x32 w8 s2
    D <= 256          64x64 w8 s2    32x32 w8 s1              64x16 w4 s1
      masked          64x64 w8 s2    32x16 w8 s1              32x16 w8 s1
    fp32 (tf32x3)
    D <= 64           64x32 w4 s2    64x16 w4 s2              64x16 w4 s2
    D <= 128          32x32 w4 s2    32x16 w8 s1              32x16 w8 s1
    D <= 256          16x32 w8 s1    16x16 w8 s1              16x16 w8 s1

(w: warps, s: pipeline stages; fp32 above D 64 still spills: correct, slow, rare on a GPU.)
With dbias (dS written as well) the dK/dV kernel keeps at most 64 keys a program. A side never
exceeds the sequence it tiles, rounded up to a power of two (at least 16), so a short sequence
(decoding) does not compute on empty rows. Under Triton's interpreter every tile is 16 x 16
(small tests still cross tile edges).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = [
    "BACKWARD_CANDIDATES",
    "FORWARD_CANDIDATES",
    "AttentionVariant",
    "BackwardConfig",
    "TileConfig",
    "backward_config",
    "forward_config",
]


@dataclass(frozen=True)
class TileConfig:
    """One kernel's launch configuration: `block_m` query rows by `block_n` keys a tile."""

    block_m: int
    block_n: int
    num_warps: int
    num_stages: int

    def __post_init__(self) -> None:
        for name in ("block_m", "block_n", "num_warps"):
            value = getattr(self, name)
            if value < 1 or value & (value - 1):
                raise ValueError(f"TileConfig.{name} must be a power of two, got {value}")
        if self.block_m < 16 or self.block_n < 16:
            raise ValueError(f"TileConfig tiles must be at least 16 x 16, got {self}")
        if self.num_stages < 1:
            raise ValueError(f"TileConfig.num_stages must be >= 1, got {self.num_stages}")


@dataclass(frozen=True)
class BackwardConfig:
    """The backward's two main kernels: `dkdv` (block_n keys a program, block_m-query tiles) and
    `dq` (block_m queries a program, block_n-key tiles)."""

    dkdv: TileConfig
    dq: TileConfig


@dataclass(frozen=True)
class AttentionVariant:
    """What the rule may look at besides sizes: the score modifications in use."""

    has_bias: bool = False
    has_keep: bool = False
    bias_grad: bool = False
    causal: bool = False
    window: bool = False


FORWARD_CANDIDATES: tuple[TileConfig, ...] = (
    TileConfig(128, 64, 4, 3),
    TileConfig(128, 64, 8, 3),
    TileConfig(128, 64, 4, 2),
    TileConfig(128, 64, 4, 4),
    TileConfig(128, 128, 8, 3),
    TileConfig(128, 128, 8, 2),
    TileConfig(128, 32, 4, 3),
    TileConfig(64, 64, 4, 3),
    TileConfig(64, 64, 8, 2),
    TileConfig(64, 128, 4, 3),
    TileConfig(64, 32, 4, 2),
)

BACKWARD_CANDIDATES: tuple[BackwardConfig, ...] = (
    BackwardConfig(TileConfig(32, 128, 8, 3), TileConfig(128, 32, 4, 3)),
    BackwardConfig(TileConfig(32, 128, 8, 2), TileConfig(128, 32, 8, 2)),
    BackwardConfig(TileConfig(64, 128, 8, 2), TileConfig(128, 64, 8, 2)),
    BackwardConfig(TileConfig(32, 64, 4, 3), TileConfig(64, 32, 4, 3)),
    BackwardConfig(TileConfig(64, 64, 4, 2), TileConfig(64, 64, 4, 2)),
    BackwardConfig(TileConfig(16, 128, 4, 3), TileConfig(128, 16, 4, 3)),
    BackwardConfig(TileConfig(32, 32, 8, 1), TileConfig(64, 16, 4, 1)),
)


def _side(block: int, length: int) -> int:
    """`block`, capped by `length` rounded up to a power of two (at least 16)."""
    fit = 16
    while fit < length:
        fit *= 2
    return min(block, fit)


def _t(block_m: int, block_n: int, num_warps: int, num_stages: int) -> TileConfig:
    return TileConfig(block_m, block_n, num_warps, num_stages)


# (forward, dK/dV, dQ) by (fp32, masked, D bucket); dK/dV's block_n is its keys a program
_TABLE: dict[tuple[bool, bool, int], tuple[TileConfig, TileConfig, TileConfig]] = {
    (False, False, 64): (_t(128, 64, 4, 3), _t(32, 128, 8, 3), _t(128, 32, 4, 3)),
    (False, True, 64): (_t(128, 64, 8, 3), _t(32, 128, 8, 3), _t(128, 32, 8, 3)),
    (False, False, 128): (_t(128, 64, 8, 3), _t(32, 128, 8, 2), _t(128, 32, 8, 2)),
    (False, True, 128): (_t(128, 64, 8, 2), _t(32, 64, 8, 1), _t(128, 32, 8, 2)),
    (False, False, 256): (_t(64, 64, 8, 2), _t(32, 32, 8, 1), _t(64, 16, 4, 1)),
    (False, True, 256): (_t(64, 64, 8, 2), _t(16, 32, 8, 1), _t(32, 16, 8, 1)),
    (True, False, 64): (_t(64, 32, 4, 2), _t(16, 64, 4, 2), _t(64, 16, 4, 2)),
    (True, False, 128): (_t(32, 32, 4, 2), _t(16, 32, 8, 1), _t(32, 16, 8, 1)),
    (True, False, 256): (_t(16, 32, 8, 1), _t(16, 16, 8, 1), _t(16, 16, 8, 1)),
}


# the tile sweep's forward winners, 16-bit, by (variant, D bucket): an unmasked causal variant
# without a window (half of a query block's key tiles are skipped, so smaller query blocks keep
# more programs busy), and an additive bias without a keep mask
_SWEPT_FORWARD: dict[tuple[str, int], TileConfig] = {("causal", 64): _t(64, 64, 4, 3), ("bias", 64): _t(128, 64, 4, 2)}


def _swept_kind(variant: AttentionVariant) -> str | None:
    if variant.has_keep or variant.window:
        return None
    if variant.has_bias:
        return "bias"
    return "causal" if variant.causal else None


def _bucket(d: int) -> int:
    """The head-size bucket of the tables: 64, 128 or 256."""
    return 64 if d <= 64 else 128 if d <= 128 else 256


def _row(d: int, dtype: torch.dtype, variant: AttentionVariant,
         ) -> tuple[TileConfig, TileConfig, TileConfig]:
    bucket = _bucket(d)
    fp32 = dtype == torch.float32
    masked = (variant.has_bias or variant.has_keep) and not fp32
    return _TABLE[(fp32, masked, bucket)]


def _fit(config: TileConfig, rows: int, cols: int) -> TileConfig:
    return TileConfig(_side(config.block_m, rows), _side(config.block_n, cols), config.num_warps,
                      config.num_stages)


_INTERPRETED = TileConfig(16, 16, 1, 1)


def forward_config(d: int, sq: int, sk: int, dtype: torch.dtype, variant: AttentionVariant,
                   interpreted: bool = False) -> TileConfig:
    """The forward kernel's configuration for head size `d`, `sq` queries, `sk` keys (module
    docstring)."""
    if interpreted:
        return _INTERPRETED
    config = _row(d, dtype, variant)[0]
    kind = _swept_kind(variant)
    if kind is not None and dtype != torch.float32:
        config = _SWEPT_FORWARD.get((kind, _bucket(d)), config)
    return _fit(config, sq, sk)


def backward_config(d: int, sq: int, sk: int, dtype: torch.dtype, variant: AttentionVariant,
                    interpreted: bool = False) -> BackwardConfig:
    """The backward kernels' configurations (module docstring)."""
    if interpreted:
        return BackwardConfig(_INTERPRETED, _INTERPRETED)
    _, dkdv, dq = _row(d, dtype, variant)
    if variant.bias_grad and dkdv.block_n > 64:
        dkdv = TileConfig(dkdv.block_m, 64, dkdv.num_warps, dkdv.num_stages)
    return BackwardConfig(_fit(dkdv, sq, sk), _fit(dq, sq, sk))
