"""Every family against the adapter contract, without loading a model: its declared request options are
the ones beside its name in the family table, its traits are ``Trait``s it lists (no flag spelled by
hand), and a family without embeddings carries no embedding fields."""

from __future__ import annotations

from typing import Any

import pytest

from sie.adapters.contract import ENCODE_OUTPUTS, Trait
from sie.adapters.loading import CONTRACT, UnknownAdapter, adapter_class
from sie.catalog.families import CANONICAL, declared_request_options

FAMILIES = sorted(CANONICAL)
# What a hand-written trait flag looks like: any class attribute starting like one of the traits.
TRAIT_PREFIXES = tuple(sorted({trait.value.split("_")[0] + "_" for trait in Trait}))


@pytest.mark.parametrize("path", FAMILIES)
def test_each_families_declared_options_are_its_classes(path: str) -> None:
    assert declared_request_options(path) == adapter_class(path).request_options


def test_a_custom_adapter_declares_nothing_here() -> None:
    assert declared_request_options("my_adapter.py:Mine") is None


@pytest.mark.parametrize("path", FAMILIES)
def test_each_family_lists_its_traits_and_spells_no_flag(path: str) -> None:
    cls: Any = adapter_class(path)
    assert isinstance(cls.traits, frozenset) and all(isinstance(t, Trait) for t in cls.traits)
    flags = [
        name for name in dir(cls) if name.startswith(TRAIT_PREFIXES) and not callable(getattr(cls, name))
    ]
    assert flags == [], f"{path} spells traits as attributes: {flags}"
    if Trait.READS_ITEM_STATE in cls.traits:
        assert Trait.READS_ITEM_METADATA in cls.traits, "a state is read from the item's metadata"


@pytest.mark.parametrize("path", FAMILIES)
def test_a_family_without_encode_outputs_carries_no_embedding_fields(path: str) -> None:
    """Output sizes and a pooling mean something only for embeddings (an encoder sets its ``dims``
    when it loads, from its checkpoint); nothing makes an extractor or a reranker declare them."""
    cls: Any = adapter_class(path)
    if cls.capabilities.isdisjoint(ENCODE_OUTPUTS):
        assert not hasattr(cls, "dims") and not hasattr(cls, "default_pooling"), path


def test_a_class_short_of_the_contract_fails_to_load_with_what_it_lacks(tmp_path) -> None:
    (tmp_path / "half.py").write_text("class Half:\n    family = 'Half'\n    def run(self): ...\n")
    with pytest.raises(UnknownAdapter, match="lacks capabilities, inputs, request_options, traits, load"):
        adapter_class("half.py:Half", tmp_path)
    assert CONTRACT[0] == "family"
