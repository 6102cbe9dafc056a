"""``sie.sdk.scoring``: MaxSim against a plain-loop reference, its edge cases, and the public SDK.

The reference is the definition written as loops in float64 (for each query token, the best dot
product with any document token, summed), so a mistake in the blocked/vectorised path cannot be
mirrored by the check. Every reference test also runs with tiny scoring blocks, so block boundaries
fall inside every input.
"""

from __future__ import annotations

import numpy as np
import pytest

from sie.sdk import scoring
from sie.sdk.scoring import maxsim, maxsim_batch

from .helper_cases import SCORING_CASES, assert_same, unit

DTYPES = ["float32", "float16", "float64", "int8"]


def reference_maxsim(query, document) -> float:
    q = np.asarray(query, dtype=np.float32).astype(np.float64)
    d = np.asarray(document, dtype=np.float32).astype(np.float64)
    total = 0.0
    for q_token in q:
        total += max(float(np.dot(q_token, d_token)) for d_token in d)
    return total


def random_multivector(rng: np.random.Generator, tokens: int, dim: int, dtype: str) -> np.ndarray:
    if dtype == "int8":
        return rng.integers(-127, 128, size=(tokens, dim)).astype(np.int8)
    return rng.standard_normal((tokens, dim)).astype(dtype)


@pytest.fixture(params=[1, 300, scoring._BLOCK_FLOATS], ids=["block-1", "block-300", "block-default"])
def block_floats(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setattr(scoring, "_BLOCK_FLOATS", request.param)
    return int(request.param)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("seed", range(4))
def test_maxsim_matches_the_loop_reference(block_floats: int, dtype: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    dim = int(rng.integers(1, 48))
    query = random_multivector(rng, int(rng.integers(1, 20)), dim, dtype)
    documents = [random_multivector(rng, int(rng.integers(1, 30)), dim, dtype) for _ in range(25)]
    expected = [reference_maxsim(query, d) for d in documents]
    np.testing.assert_allclose(maxsim(query, documents), expected, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("seed", range(4))
def test_maxsim_batch_matches_the_loop_reference(block_floats: int, dtype: str, seed: int) -> None:
    rng = np.random.default_rng(100 + seed)
    dim = int(rng.integers(1, 48))
    queries = [random_multivector(rng, int(rng.integers(1, 20)), dim, dtype) for _ in range(5)]
    documents = [random_multivector(rng, int(rng.integers(1, 30)), dim, dtype) for _ in range(25)]
    expected = [[reference_maxsim(q, d) for d in documents] for q in queries]
    scores = maxsim_batch(queries, documents)
    assert scores.dtype == np.float32 and scores.shape == (5, 25)
    np.testing.assert_allclose(scores, expected, rtol=1e-5, atol=1e-4)


def test_batch_rows_are_the_single_query_scores() -> None:
    queries = [unit(n, 32, seed=n) for n in (1, 4, 9)]
    documents = [unit(n, 32, seed=20 + n) for n in (2, 3, 17, 1)]
    scores = maxsim_batch(queries, documents)
    for row, query in zip(scores, queries, strict=True):
        np.testing.assert_allclose(row, maxsim(query, documents), rtol=1e-6)


def test_a_normalised_query_against_itself_scores_its_token_count() -> None:
    query = unit(7, 64, seed=3)
    assert maxsim(query, [query]) == pytest.approx([7.0], rel=1e-6)


def test_every_form_of_documents_gives_the_same_scores() -> None:
    query = unit(4, 16, seed=1)
    documents = [unit(6, 16, seed=s) for s in range(3)]
    expected = maxsim(query, documents)
    assert maxsim(query, np.stack(documents)) == expected
    assert maxsim(query, tuple(documents)) == expected
    assert maxsim(query, iter(documents)) == expected
    assert maxsim(query.tolist(), [d.tolist() for d in documents]) == expected
    # One 2-D array is one document, not a list of one-token documents.
    # (alone it is its own block, so its float32 sums may round differently)
    assert maxsim(query, documents[1]) == pytest.approx([expected[1]], rel=1e-6)


def test_results_are_plain_floats_and_a_float32_matrix() -> None:
    query = unit(3, 8).astype(np.float16)
    scores = maxsim(query, [unit(2, 8)])
    assert isinstance(scores, list) and type(scores[0]) is float
    matrix = maxsim_batch([query], [unit(2, 8).astype(np.float16)])
    assert matrix.dtype == np.float32 and matrix.shape == (1, 1)


def test_empty_sides() -> None:
    query = unit(3, 8)
    assert maxsim(query, []) == []
    for queries, documents, shape in (([], [unit(2, 8)], (0, 1)), ([query], [], (1, 0)), ([], [], (0, 0))):
        scores = maxsim_batch(queries, documents)
        assert scores.shape == shape and scores.dtype == np.float32
    # Without documents nothing is compared, so queries of different widths are not an error.
    assert maxsim_batch([unit(2, 8), unit(2, 16)], []).shape == (2, 0)


def test_float16_inputs_are_summed_in_float32() -> None:
    loud = np.full((4, 64), 200, dtype=np.float16)  # each dot product is 2.56e6, beyond float16's 65504
    assert maxsim(loud, [loud]) == [4 * 64 * 200.0 * 200.0]
    assert maxsim_batch([loud], [loud])[0, 0] == 4 * 64 * 200.0 * 200.0


@pytest.mark.parametrize(
    ("query", "documents", "blamed"),
    [
        (unit(3, 8)[0], [unit(2, 8)], r"^query must be a 2-D"),
        (unit(3, 8)[None], [unit(2, 8)], r"^query must be a 2-D"),
        (unit(3, 8)[:0], [unit(2, 8)], r"^query has no tokens"),
        (unit(3, 8), [unit(2, 8), unit(2, 8)[0]], r"^documents\[1\] must be a 2-D"),
        (unit(3, 8), [unit(2, 8), unit(2, 8)[:0]], r"^documents\[1\] has no tokens"),
        (unit(3, 8), [unit(2, 8), unit(2, 8), unit(2, 4)], r"query has dim 8 but documents\[2\] has dim 4"),
    ],
)
def test_bad_shapes_name_the_argument(query, documents, blamed: str) -> None:
    with pytest.raises(ValueError, match=blamed):
        maxsim(query, documents)


def test_batch_errors_name_the_argument() -> None:
    with pytest.raises(ValueError, match=r"^queries\[1\] has no tokens"):
        maxsim_batch([unit(2, 8), unit(2, 8)[:0]], [unit(2, 8)])
    with pytest.raises(ValueError, match=r"query has dim 4 but documents\[0\] has dim 8"):
        maxsim_batch([unit(2, 8), unit(2, 4)], [unit(2, 8)])
    # Documents are checked even when there is no query to score them against.
    with pytest.raises(ValueError, match=r"^documents\[0\] must be a 2-D"):
        maxsim_batch([], [unit(2, 8)[0]])


def test_the_first_bad_document_is_reported(block_floats: int) -> None:
    documents = [unit(2, 8), unit(2, 4), unit(2, 8)[0]]
    with pytest.raises(ValueError, match=r"documents\[1\]"):
        maxsim(unit(3, 8), documents)


@pytest.mark.parametrize("case", SCORING_CASES)
def test_same_as_the_public_sdk(case: str, our_helper_results, public_helper_results) -> None:
    """Same scores (up to float32 summation order), dtypes, shapes and errors as ``sie_sdk.scoring``."""
    assert_same(
        our_helper_results["outcomes"][case], public_helper_results["outcomes"][case], rel=2e-6, where=case
    )


@pytest.mark.parametrize("name", ["maxsim", "maxsim_batch"])
def test_same_signatures_as_the_public_sdk(name: str, our_helper_results, public_helper_results) -> None:
    assert our_helper_results["signatures"][name] == public_helper_results["signatures"][name]
