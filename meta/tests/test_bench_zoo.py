"""The model zoo's catalog (coil.bench.zoo): its contract, without building a model (the
integration suite's tests-integration/zoo builds and compiles them)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from coil.bench import zoo


def test_catalog_covers_the_kinds_and_families() -> None:
    entries = [zoo.entry(n) for n in zoo.names()]
    assert len(entries) >= 24
    assert len({e.name for e in entries}) == len(entries)
    assert {e.kind for e in entries} == set(zoo.KINDS)
    assert len({e.family for e in entries if e.kind == "decoder"}) >= 6
    for e in entries:
        assert e.describe and e.recipe("real") != e.recipe("tiny"), e.name
        assert e.shape("real").batch > e.shape("tiny").batch, e.name


def test_shapes_are_the_bench_sizes() -> None:
    assert zoo.SHAPES[("decoder", "real")] == zoo.Shape(8, seq=1024)
    assert zoo.SHAPES[("encoder", "real")] == zoo.Shape(16, seq=512)
    assert zoo.SHAPES[("encdec", "real")] == zoo.Shape(8, seq=512, target=128)
    assert zoo.SHAPES[("vision", "real")] == zoo.Shape(64, image=224)


def test_no_entry_sets_the_attention_implementation() -> None:
    for name in zoo.names():
        for size in zoo.SIZES:
            recipe = zoo.entry(name).recipe(size)
            if isinstance(recipe, zoo.HF):
                assert "attn_implementation" not in recipe.kwargs, name


def test_unknown_names_and_sizes_are_refused() -> None:
    with pytest.raises(KeyError, match="no zoo model 'nope'"):
        zoo.entry("nope")
    with pytest.raises(ValueError, match="size must be one of"):
        zoo.build("gpt2", "huge", "cpu", None)  # type: ignore[arg-type]


def test_importing_the_zoo_imports_no_model_library() -> None:
    code = ("import sys, coil.bench.zoo; "
            "print(sorted(m for m in ('torch', 'transformers', 'timm', 'torchvision') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert out.strip() == "[]"
