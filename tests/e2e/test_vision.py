"""CLIP and SigLIP through a real server: image and text items on ``/v1/encode`` (msgpack and JSON),
image data URIs on ``/v1/embeddings``, our SDK and the public ``sie-sdk`` sending images, and every
bad image answered 400 while the server keeps serving. ColPali, ColQwen2.5 and ColSmol pages and queries on
``/v1/encode`` and MaxSim on ``/v1/score``; ColQwen2.5 and ColSmol under their shipped YAMLs, each
LoRA and its base found in the local weight cache; Qwen3-VL-Embedding (texts, images and captioned
images, the request's instruction in its system turn) and Qwen3-VL-Reranker (text and image documents
on ``/v1/score``, its processor from its base processor model in the cache) under theirs.

Values are held to the adapter loaded in-process on the same folders (the adapter is held to
transformers in tests/adapters/test_clip.py), L2-normalised as the engine's default postprocessing.
"""

from __future__ import annotations

import base64
import io
import json
import shutil
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack
import numpy as np
import pytest
from PIL import Image

from sie.adapters.batch import ImageData, MediaPair
from sie.adapters.clip import ClipEncoder, DualEncoder, SiglipEncoder
from sie.adapters.colpali import ColPaliEncoder
from sie.adapters.colqwen2 import ColQwen2Encoder
from sie.adapters.colsmol import ColSmolEncoder
from sie.adapters.contract import Forward, LoadSpec
from sie.adapters.qwen3_vl_embedding import Qwen3VlEmbedder
from sie.adapters.qwen3_vl_reranker import Qwen3VlReranker
from sie.core.options import Capability, ComputePrecision
from sie.core.task import Task
from sie.postprocess.similarity import maxsim
from sie.weights.disk_cache import folder_name
from tests import builders
from tests.e2e.conftest import (
    CLIP,
    COLPALI,
    MINILM,
    MSGPACK_HEADERS,
    QWEN3_VL_EMBEDDING,
    QWEN3_VL_RERANKER,
    SIGLIP,
    Server,
    run_server,
    shipped_models,
    tiny_bert_dir,
)

DENSE = Forward(frozenset({Capability.DENSE}))
TEXT = "a photo of a red car"
JSON_HEADERS = {"accept": "application/json"}


def picture(kind: str, seed: int, size: tuple[int, int] = (48, 40)) -> bytes:
    pixels = np.random.default_rng(seed).integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels, "RGB").save(out, format=kind)
    return out.getvalue()


PNG = picture("PNG", 0)
JPEG = picture("JPEG", 1)


@pytest.fixture(scope="module")
def adapters(family_folders: dict[str, Path]) -> dict[str, DualEncoder]:
    def spec(name: str, length: int) -> LoadSpec:
        return LoadSpec(family_folders[name], "cpu", ComputePrecision.FLOAT32, length)

    return {CLIP: ClipEncoder.load(spec("clip", 77)), SIGLIP: SiglipEncoder.load(spec("siglip", 64))}


def expected(adapter: DualEncoder, inputs: list[str | ImageData]) -> np.ndarray:
    dense = adapter.run(adapter.prepare(inputs, DENSE), DENSE).dense
    assert dense is not None
    return dense / np.linalg.norm(dense, axis=1, keepdims=True)


def encode_msgpack(server: Server, model: str, items: list[dict[str, Any]], unpack: Any) -> np.ndarray:
    response = server.client.post(
        f"/v1/encode/{model}", content=msgpack.packb({"items": items}), headers=MSGPACK_HEADERS
    )
    assert response.status_code == 200, response.text
    return np.stack([item["dense"]["values"] for item in unpack(response.content)["items"]])


MIXED = [
    {"images": [{"data": PNG, "format": "png"}]},
    {"text": TEXT},
    {"images": [{"data": JPEG, "format": "jpeg"}]},
]
MIXED_INPUTS: list[str | ImageData] = [ImageData(PNG), TEXT, ImageData(JPEG)]


@pytest.mark.parametrize("model", [CLIP, SIGLIP])
def test_images_and_texts_over_msgpack_equal_the_adapter(
    families: Server, adapters: dict[str, DualEncoder], unpack: Any, model: str
) -> None:
    got = encode_msgpack(families, model, MIXED, unpack)
    np.testing.assert_allclose(got, expected(adapters[model], MIXED_INPUTS), atol=1e-5)
    alone = encode_msgpack(families, model, MIXED[:1], unpack)
    np.testing.assert_allclose(alone[0], got[0], atol=1e-5)


@pytest.mark.parametrize("model", [CLIP, SIGLIP])
def test_images_over_json_are_base64(families: Server, adapters: dict[str, DualEncoder], model: str) -> None:
    items = [
        {"images": [{"data": base64.b64encode(PNG).decode(), "format": "png"}]},
        {"text": TEXT},
        {"images": [{"data": base64.b64encode(JPEG).decode()}]},
    ]
    response = families.client.post(f"/v1/encode/{model}", json={"items": items}, headers=JSON_HEADERS)
    assert response.status_code == 200, response.text
    got = np.array([item["dense"]["values"] for item in response.json()["items"]], dtype=np.float32)
    np.testing.assert_allclose(got, expected(adapters[model], MIXED_INPUTS), atol=1e-5)


def error_of(response: Any) -> tuple[int, str, str]:
    detail = response.json()["detail"]
    return response.status_code, detail["code"], detail["message"]


def test_an_image_to_a_text_only_model_is_refused(families: Server) -> None:
    body = {"items": [{"images": [{"data": base64.b64encode(PNG).decode(), "format": "png"}]}]}
    status, code, message = error_of(
        families.client.post(f"/v1/encode/{MINILM}", json=body, headers=JSON_HEADERS)
    )
    assert (status, code) == (400, "INVALID_INPUT")
    assert "does not support image input" in message
    families.assert_serving()


@pytest.mark.parametrize("model", [CLIP, SIGLIP])
@pytest.mark.parametrize(
    "data", [b"definitely not an image", PNG[:80], b""], ids=["garbage", "truncated", "empty"]
)
def test_bad_image_bytes_are_400_and_the_server_keeps_serving(
    families: Server, unpack: Any, model: str, data: bytes
) -> None:
    items = [{"text": TEXT}, {"images": [{"data": data, "format": "png"}]}]
    response = families.client.post(
        f"/v1/encode/{model}", content=msgpack.packb({"items": items}), headers=MSGPACK_HEADERS
    )
    assert response.status_code == 400, response.text
    detail = response.json()["detail"]  # errors are JSON, as on the public server
    assert detail["code"] == "INVALID_INPUT" and "mage" in detail["message"], detail
    assert encode_msgpack(families, model, MIXED, unpack).shape[0] == 3
    families.assert_serving()


def data_uri(data: bytes, mime: str = "image/png") -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"


@pytest.mark.parametrize("model", [CLIP, SIGLIP])
def test_openai_embeddings_take_image_data_uris(
    families: Server, adapters: dict[str, DualEncoder], model: str
) -> None:
    body = {"model": model, "modality": "image", "input": [data_uri(PNG), data_uri(JPEG, "image/jpg")]}
    response = families.client.post("/v1/embeddings", json=body)
    assert response.status_code == 200, response.text
    answer = response.json()
    got = np.array([row["embedding"] for row in answer["data"]], dtype=np.float32)
    np.testing.assert_allclose(got, expected(adapters[model], [ImageData(PNG), ImageData(JPEG)]), atol=1e-5)
    assert answer["usage"]["prompt_tokens"] == 0  # images read no text (native: usage.images)
    one = families.client.post("/v1/embeddings", json={**body, "input": data_uri(PNG)}).json()
    np.testing.assert_allclose(one["data"][0]["embedding"], got[0], atol=1e-6)
    text = families.client.post("/v1/embeddings", json={"model": model, "input": TEXT}).json()
    np.testing.assert_allclose(text["data"][0]["embedding"], expected(adapters[model], [TEXT])[0], atol=1e-5)


@pytest.mark.parametrize(
    ("model", "entry", "fragment"),
    [
        (CLIP, "https://example.com/cat.png", "does not fetch URLs"),
        (CLIP, "http://169.254.169.254/latest/meta-data", "does not fetch URLs"),
        (CLIP, "data:image/png;base64,@@@@", "invalid base64"),
        (CLIP, "data:text/plain;base64,aGk=", "must be a base64 data URI"),
        (CLIP, "data:image/png,rawbytes", "must be a base64 data URI"),
        (CLIP, data_uri(b"not an image"), "not an image"),
        (MINILM, data_uri(PNG), "does not support image input"),
    ],
    ids=["url", "metadata-url", "bad-base64", "not-image-mime", "not-base64", "garbage", "text-model"],
)
def test_openai_bad_image_inputs_are_openai_shaped_400s(
    families: Server, model: str, entry: str, fragment: str
) -> None:
    response = families.client.post(
        "/v1/embeddings", json={"model": model, "modality": "image", "input": [entry]}
    )
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert fragment in error["message"] and error["type"] == "invalid_request_error"
    families.assert_serving()


def test_our_sdk_sends_images_as_bytes_paths_pil_and_arrays(
    families: Server, adapters: dict[str, DualEncoder], tmp_path: Path
) -> None:
    from sie.sdk import SIEClient

    path = tmp_path / "picture.png"
    path.write_bytes(PNG)
    pil = Image.open(io.BytesIO(PNG))
    array = np.asarray(pil)
    with SIEClient(families.url, timeout_s=120) as client:
        results = client.encode(
            CLIP, [{"images": [PNG]}, {"images": [path]}, {"images": [pil]}, {"images": [array]}]
        )
    got = np.stack([r["dense"] for r in results])
    # Bytes travel as they are; a path, a PIL image and an array are re-encoded as JPEG (quality 95).
    jpeg = io.BytesIO()
    pil.convert("RGB").save(jpeg, format="JPEG", quality=95)
    want = expected(adapters[CLIP], [ImageData(PNG), *[ImageData(jpeg.getvalue())] * 3])
    np.testing.assert_allclose(got, want, atol=1e-5)


PUBLIC_SCRIPT = textwrap.dedent(
    """
    import io, json, sys
    import numpy as np
    from PIL import Image
    from sie_sdk import SIEClient

    url, model, png_path = sys.argv[1], sys.argv[2], sys.argv[3]
    png = open(png_path, "rb").read()
    items = [{"images": [png]}, {"text": "a photo of a red car"}, {"images": [Image.open(io.BytesIO(png))]}]
    with SIEClient(url, timeout_s=120) as client:
        results = client.encode(model, items)
    print(json.dumps([np.asarray(r["dense"], dtype=np.float64).tolist() for r in results]))
    """
)


@pytest.mark.parametrize("model", [CLIP, SIGLIP])
def test_the_public_sdk_encodes_images_to_the_same_vectors(
    families: Server, run_public_sdk: Any, tmp_path: Path, model: str
) -> None:
    from sie.sdk import SIEClient

    path = tmp_path / "picture.png"
    path.write_bytes(PNG)
    public = np.array(run_public_sdk(PUBLIC_SCRIPT, families.url, model, str(path)), dtype=np.float32)
    items = [{"images": [PNG]}, {"text": TEXT}, {"images": [Image.open(io.BytesIO(PNG))]}]
    with SIEClient(families.url, timeout_s=120) as client:
        ours = np.stack([r["dense"] for r in client.encode(model, items)])
    np.testing.assert_allclose(public, ours, atol=1e-6)
    assert json.dumps(public.shape) == json.dumps(ours.shape)


def test_colpali_encodes_pages_and_queries_and_scores_pages_by_maxsim(
    families: Server, unpack: Any, family_folders: dict[str, Path]
) -> None:
    """Page images and a text query through ``/v1/encode`` (one vector per position, as the
    adapter gives them), then ``/v1/score`` with image items ranks the pages by MaxSim."""
    body = {
        "items": [{"images": [{"data": PNG, "format": "png"}]}, {"text": TEXT}],
        "params": {"output_types": ["multivector"]},
    }
    response = families.client.post(
        f"/v1/encode/{COLPALI}", content=msgpack.packb(body), headers=MSGPACK_HEADERS
    )
    assert response.status_code == 200, response.text
    got = [item["multivector"]["values"] for item in unpack(response.content)["items"]]
    encoder = ColPaliEncoder.load(LoadSpec(family_folders["colpali"], "cpu", ComputePrecision.FLOAT32, 512))
    multi = Forward(frozenset({Capability.MULTIVECTOR}))
    want = encoder.run(encoder.prepare([ImageData(PNG), TEXT], multi), multi).multivector or []
    for ours, theirs in zip(got, want, strict=True):
        np.testing.assert_allclose(ours, theirs, atol=1e-5)
    query = (
        encoder.run(
            encoder.prepare([TEXT], Forward(frozenset({Capability.MULTIVECTOR}), is_query=True)), multi
        ).multivector
        or []
    )
    scored = families.client.post(
        f"/v1/score/{COLPALI}",
        content=msgpack.packb(
            {
                "query": {"text": TEXT},
                "items": [
                    {"images": [{"data": p, "format": "png"}], "id": f"p{i}"}
                    for i, p in enumerate((PNG, JPEG))
                ],
                "options": {"score_mode": "maxsim"},
            }
        ),
        headers=MSGPACK_HEADERS,
    )
    assert scored.status_code == 200, scored.text
    scores = {s["item_id"]: s["score"] for s in unpack(scored.content)["scores"]}
    pages = encoder.run(encoder.prepare([ImageData(PNG), ImageData(JPEG)], multi), multi).multivector or []
    np.testing.assert_allclose([scores["p0"], scores["p1"]], maxsim(query[0], pages), atol=1e-5)


COLQWEN = "vidore/colqwen2.5-v0.2"
COLSMOL = "vidore/colSmol-256M"
MULTI = Forward(frozenset({Capability.MULTIVECTOR}))
# Each LoRA retriever: its builder, its base's Hub id and its adapter class.
RETRIEVERS: dict[str, tuple[Any, str, type[ColQwen2Encoder | ColSmolEncoder]]] = {
    COLQWEN: (builders.colqwen2_5, builders.COLQWEN_BASE, ColQwen2Encoder),
    COLSMOL: (builders.colsmol, builders.COLSMOL_BASE, ColSmolEncoder),
}


@pytest.fixture(scope="module")
def retriever_folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path]]:
    return {
        model: build(tiny_bert_dir(), tmp_path_factory.mktemp(model.split("/")[1]))
        for model, (build, _, _) in RETRIEVERS.items()
    }


# The reranker's base processor model and the revision its shipped YAML pins.
QWEN3_VL_PROCESSOR = ("Qwen/Qwen3-VL-2B-Instruct", "89644892e4d85e24eaac8bacfd4f463576704203")


@pytest.fixture(scope="module")
def qwen3_vl_folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("qwen3-vl")
    return {
        QWEN3_VL_EMBEDDING: builders.qwen3_vl(tiny_bert_dir(), root / "embedding"),
        QWEN3_VL_RERANKER: builders.qwen3_vl(tiny_bert_dir(), root / "reranker", processor=False),
        QWEN3_VL_PROCESSOR[0]: builders.qwen3_vl(tiny_bert_dir(), root / "processor"),
    }


def _float32_snapshot(models: Path, cache: Path, model: str, folder: Path) -> None:
    """``folder`` in the cache at the revision ``model``'s shipped YAML pins; the YAML at float32."""
    yaml = models / f"{model.replace('/', '__')}.yaml"
    text = yaml.read_text()
    revision = next(line.split(": ")[1] for line in text.splitlines() if line.startswith("hf_revision"))
    shutil.copytree(folder, cache / folder_name(model) / "snapshots" / revision)
    yaml.write_text(text.replace("compute_precision: bfloat16", "compute_precision: float32"))


@pytest.fixture(scope="module")
def retrievers_server(
    tmp_path_factory: pytest.TempPathFactory,
    retriever_folders: dict[str, tuple[Path, Path]],
    qwen3_vl_folders: dict[str, Path],
) -> Iterator[Server]:
    """The shipped catalogue, nothing but a local weight cache holding each LoRA at its YAML's pinned
    revision and its base (any snapshot), the Qwen3-VL models at theirs and the reranker's base
    processor model at the revision its YAML names, as a download would have left them; float32."""
    cache = tmp_path_factory.mktemp("retrievers-cache")
    models = shipped_models(tmp_path_factory.mktemp("retrievers-models"), {})
    for model, (_, base_id, _) in RETRIEVERS.items():
        lora, base = retriever_folders[model]
        _float32_snapshot(models, cache, model, lora)
        shutil.copytree(base, cache / folder_name(base_id) / "snapshots" / ("0" * 40))
    for model in (QWEN3_VL_EMBEDDING, QWEN3_VL_RERANKER):
        _float32_snapshot(models, cache, model, qwen3_vl_folders[model])
    processor_id, processor_revision = QWEN3_VL_PROCESSOR
    processor_snapshot = cache / folder_name(processor_id) / "snapshots" / processor_revision
    shutil.copytree(qwen3_vl_folders[processor_id], processor_snapshot)
    env = {"SIE_MODELS_DIR": str(models), "SIE_LOCAL_CACHE": str(cache), "SIE_HF_FALLBACK": "false"}
    preload = ",".join([MINILM, COLQWEN, f"{COLQWEN}:muvera", COLSMOL, QWEN3_VL_EMBEDDING, QWEN3_VL_RERANKER])
    with run_server(
        tmp_path_factory.mktemp("retrievers-server"),
        env,
        "--preload",
        preload,
    ) as server:
        yield server


@pytest.mark.parametrize("model", [COLQWEN, COLSMOL])
def test_lora_retrievers_encode_pages_and_queries_and_score_pages_by_maxsim(
    retrievers_server: Server, retriever_folders: dict[str, tuple[Path, Path]], unpack: Any, model: str
) -> None:
    lora, base = retriever_folders[model]
    adapter_class = RETRIEVERS[model][2]
    encoder = adapter_class.load(
        LoadSpec(lora, "cpu", ComputePrecision.FLOAT32, 2048, fetch=lambda hf_id, revision, path: base)
    )
    body = {
        "items": [{"images": [{"data": PNG, "format": "png"}]}, {"text": TEXT}],
        "params": {"output_types": ["multivector"]},
    }
    response = retrievers_server.client.post(
        f"/v1/encode/{model}", content=msgpack.packb(body), headers=MSGPACK_HEADERS
    )
    assert response.status_code == 200, response.text
    got = [item["multivector"]["values"] for item in unpack(response.content)["items"]]
    want = encoder.run(encoder.prepare([ImageData(PNG), TEXT], MULTI), MULTI).multivector or []
    assert [g.shape for g in got] == [w.shape for w in want] and want[0].shape[1] == 128
    for ours, theirs in zip(got, want, strict=True):
        np.testing.assert_allclose(ours, theirs, atol=1e-5)
    scored = retrievers_server.client.post(
        f"/v1/score/{model}",
        content=msgpack.packb(
            {
                "query": {"text": TEXT},
                "items": [
                    {"images": [{"data": p, "format": f}], "id": f"p{i}"}
                    for i, (p, f) in enumerate(((PNG, "png"), (JPEG, "jpeg")))
                ],
                "options": {"score_mode": "maxsim"},
            }
        ),
        headers=MSGPACK_HEADERS,
    )
    assert scored.status_code == 200, scored.text
    scores = {s["item_id"]: s["score"] for s in unpack(scored.content)["scores"]}
    pages = encoder.run(encoder.prepare([ImageData(PNG), ImageData(JPEG)], MULTI), MULTI).multivector or []
    np.testing.assert_allclose([scores["p0"], scores["p1"]], maxsim(want[1], pages), atol=1e-5)


def test_colqwen_muvera_profile_is_one_dense_vector_per_page(retrievers_server: Server, unpack: Any) -> None:
    body = {"items": [{"images": [{"data": PNG, "format": "png"}]}, {"text": TEXT}]}
    response = retrievers_server.client.post(
        f"/v1/encode/{COLQWEN}:muvera", content=msgpack.packb(body), headers=MSGPACK_HEADERS
    )
    assert response.status_code == 200, response.text
    dense = [item["dense"]["values"] for item in unpack(response.content)["items"]]
    assert [d.shape for d in dense] == [(10240,), (10240,)]
    assert np.isfinite(np.stack(dense)).all() and not np.allclose(dense[0], dense[1])


NARROW = picture("PNG", 5, size=(3000, 10))  # over the 200:1 aspect Qwen2-VL's resize reads
MULTIVECTOR = {"params": {"output_types": ["multivector"]}}


@pytest.mark.parametrize(
    ("model", "body", "message"),
    [
        (
            COLQWEN,
            {"items": [{"images": [{"data": b"not an image", "format": "png"}]}], **MULTIVECTOR},
            "mage",
        ),
        (
            COLSMOL,
            {"items": [{"images": [{"data": b"not an image", "format": "png"}]}], **MULTIVECTOR},
            "mage",
        ),
        (
            COLQWEN,
            {"items": [{"text": TEXT}, {"images": [{"data": NARROW, "format": "png"}]}], **MULTIVECTOR},
            "200 times",
        ),
        (COLSMOL, {"items": [{"text": TEXT}]}, "dense"),  # the default output: these give multivectors
    ],
    ids=["colqwen-bad-bytes", "colsmol-bad-bytes", "colqwen-narrow-page", "colsmol-dense"],
)
def test_bad_input_to_the_lora_retrievers_is_a_400_and_they_keep_serving(
    retrievers_server: Server, unpack: Any, model: str, body: dict[str, Any], message: str
) -> None:
    response = retrievers_server.client.post(
        f"/v1/encode/{model}", content=msgpack.packb(body), headers=MSGPACK_HEADERS
    )
    assert response.status_code == 400, response.text
    assert message in response.json()["detail"]["message"], response.text
    fine = {"items": [{"text": TEXT}], **MULTIVECTOR}
    again = retrievers_server.client.post(
        f"/v1/encode/{model}", content=msgpack.packb(fine), headers=MSGPACK_HEADERS
    )
    assert again.status_code == 200, again.text
    retrievers_server.assert_serving()


def unit(vectors: np.ndarray) -> np.ndarray:
    return vectors / np.linalg.norm(vectors, axis=-1, keepdims=True)


def test_qwen3_vl_embedding_embeds_texts_images_and_captioned_images_with_the_instruction(
    retrievers_server: Server, qwen3_vl_folders: dict[str, Path], unpack: Any
) -> None:
    """Under its shipped YAML: a text, an image and an image with its caption in one request, the
    request's instruction in the system turn, unit vectors (the YAML's ``normalize: true``)."""
    embedder = Qwen3VlEmbedder.load(
        LoadSpec(qwen3_vl_folders[QWEN3_VL_EMBEDDING], "cpu", ComputePrecision.FLOAT32, 32768)
    )
    items = [{"text": TEXT}, {"images": [{"data": PNG, "format": "png"}]}]
    items.append({"text": "a caption", "images": [{"data": JPEG, "format": "jpeg"}]})
    inputs: list[Any] = [TEXT, ImageData(PNG), ImageData(JPEG, None, "a caption")]
    for instruction, shaped in (
        (None, "Represent the user's input."),
        ("Find the product", "Find the product"),
    ):
        params = {"instruction": instruction} if instruction else {}
        response = retrievers_server.client.post(
            f"/v1/encode/{QWEN3_VL_EMBEDDING}",
            content=msgpack.packb({"items": items, "params": params}),
            headers=MSGPACK_HEADERS,
        )
        assert response.status_code == 200, response.text
        got = np.stack([item["dense"]["values"] for item in unpack(response.content)["items"]])
        forward = Forward(frozenset({Capability.DENSE}), task=Task(instruction=shaped))
        want = embedder.run(embedder.prepare(inputs, forward), forward).dense
        assert want is not None and got.shape == (3, 64)
        np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
        np.testing.assert_allclose(got, unit(want), atol=1e-5)


def test_qwen3_vl_reranker_scores_text_and_image_documents(
    retrievers_server: Server, qwen3_vl_folders: dict[str, Path], unpack: Any
) -> None:
    """Under its shipped YAML, its processor read from its base processor model in the cache: a text
    query against a text, an image and a captioned image, ranked as the adapter scores them."""
    spec = LoadSpec(
        qwen3_vl_folders[QWEN3_VL_RERANKER],
        "cpu",
        ComputePrecision.FLOAT32,
        32768,
        loadtime={"base_processor_model": QWEN3_VL_PROCESSOR[0]},
        fetch=lambda hf_id, revision, path: qwen3_vl_folders[hf_id],
    )
    reranker = Qwen3VlReranker.load(spec)
    body = {
        "query": {"text": TEXT},
        "items": [
            {"id": "text", "text": "a blue bicycle"},
            {"id": "image", "images": [{"data": PNG, "format": "png"}]},
            {"id": "captioned", "text": "a caption", "images": [{"data": JPEG, "format": "jpeg"}]},
        ],
    }
    response = retrievers_server.client.post(
        f"/v1/score/{QWEN3_VL_RERANKER}", content=msgpack.packb(body), headers=MSGPACK_HEADERS
    )
    assert response.status_code == 200, response.text
    scores = unpack(response.content)["scores"]
    pairs = [
        MediaPair(TEXT, "a blue bicycle"),
        MediaPair(TEXT, ImageData(PNG)),
        MediaPair(TEXT, ImageData(JPEG, None, "a caption")),
    ]
    score = Forward(frozenset({Capability.SCORE}))
    want = reranker.run(reranker.prepare(pairs, score), score).scores
    assert want is not None
    by_id = {entry["item_id"]: entry["score"] for entry in scores}
    np.testing.assert_allclose([by_id["text"], by_id["image"], by_id["captioned"]], want, atol=1e-5)
    assert [entry["score"] for entry in scores] == sorted(by_id.values(), reverse=True)
    blank = {"query": {"text": TEXT}, "items": [{"text": "   "}]}
    refused = retrievers_server.client.post(
        f"/v1/score/{QWEN3_VL_RERANKER}", content=msgpack.packb(blank), headers=MSGPACK_HEADERS
    )
    assert refused.status_code == 400 and "text or an image" in refused.text, refused.text
    retrievers_server.assert_serving()
