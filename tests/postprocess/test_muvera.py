import numpy as np
import pytest

from sie.core.options import Capability
from sie.postprocess.muvera import Muvera, MuveraConfig, MuveraStage, gray_code_rank

TOKEN_DIM = 16
SIGNS = np.array([-1.0, 1.0], dtype=np.float32)


def unit_rows(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


def random_bag(seed: int, num_tokens: int, dim: int = TOKEN_DIM) -> np.ndarray:
    return unit_rows(np.random.default_rng(seed).normal(size=(num_tokens, dim)))


# --- An independent reference, straight from the definition ------------------------------------------------
# The random matrices are RE-DERIVED here from the seed, following the public SIE's draw order (its
# sie_server/core/postprocessor.py): repetition r's hyperplanes are default_rng(seed + r).normal([dim, k]);
# its projection_dim sketch is a fresh default_rng(seed + r): integers(0, p, dim) columns, then choice of
# signs; the Count Sketch is default_rng(seed): integers(0, final, intermediate) buckets, then signs.
# The implementation's attributes are checked against them separately, so a drift in either shows.


def ref_planes(config: MuveraConfig, dim: int, rep: int) -> np.ndarray:
    rng = np.random.default_rng(config.seed + rep)
    return rng.normal(0.0, 1.0, size=(dim, config.num_simhash_projections)).astype(np.float32)


def ref_projection(config: MuveraConfig, dim: int, rep: int) -> np.ndarray:
    if config.projection_dim is None:
        return np.eye(dim, dtype=np.float32)
    rng = np.random.default_rng(config.seed + rep)
    columns = rng.integers(0, config.projection_dim, size=dim)
    signs = rng.choice(SIGNS, size=dim)
    matrix = np.zeros((dim, config.projection_dim), dtype=np.float32)
    for row in range(dim):
        matrix[row, columns[row]] = signs[row]
    return matrix


def ref_count_sketch(config: MuveraConfig, intermediate: int) -> tuple[np.ndarray, np.ndarray]:
    assert config.final_projection_dim is not None
    rng = np.random.default_rng(config.seed)
    buckets = rng.integers(0, config.final_projection_dim, size=intermediate)
    return buckets, rng.choice(SIGNS, size=intermediate)


def ref_partition(token: np.ndarray, planes: np.ndarray) -> int:
    """Sign bits, first hyperplane most significant, read as a Gray code: binary bit i is the XOR of
    Gray bits 0..i, and the partition is that binary number."""
    index, running_xor = 0, 0
    for j in range(planes.shape[1]):
        bit = 1 if float(np.dot(token, planes[:, j])) > 0 else 0
        running_xor ^= bit
        index = index * 2 + running_xor
    return index


def reference_fde(tokens: np.ndarray, config: MuveraConfig, dim: int, *, is_query: bool) -> np.ndarray:
    partitions = 2**config.num_simhash_projections
    width = config.projection_dim or dim
    blocks = []
    for rep in range(config.num_repetitions):
        planes, projection = ref_planes(config, dim, rep), ref_projection(config, dim, rep)
        sums = [np.zeros(width) for _ in range(partitions)]
        counts = [0] * partitions
        for token in tokens:
            part = ref_partition(token, planes)
            sums[part] += token.astype(np.float64) @ projection
            counts[part] += 1
        for part in range(partitions):
            mean_it = not is_query and counts[part] > 0
            blocks.append(sums[part] / counts[part] if mean_it else sums[part])
    fde = np.concatenate(blocks)
    if config.final_projection_dim is not None:
        buckets, signs = ref_count_sketch(config, fde.size)
        sketched = np.zeros(config.final_projection_dim)
        for i in range(fde.size):
            sketched[buckets[i]] += signs[i] * fde[i]
        fde = sketched
    if config.normalize and np.linalg.norm(fde) > 0:
        fde = fde / np.linalg.norm(fde)
    return fde


SMALL_PROJECTED = MuveraConfig(
    num_repetitions=5, num_simhash_projections=3, projection_dim=8, final_projection_dim=None, seed=7
)


@pytest.mark.parametrize(
    "config",
    [
        MuveraConfig(),
        SMALL_PROJECTED,
        MuveraConfig(num_repetitions=3, final_projection_dim=None, normalize=True),
    ],
    ids=["defaults", "projected-no-final", "identity-normalized"],
)
@pytest.mark.parametrize("is_query", [True, False], ids=["query", "document"])
def test_matches_the_reference(config: MuveraConfig, is_query: bool):
    tokens = random_bag(seed=3, num_tokens=12)
    got = Muvera(config, TOKEN_DIM).encode(tokens, is_query=is_query)
    expected = reference_fde(tokens, config, TOKEN_DIM, is_query=is_query)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    assert np.count_nonzero(expected) > 0


def test_random_matrices_follow_the_public_draw_order():
    for config in (MuveraConfig(num_repetitions=4), SMALL_PROJECTED):
        muvera = Muvera(config, TOKEN_DIM)
        for rep in range(config.num_repetitions):
            np.testing.assert_array_equal(muvera.simhash[rep], ref_planes(config, TOKEN_DIM, rep))
            if config.projection_dim is not None:
                assert muvera.projections is not None
                np.testing.assert_array_equal(muvera.projections[rep], ref_projection(config, TOKEN_DIM, rep))
    sketched = Muvera(MuveraConfig(num_repetitions=2), TOKEN_DIM)
    buckets, signs = ref_count_sketch(sketched.config, sketched.intermediate_dims)
    np.testing.assert_array_equal(sketched.sketch_buckets, buckets)
    np.testing.assert_array_equal(sketched.sketch_signs, signs)


def test_gray_code_rank_inverts_the_standard_gray_code():
    numbers = np.arange(64)
    gray = numbers ^ (numbers >> 1)
    bits = (gray[:, None] >> np.arange(5, -1, -1)[None, :]) & 1  # most significant first
    np.testing.assert_array_equal(gray_code_rank(bits.astype(bool)), numbers)


# --- Behaviour -----------------------------------------------------------------------------------------------


def test_dims():
    assert Muvera(MuveraConfig(), 128).dims == 10240
    assert Muvera(SMALL_PROJECTED, 128).dims == 5 * 2**3 * 8
    identity = Muvera(
        MuveraConfig(num_repetitions=2, num_simhash_projections=4, final_projection_dim=None), 96
    )
    assert identity.dims == 2 * 16 * 96
    out = Muvera(MuveraConfig(), 128).encode(random_bag(0, 5, dim=128), is_query=True)
    assert out.shape == (10240,) and out.dtype == np.float32


def test_query_sums_and_document_averages_with_empty_partitions_zero():
    config = MuveraConfig(num_repetitions=3, num_simhash_projections=2, final_projection_dim=None)
    muvera = Muvera(config, TOKEN_DIM)
    token = random_bag(1, 1)
    twice = np.repeat(token, 2, axis=0)  # both copies land in the same partition in every repetition
    query = muvera.encode(twice, is_query=True).reshape(3, 4, TOKEN_DIM)
    document = muvera.encode(twice, is_query=False).reshape(3, 4, TOKEN_DIM)
    for rep in range(3):
        filled = [p for p in range(4) if np.any(document[rep, p])]
        assert len(filled) == 1  # the other three partitions of a document stay zero
        np.testing.assert_allclose(document[rep, filled[0]], token[0], rtol=1e-6)
        np.testing.assert_allclose(query[rep, filled[0]], 2 * token[0], rtol=1e-6)


def test_an_all_zero_token_counts_in_partition_zero():
    """A zero sketch is not > 0, so its bits are all 0: a zero (padding) token dilutes partition 0's mean."""
    config = MuveraConfig(num_repetitions=8, num_simhash_projections=1, final_projection_dim=None)
    muvera = Muvera(config, TOKEN_DIM)
    token = random_bag(2, 1)[0]
    document = muvera.encode(np.stack([token, np.zeros(TOKEN_DIM)]), is_query=False).reshape(8, 2, TOKEN_DIM)
    sides = [int(token @ muvera.simhash[rep, :, 0] > 0) for rep in range(8)]
    assert 0 < sum(sides) < 8  # both cases occur
    for rep, side in enumerate(sides):
        np.testing.assert_allclose(document[rep, side], token if side == 1 else token / 2, rtol=1e-6)
        np.testing.assert_array_equal(document[rep, 1 - side], np.zeros(TOKEN_DIM))


def test_empty_multivector_is_zero_and_bad_shapes_are_refused():
    muvera = Muvera(MuveraConfig(normalize=True), TOKEN_DIM)
    empty = muvera.encode(np.zeros((0, TOKEN_DIM), dtype=np.float32), is_query=False)
    np.testing.assert_array_equal(empty, np.zeros(10240, dtype=np.float32))
    with pytest.raises(ValueError, match="num_tokens, 16"):
        muvera.encode(np.zeros((3, TOKEN_DIM + 1), dtype=np.float32), is_query=True)


def test_batch_equals_single_encodes():
    muvera = Muvera(SMALL_PROJECTED, TOKEN_DIM)
    bags = [random_bag(seed, n) for seed, n in ((1, 4), (2, 9), (3, 1))]
    batch = muvera.encode_batch(bags, is_query=False)
    assert batch.shape == (3, muvera.dims) and batch.dtype == np.float32
    for row, bag in enumerate(bags):
        np.testing.assert_array_equal(batch[row], muvera.encode(bag, is_query=False))


def test_seed_determines_the_encoding():
    tokens = random_bag(5, 10)
    first = Muvera(MuveraConfig(seed=11), TOKEN_DIM).encode(tokens, is_query=False)
    again = Muvera(MuveraConfig(seed=11), TOKEN_DIM).encode(tokens, is_query=False)
    other = Muvera(MuveraConfig(seed=12), TOKEN_DIM).encode(tokens, is_query=False)
    np.testing.assert_array_equal(first, again)
    assert abs(float(first @ other)) < 0.5 * float(first @ first)


def test_normalize_gives_unit_norm_in_the_same_direction():
    tokens = random_bag(6, 10)
    raw = Muvera(MuveraConfig(), TOKEN_DIM).encode(tokens, is_query=True)
    unit = Muvera(MuveraConfig(normalize=True), TOKEN_DIM).encode(tokens, is_query=True)
    assert np.linalg.norm(raw) > 2.0
    np.testing.assert_allclose(np.linalg.norm(unit), 1.0, rtol=1e-5)
    np.testing.assert_allclose(unit, raw / np.linalg.norm(raw), rtol=1e-5, atol=1e-7)


def chamfer(query: np.ndarray, document: np.ndarray) -> float:
    return float((query @ document.T).max(axis=1).sum())


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    ranks_a, ranks_b = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
    return float(np.corrcoef(ranks_a, ranks_b)[0, 1])


def clustered_corpus(seed: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Tokens near 24 topic centres; a query covers 3 topics, a document 6, so Chamfer spans a wide range."""
    rng = np.random.default_rng(seed)
    dim = 32
    centres = unit_rows(rng.normal(size=(24, dim)))

    def bag(num_tokens: int, num_topics: int) -> np.ndarray:
        topics = rng.choice(24, size=num_topics, replace=False)
        picks = rng.choice(topics, size=num_tokens)
        return unit_rows(centres[picks] + 0.1 * rng.normal(size=(num_tokens, dim)))

    return [bag(8, 3) for _ in range(8)], [bag(40, 6) for _ in range(40)]


def test_fde_inner_product_tracks_chamfer_similarity():
    queries, documents = clustered_corpus(seed=0)
    muvera = Muvera(MuveraConfig(), 32)
    fde = muvera.encode_batch(queries, is_query=True) @ muvera.encode_batch(documents, is_query=False).T
    exact = np.array([[chamfer(q, d) for d in documents] for q in queries])
    assert np.corrcoef(fde.ravel(), exact.ravel())[0, 1] > 0.85
    assert spearman(fde.ravel(), exact.ravel()) > 0.85
    per_query = [spearman(fde[i], exact[i]) for i in range(len(queries))]
    assert np.mean(per_query) > 0.8
    # Control: documents encoded with other random cuts lose the link, so the bar above means something.
    stranger = Muvera(MuveraConfig(seed=43), 32)
    mismatched = (
        muvera.encode_batch(queries, is_query=True) @ stranger.encode_batch(documents, is_query=False).T
    )
    assert spearman(mismatched.ravel(), exact.ravel()) < 0.5


# --- Configuration from a model YAML -------------------------------------------------------------------------


def test_from_options_defaults_and_yaml_shape():
    assert MuveraConfig.from_options(None) == MuveraConfig()
    assert MuveraConfig.from_options({}) == MuveraConfig()
    public_yaml = {
        "num_repetitions": 40,
        "num_simhash_projections": 6,
        "projection_dim": None,
        "final_projection_dim": 10240,
    }
    assert MuveraConfig.from_options(public_yaml) == MuveraConfig()
    custom = MuveraConfig.from_options({"projection_dim": 8, "final_projection_dim": None, "normalize": True})
    assert (custom.projection_dim, custom.final_projection_dim, custom.normalize) == (8, None, True)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("not a mapping", "must be a mapping"),
        ({"num_repetition": 40}, r"unknown key\(s\) \['num_repetition'\]"),
        ({"num_repetitions": 0}, "num_repetitions must be an integer >= 1"),
        ({"num_repetitions": "40"}, "num_repetitions must be an integer"),
        ({"num_repetitions": True}, "num_repetitions must be an integer"),
        ({"num_repetitions": 4.0}, "num_repetitions must be an integer"),
        ({"num_simhash_projections": 17}, r"num_simhash_projections must be an integer in 0\.\.16"),
        ({"num_simhash_projections": -1}, "num_simhash_projections"),
        ({"projection_dim": 0}, "projection_dim must be an integer >= 1"),
        ({"final_projection_dim": "10240"}, "final_projection_dim must be an integer >= 1"),
        ({"seed": -1}, "seed must be an integer >= 0"),
        ({"normalize": "yes"}, "normalize must be true or false"),
    ],
)
def test_from_options_rejects_garbage(raw: object, message: str):
    with pytest.raises(ValueError, match=message):
        MuveraConfig.from_options(raw)  # type: ignore[arg-type]


def test_config_is_frozen_and_token_dim_checked():
    config = MuveraConfig()
    with pytest.raises(AttributeError):
        config.seed = 1  # type: ignore[misc]
    with pytest.raises(ValueError, match="token_dim"):
        Muvera(config, 0)
    with pytest.raises(ValueError, match="at most 16777216"):
        Muvera(MuveraConfig(num_repetitions=100_000), 128)


def test_the_stage_declares_what_it_consumes_and_produces():
    config = {"num_repetitions": 2, "num_simhash_projections": 2, "final_projection_dim": None}
    stage = MuveraStage.of(TOKEN_DIM, {"muvera_config": config})
    assert stage.dims == 2 * 4 * TOKEN_DIM
    asked = frozenset({Capability.DENSE, Capability.SPARSE})
    assert stage.computed(asked) == {Capability.MULTIVECTOR, Capability.SPARSE}
    bags = [random_bag(1, 3), random_bag(2, 5)]
    np.testing.assert_array_equal(stage(bags, True), stage.encoder.encode_batch(bags, is_query=True))
    with pytest.raises(ValueError, match="unknown key"):
        MuveraStage.of(TOKEN_DIM, {"muvera_config": {"repetitions": 2}})
