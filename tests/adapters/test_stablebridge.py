"""The Stablebridge context pruner against transformers and torch on the same weights.

A tiny XLM-RoBERTa reranker with XLM-R's pair layout (tests/builders.py) stands for
bge-reranker-v2-m3, and a seeded pruning head is saved by ``torch.save`` in each layout trainers
leave. The reference is computed here, independently of the adapter: transformers'
``XLMRobertaForSequenceClassification`` gives the rerank score and the last hidden states, the head is
applied with plain torch functions, the passage is found after the pair's second separator (the
public adapter's rule) and mapped back through the passage tokenized alone, and the spans and the
summary are worked out from those probabilities.
"""

from __future__ import annotations

import math
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from transformers import AutoTokenizer, XLMRobertaForSequenceClassification

from sie.adapters.batch import ImageData
from sie.adapters.contract import Forward, LoadSpec
from sie.adapters.loading import adapter_class
from sie.adapters.stablebridge import NO_QUERY, StablebridgePruner
from sie.core.extraction import Entity
from sie.core.options import Capability, ComputePrecision, OverflowPolicy
from sie.core.task import Task, UnsupportedInput
from sie.engine.load_errors import LoadErrorClass, LoadFailureClass, classify
from sie.weights.sources import WeightsNotFound, WeightSources
from tests import builders
from tests.conftest import extracted

SCORE = Forward(frozenset({Capability.SCORE}))
HIDDEN = 64
QUERY = "what causes high blood pressure"
PASSAGES = [
    "High blood pressure is often caused by stress, too much salt and genetics.",
    "ok",
    "The film ran for three hours; the popcorn was stale.\nNobody  cared.",
    " ".join(["salt raises blood pressure in the kidney and the heart"] * 12),
]
BAD_THRESHOLD = "Stablebridge pruner {} must be a finite number between 0 and 1"


@pytest.fixture(scope="module")
def reranker(tmp_path_factory: pytest.TempPathFactory, splade_dir: Path) -> Path:
    return builders.xlm_roberta_reranker(splade_dir, tmp_path_factory.mktemp("reranker"), xlm_r_pairs=True)


@pytest.fixture(scope="module")
def head(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, torch.Tensor]]:
    file = tmp_path_factory.mktemp("head") / "best.pt"
    return file, builders.pruning_head(file, HIDDEN)


def fetch_locally(cache: Path) -> Any:
    """The weight tiers with no hub: a local path, else the local cache at ``cache``."""
    sources = WeightSources(local_cache=cache, hf_fallback=False)
    return lambda hf_id, revision, path: sources.resolve(hf_id, path, None, revision)


def load(reranker: Path, where: Path | str, cache: Path | None = None, **loadtime: Any) -> StablebridgePruner:
    options = {"pruning_head_path": str(where), "hidden_size": HIDDEN, **loadtime}
    fetch = fetch_locally(cache or Path("/nonexistent-cache"))
    return StablebridgePruner.load(
        LoadSpec(reranker, "cpu", ComputePrecision.FLOAT32, 8192, loadtime=options, fetch=fetch)
    )


@pytest.fixture(scope="module")
def pruner(reranker: Path, head: tuple[Path, dict[str, torch.Tensor]]) -> StablebridgePruner:
    return load(reranker, head[0].parent)


def extract(query: str | None, **options: Any) -> Forward:
    return Forward(frozenset({Capability.EXTRACT}), task=Task.of([], options, query))


def entities(pruner: StablebridgePruner, texts: list[str], forward: Forward) -> list[list[Entity]]:
    extractions = pruner.run(pruner.prepare(texts, forward), forward).extractions
    assert extractions is not None
    return [one.entities for one in extractions]


class Reference:
    """transformers' reranker and the head as plain torch functions, with the public adapter's rules."""

    def __init__(self, folder: Path, state: dict[str, torch.Tensor]) -> None:
        self.tokenizer = AutoTokenizer.from_pretrained(str(folder))
        self.model = XLMRobertaForSequenceClassification.from_pretrained(str(folder)).eval()
        self.state = state

    def scores(self, pairs: list[tuple[str, str]]) -> np.ndarray:
        inputs = self.tokenizer(*map(list, zip(*pairs, strict=True)), padding=True, return_tensors="pt")
        with torch.no_grad():
            return torch.sigmoid(self.model(**inputs).logits[:, 0]).numpy()

    def tokens(self, query: str, passages: list[str]) -> list[tuple[float, list[tuple[int, int, float]]]]:
        """Each passage's rerank score and its spanned tokens: (start, end, keep probability)."""
        inputs = self.tokenizer([query] * len(passages), passages, padding=True, return_tensors="pt")
        with torch.no_grad():
            out = self.model(**inputs, output_hidden_states=True)
            hidden = out.hidden_states[-1]
            s = self.state
            inner = F.gelu(F.linear(hidden, s["classifier.0.weight"], s["classifier.0.bias"]))
            logits = F.linear(inner, s["classifier.3.weight"], s["classifier.3.bias"])[..., 0]
            keep = torch.sigmoid(logits) * inputs["attention_mask"]
        skipped = {self.tokenizer.pad_token_id, self.tokenizer.sep_token_id, self.tokenizer.cls_token_id}
        answers = []
        for row, passage in enumerate(passages):
            ids = inputs["input_ids"][row].tolist()
            second_sep = [i for i, token in enumerate(ids) if token == self.tokenizer.sep_token_id][1]
            offsets = self.tokenizer(passage, add_special_tokens=False, return_offsets_mapping=True)[
                "offset_mapping"
            ]
            at = range(second_sep + 1, second_sep + 1 + len(offsets))  # the passage alone, aligned
            tokens = zip(at, ids[at.start : at.stop], offsets, strict=True)
            spanned = [
                (start, end, float(keep[row, at]))
                for at, token, (start, end) in tokens
                if token not in skipped and end > start
            ]
            answers.append((float(torch.sigmoid(out.logits[row, 0])), spanned))
        return answers

    def entities(self, query: str, passages: list[str], prune: float, highlight: float) -> list[list[Entity]]:
        def label(p: float) -> str:
            return "highlight" if p >= highlight else "kept" if p >= prune else "pruned"

        answers = []
        for text, (rerank, tokens) in zip(passages, self.tokens(query, passages), strict=True):
            runs: list[list[tuple[int, int, float]]] = []
            for token in tokens:
                last = runs[-1][-1] if runs else None
                joins = (
                    last is not None
                    and label(last[2]) == label(token[2])
                    and token[0] <= max(t[1] for t in runs[-1]) + 1
                )
                if joins:
                    runs[-1].append(token)
                else:
                    runs.append([token])
            spans = []
            for run in runs:
                start, end = run[0][0], max(t[1] for t in run)
                mean = float(np.mean([t[2] for t in run]))
                spans.append(Entity(text[start:end], label(run[0][2]), mean, start, end))
            kept = sum(span.label != "pruned" for span in spans)
            compression = 1 - kept / len(spans)
            summary = f"rerank={rerank:.4f} compression={compression:.2%} kept={kept}/{len(spans)}"
            answers.append([Entity(summary, "summary", rerank), *spans])
        return answers


@pytest.fixture(scope="module")
def reference(reranker: Path, head: tuple[Path, dict[str, torch.Tensor]]) -> Reference:
    return Reference(reranker, head[1])


def same(got: list[list[Entity]], want: list[list[Entity]], atol: float = 1e-5) -> None:
    assert len(got) == len(want)
    for mine, theirs in zip(got, want, strict=True):
        assert [(e.text, e.label, e.start, e.end) for e in mine] == [
            (e.text, e.label, e.start, e.end) for e in theirs
        ]
        np.testing.assert_allclose([e.score for e in mine], [e.score for e in theirs], atol=atol)


def test_scores_equal_transformers_sigmoid(pruner: StablebridgePruner, reference: Reference) -> None:
    pairs = [(QUERY, passage) for passage in PASSAGES]
    scores = pruner.run(pruner.prepare(pairs, SCORE), SCORE).scores
    assert scores is not None
    np.testing.assert_allclose(scores, reference.scores(pairs), atol=1e-5)
    assert np.ptp(scores) > 1e-4  # the pairs really differ, so equality is not vacuous
    instructed = Forward(frozenset({Capability.SCORE}), task=Task(instruction="Find the medical cause"))
    scores = pruner.run(pruner.prepare(pairs, instructed), instructed).scores
    expected = reference.scores([(f"Find the medical cause {q}", d) for q, d in pairs])
    np.testing.assert_allclose(scores, expected, atol=1e-5)


@pytest.mark.parametrize("layout", builders.PRUNING_HEAD_LAYOUTS)
def test_every_token_probability_is_the_head_on_transformers_hidden_states(
    layout: str, reranker: Path, reference: Reference, tmp_path: Path
) -> None:
    """Words two spaces apart never join, so each span is one token and its score that token's
    probability; the head file is read in each checkpoint layout."""
    file = tmp_path / "head.pt"
    assert builders.pruning_head(file, HIDDEN, layout).keys() == reference.state.keys()
    pruner = load(reranker, file)
    words = ["salt", "raises", "blood", "pressure", "in", "the", "kidney", "and", "the", "heart", "over"]
    words += ["years", "too", "much", "is"]
    passage = "  ".join(words)
    (got,) = entities(pruner, [passage], extract(QUERY))
    ((rerank, tokens),) = reference.tokens(QUERY, [passage])
    assert len(got) == 1 + len(tokens) == 1 + len(words)
    assert [(e.start, e.end) for e in got[1:]] == [(start, end) for start, end, _ in tokens]
    np.testing.assert_allclose([e.score for e in got], [rerank] + [p for _, _, p in tokens], atol=1e-5)
    labels = {e.label for e in got[1:]}
    assert labels == {"pruned", "kept", "highlight"}, labels  # the test head spreads its probabilities


@pytest.mark.parametrize(("prune", "highlight"), [(0.6, 0.9), (0.4, 0.8), (0.7, 0.95), (0.0, 1.0)])
def test_spans_and_summary_are_worked_out_from_the_probabilities(
    pruner: StablebridgePruner, reference: Reference, prune: float, highlight: float
) -> None:
    forward = extract(QUERY, prune_threshold=prune, highlight_threshold=highlight)
    got = entities(pruner, PASSAGES, forward)
    same(got, reference.entities(QUERY, PASSAGES, prune, highlight))
    for text, found in zip(PASSAGES, got, strict=True):
        assert found[0].label == "summary" and found[0].start is None and found[0].end is None
        assert all(text[e.start : e.end] == e.text for e in found[1:] if e.start is not None)


def test_the_profile_thresholds_are_the_defaults(pruner: StablebridgePruner, reference: Reference) -> None:
    same(entities(pruner, PASSAGES, extract(QUERY)), reference.entities(QUERY, PASSAGES, 0.6, 0.9))


def test_an_item_alone_equals_it_inside_a_batch_of_mixed_lengths(pruner: StablebridgePruner) -> None:
    forward = extract(QUERY)
    batch = entities(pruner, PASSAGES, forward)
    for index, passage in enumerate(PASSAGES):
        same(entities(pruner, [passage], forward), [batch[index]], atol=1e-6)


def test_the_padded_forward_answers_as_the_packed_one(
    pruner: StablebridgePruner, reranker: Path, head: tuple[Path, dict[str, torch.Tensor]]
) -> None:
    padded = load(reranker, head[0], packed=False)
    assert pruner.packs_tokens and not padded.packs_tokens
    forward = extract(QUERY)
    same(entities(padded, PASSAGES, forward), entities(pruner, PASSAGES, forward), atol=1e-6)


def test_the_passage_is_found_by_the_tokenizer_not_by_counting_separators(
    pruner: StablebridgePruner,
) -> None:
    """A query holding a separator would move the public adapter's "after the second separator"
    into the query; with every token highlighted the one span is the whole passage."""
    passage = "High blood pressure is caused by salt"
    for query in (QUERY, "what [SEP] causes [SEP] it"):
        (found,) = entities(pruner, [passage], extract(query, prune_threshold=0, highlight_threshold=0))
        assert [(e.text, e.label, e.start, e.end) for e in found[1:]] == [
            (passage, "highlight", 0, len(passage))
        ]
        assert found[0].text.endswith("compression=0.00% kept=1/1")


def test_a_separator_typed_in_the_passage_gets_no_span(pruner: StablebridgePruner) -> None:
    (found,) = entities(
        pruner, ["salt [SEP] sugar"], extract(QUERY, prune_threshold=0, highlight_threshold=0)
    )
    assert [(e.text, e.start, e.end) for e in found[1:]] == [("salt", 0, 4), ("sugar", 11, 16)]


def test_the_public_adapter_name_is_this_class() -> None:
    public = "sie_server.adapters.stablebridge_pruner:StablebridgePrunerAdapter"
    assert adapter_class(public) is StablebridgePruner


@pytest.mark.parametrize(
    ("options", "name"),
    [
        ({"prune_threshold": 1.5}, "prune_threshold"),
        ({"prune_threshold": "0.5"}, "prune_threshold"),
        ({"prune_threshold": True}, "prune_threshold"),
        ({"highlight_threshold": -0.1}, "highlight_threshold"),
        ({"highlight_threshold": math.nan}, "highlight_threshold"),
        ({"highlight_threshold": 10**400}, "highlight_threshold"),
    ],
)
def test_bad_thresholds_are_refused(pruner: StablebridgePruner, options: dict[str, Any], name: str) -> None:
    with pytest.raises(UnsupportedInput) as refused:
        pruner.prepare(["some passage"], extract(QUERY, **options))
    assert str(refused.value) == BAD_THRESHOLD.format(name)


@pytest.mark.parametrize("query", [None, "", "   ", "\x00", "\u200b\u0301"])
def test_an_extract_without_a_query_is_refused(pruner: StablebridgePruner, query: str | None) -> None:
    """An instruction the tokenizer reads as nothing (control, zero-width and combining characters)
    pruned against an empty query, what no instruction at all is refused for."""
    with pytest.raises(UnsupportedInput) as refused:
        pruner.prepare(["some passage"], extract(query))
    assert str(refused.value) == NO_QUERY


@pytest.mark.parametrize("text", ["", "   \n", "[SEP] [CLS]"])
def test_a_passage_with_no_tokens_is_refused(pruner: StablebridgePruner, text: str) -> None:
    with pytest.raises(UnsupportedInput) as refused:
        pruner.prepare(["fine", text], extract(QUERY))
    assert str(refused.value) == "Stablebridge pruner needs a passage to prune: item 1 has no tokens"


def test_a_pair_longer_than_the_model_reads_is_refused_not_cut(
    reranker: Path, head: tuple[Path, dict[str, torch.Tensor]]
) -> None:
    """Cut, the passage's tail would get no span and the summary would count only the rest: that item
    fails alone, under every overflow policy (``error`` words it as every family's window refusal)."""
    pruner = load(reranker, head[0])
    long = " ".join(["salt"] * 700)  # with the query and 4 separators, past the 599 positions
    short = " ".join(["salt"] * 30)
    for policy in OverflowPolicy:
        refused, kept = pruner.prepare([long, short], replace(extract(QUERY), overflow=policy))
        assert refused.error is not None and refused.error.code == "INPUT_TOO_LONG" and kept.error is None
        assert refused.error.message == (
            "The input takes 709 tokens, past the model's 599-token window, and options.overflow_policy is "
            "'error'. Shorten it, or send overflow_policy 'truncate_text'."
            if policy is OverflowPolicy.ERROR
            else "Stablebridge pruner reads at most 599 tokens of query and passage together; this pair has 709: "
            "split its text"
        )
    answered = extracted(pruner, [long, short], extract(QUERY))
    assert answered[0].error is not None and answered[1] == extracted(pruner, [short], extract(QUERY))[0]
    assert answered[1].entities, "the short passage is answered as alone"
    scores = pruner.run(pruner.prepare([(QUERY, " ".join(["salt"] * 300))], SCORE), SCORE).scores
    assert scores is not None and scores.shape == (1,)


def test_other_inputs_are_refused(pruner: StablebridgePruner) -> None:
    with pytest.raises(UnsupportedInput, match="not query-document pairs"):
        pruner.prepare([(QUERY, "passage")], extract(QUERY))
    with pytest.raises(UnsupportedInput, match="take text, not images"):
        pruner.prepare([ImageData(b"\x89PNG")], extract(QUERY))
    with pytest.raises(UnsupportedInput, match="pairs, not single texts"):
        pruner.prepare(["just a text"], SCORE)


def test_the_head_resolves_through_the_weight_tiers(
    reranker: Path, head: tuple[Path, dict[str, torch.Tensor]], tmp_path: Path
) -> None:
    """A Hub id is looked up in the local cache (then the cluster cache and the Hub), pinned to
    ``pruning_head_revision`` when given; missing everywhere, the load names every place searched."""
    repository = "sugiv/stablebridge-pruner-highlighter"
    snapshot = tmp_path / "cache" / "models--sugiv--stablebridge-pruner-highlighter" / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    (snapshot / "best.pt").write_bytes(head[0].read_bytes())
    for revision in (None, "abc123"):
        pruner = load(reranker, repository, tmp_path / "cache", pruning_head_revision=revision)
        (found,) = entities(pruner, ["salt"], extract(QUERY))
        assert found[1].text == "salt"
    with pytest.raises(WeightsNotFound, match=f"no weights for '{repository}'.*local cache"):
        load(reranker, repository, tmp_path / "cache", pruning_head_revision="def456")
    # An unquoted commit of digits, as YAML reads it: a TypeError deep in the cache lookup (retried)
    with pytest.raises(ValueError, match=r"pruning_head_revision must be a string \(quote it\), got 1234567"):
        load(reranker, repository, tmp_path / "cache", pruning_head_revision=1234567)
    with pytest.raises(WeightsNotFound, match=r"weights_path /nowhere/best\.pt \(absent\)"):
        load(reranker, "/nowhere/best.pt")
    with pytest.raises(FileNotFoundError, match=r"no pruning head 'other\.pt'"):
        load(reranker, head[0].parent, pruning_head_file="other.pt")


@pytest.mark.parametrize(
    ("where", "hub_id"),
    [
        ("sugiv/stablebridge-pruner-highlighter", "sugiv/stablebridge-pruner-highlighter"),
        ("heads/best.pt", "heads/best.pt"),  # as a Hub id would be: a local path first, then the tiers
        ("./heads", None),
        ("../heads", None),
        ("/srv/heads", None),
    ],
)
def test_only_a_hub_id_is_asked_of_the_hub(
    reranker: Path, head: tuple[Path, dict[str, torch.Tensor]], where: str, hub_id: str | None
) -> None:
    """A path written relative to the YAML ("./heads") is not a repository: asked of the Hub, its
    missing folder failed the load as the Hub unreachable (retried), not as the path absent."""
    asked: list[tuple[str | None, str | None]] = []

    def fetch(hf_id: str | None, revision: str | None, path: str | None) -> Path:
        asked.append((hf_id, path))
        return head[0].parent

    options = {"pruning_head_path": where, "hidden_size": HIDDEN}
    StablebridgePruner.load(
        LoadSpec(reranker, "cpu", ComputePrecision.FLOAT32, 8192, loadtime=options, fetch=fetch)
    )
    assert asked == [(hub_id, where)]


def test_a_head_that_does_not_fit_fails_the_load(
    reranker: Path, head: tuple[Path, dict[str, torch.Tensor]], tmp_path: Path
) -> None:
    """A head that would run with a randomly initialised layer never loads."""
    partial = tmp_path / "partial.pt"
    torch.save({k: v for k, v in head[1].items() if not k.startswith("classifier.3.")}, partial)
    with pytest.raises(ValueError, match=r"no weights for classifier\.3\.weight, classifier\.3\.bias"):
        load(reranker, partial)
    wider = tmp_path / "wider.pt"
    builders.pruning_head(wider, HIDDEN, intermediate=32)
    with pytest.raises(ValueError, match="does not fit hidden_size 64, intermediate_size 512"):
        load(reranker, wider)
    assert load(reranker, wider, intermediate_size=32) is not None
    with pytest.raises(ValueError, match="hidden_size 1024 is not the reranker's \\(64\\)"):
        load(reranker, head[0], hidden_size=1024)
    for bad in (math.nan, math.inf):  # loaded: every token pruned with a null score, or one label
        broken = tmp_path / "broken.pt"
        torch.save({**head[1], "classifier.3.bias": torch.tensor([bad])}, broken)
        with pytest.raises(ValueError, match=r"weights that are not finite: classifier\.3\.bias"):
            load(reranker, broken)
    tensor = tmp_path / "tensor.pt"
    torch.save(torch.zeros(3), tensor)
    with pytest.raises(ValueError, match="holds a Tensor, not a pruning head's state dict"):
        load(reranker, tensor)


class _RunsCode:
    """Pickled, it would make a folder when unpickled: a checkpoint that runs code."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return os.mkdir, (str(self.marker),)


@pytest.mark.parametrize("kind", ["code", "garbage", "truncated", "integer_keys"])
def test_a_checkpoint_that_is_not_tensors_fails_the_load_for_good(
    reranker: Path, head: tuple[Path, dict[str, torch.Tensor]], tmp_path: Path, kind: str
) -> None:
    """torch's own errors (an UnpicklingError that advises loading without weights_only, an
    AttributeError from load_state_dict) were UNKNOWN load failures, retried up to 8 times, each after
    loading the reranker again; a head that cannot be read is the configuration's error (permanent)."""
    file, marker = tmp_path / "best.pt", tmp_path / "ran"
    if kind == "code":
        torch.save({"pruning_head": _RunsCode(marker)}, file)
    elif kind == "garbage":
        file.write_bytes(b"not a checkpoint " * 8)
    elif kind == "truncated":
        file.write_bytes(head[0].read_bytes()[:200])
    else:
        torch.save({"pruning_head": {0: torch.zeros(3)}}, file)
    with pytest.raises(
        ValueError, match=r"not a checkpoint of tensors alone|holds no pruning head"
    ) as failed:
        load(reranker, file)
    assert not marker.exists()
    assert classify(failed.value, 1) == LoadFailureClass(LoadErrorClass.CONFIG, True, 0.0)


def test_the_summary_counts_spans_not_tokens() -> None:
    """The public arithmetic: compression is the share of spans pruned, the rerank score rounded."""
    from sie.adapters.stablebridge import Thresholds, pruning_spans, summary

    offsets = np.array([[0, 4], [5, 8], [9, 13], [15, 19]])
    probabilities = np.array([0.95, 0.2, 0.3, 0.7], dtype=np.float32)
    spans = pruning_spans("salt and more  kale", offsets, probabilities, Thresholds(0.6, 0.9))
    assert [(e.text, e.label) for e in spans] == [
        ("salt", "highlight"),
        ("and more", "pruned"),
        ("kale", "kept"),
    ]
    assert spans[1].score == pytest.approx(0.25)
    assert summary(0.123456, spans) == Entity(
        "rerank=0.1235 compression=33.33% kept=2/3", "summary", 0.123456
    )


def test_a_scored_pair_tells_the_callers_text_in_it(pruner: StablebridgePruner, reranker: Path) -> None:
    """``usage`` on score: each pair's ``content`` is the query (with the request's instruction) and
    the passage each tokenized alone by the reranker's tokenizer; the separators are the template."""
    tokenizer = AutoTokenizer.from_pretrained(str(reranker))

    def alone(text: str) -> int:
        return len(tokenizer(text, add_special_tokens=False).input_ids)

    pairs = [(QUERY, passage) for passage in PASSAGES]
    prepared = pruner.prepare(pairs, SCORE)
    assert [item.content for item in prepared] == [alone(QUERY) + alone(p) for p in PASSAGES]
    assert all(item.input_tokens == len(item.ids) > (item.content or 0) for item in prepared)
    instructed = Forward(frozenset({Capability.SCORE}), task=Task(instruction="Find the medical cause"))
    asked = pruner.prepare(pairs, instructed)
    extra = alone("Find the medical cause")
    assert [item.content for item in asked] == [alone(QUERY) + extra + alone(p) for p in PASSAGES]
