"""One item of an extract batch fails alone, end to end: a real ``sie-server`` and a real cluster
(``sie-gateway``, ``nats-server``, two queue workers; the session's ``families`` and ``queue_cluster``)
serve a tiny GLiNER built from a config; a text past its 128 windows is that item's ``INPUT_TOO_LONG``
(``items[i].error``, the public server's per-item error), billed 0 tokens, while the items beside it
get what they get alone. Read over JSON and msgpack, by our SDK and by the public ``sie-sdk`` 0.10.1.
"""

from __future__ import annotations

import json
import textwrap
from typing import Any

import httpx
import msgpack
import pytest

from sie.sdk import SIEClient
from tests.e2e.cluster import Gateway
from tests.e2e.conftest import GLINER, MSGPACK_HEADERS, Server

LABELS = ["person", "location", "organization"]
GOOD = [
    "Alice lives in Paris.",
    "Bob has worked at Google in Mountain View, California, since 2019, and before that at a bakery.",
]
# Windows of 384 words advance by 320: this many words need 130 windows, past GLiNER's 128.
TOO_MANY_WORDS = 129 * 320 + 64
TOO_LONG = " ".join(["word"] * TOO_MANY_WORDS)
ERROR = {
    "code": "INPUT_TOO_LONG",
    "message": f"GLiNER reads at most 128 windows of 384 words; this text has {TOO_MANY_WORDS} words: "
    "split it into shorter items",
}
KEYS = ["id", "entities", "relations", "classifications", "objects", "data"]  # the public order
FAILED = {"id": "item-1", "entities": [], "relations": [], "classifications": [], "objects": [], "data": {}}


def extract(url: str, texts: list[str], *, as_json: bool) -> httpx.Response:
    body = {"items": [{"text": text} for text in texts], "params": {"labels": LABELS}}
    if as_json:
        response = httpx.post(
            f"{url}/v1/extract/{GLINER}", json=body, headers={"accept": "application/json"}, timeout=120
        )
    else:
        response = httpx.post(
            f"{url}/v1/extract/{GLINER}", content=msgpack.packb(body), headers=MSGPACK_HEADERS, timeout=120
        )
    assert response.status_code == 200, response.text
    return response


def decoded(response: httpx.Response, as_json: bool) -> dict[str, Any]:
    """The body with its maps in the order they were sent (both decoders keep it)."""
    body: dict[str, Any] = response.json() if as_json else msgpack.unpackb(response.content)
    return body


def assert_answered_alone(url: str, items: list[dict[str, Any]], as_json: bool) -> None:
    """The items beside the failed one equal the good items asked alone (scores within float noise)."""
    alone = decoded(extract(url, GOOD, as_json=as_json), as_json)["items"]
    for got, want in zip([items[0], items[2]], alone, strict=True):
        assert list(got) == KEYS
        assert [{**e, "score": None} for e in got["entities"]] == [
            {**e, "score": None} for e in want["entities"]
        ]
        assert [e["score"] for e in got["entities"]] == pytest.approx(
            [e["score"] for e in want["entities"]], abs=1e-5
        )
    assert any(item["entities"] for item in alone), "no entity found: the comparison would be vacuous"


@pytest.mark.parametrize("as_json", [True, False], ids=["json", "msgpack"])
def test_the_server_answers_the_other_items_and_bills_the_failed_one_nothing(
    families: Server, as_json: bool
) -> None:
    answer = decoded(extract(families.url, [GOOD[0], TOO_LONG, GOOD[1]], as_json=as_json), as_json)
    assert list(answer) == ["model", "items", "usage"]
    items = answer["items"]
    assert [item["id"] for item in items] == ["item-0", "item-1", "item-2"]
    assert items[1] == {**FAILED, "error": ERROR} and list(items[1]) == [*KEYS, "error"]
    assert list(items[1]["error"]) == ["code", "message"]
    assert_answered_alone(families.url, items, as_json)
    alone = decoded(extract(families.url, GOOD, as_json=as_json), as_json)
    assert answer["usage"] == alone["usage"] and alone["usage"]["input_tokens"] > 0
    only_failed = decoded(extract(families.url, [TOO_LONG], as_json=as_json), as_json)
    assert only_failed["items"] == [{**FAILED, "id": "item-0", "error": ERROR}]
    assert only_failed["usage"]["input_tokens"] == 0


@pytest.mark.parametrize("as_json", [True, False], ids=["json", "msgpack"])
def test_the_gateway_carries_the_items_error_and_counts_it_0(
    gateway: Gateway, families: Server, as_json: bool
) -> None:
    """The worker's result for the failed item is an answer (its ``ExtractResult`` with ``error``,
    ``units.input_tokens`` 0), not a failure: the gateway splices it in place and lists no ``errors``."""
    texts = [GOOD[0], TOO_LONG, GOOD[1]]
    ours = decoded(extract(gateway.url, texts, as_json=as_json), as_json)
    theirs = decoded(extract(families.url, texts, as_json=as_json), as_json)
    assert list(ours) == ["model", "items", "usage"]
    assert ours["items"][1] == {**FAILED, "error": ERROR} and list(ours["items"][1]) == [*KEYS, "error"]
    assert_answered_alone(families.url, ours["items"], as_json)
    assert ours["usage"] == theirs["usage"]
    only_failed = decoded(extract(gateway.url, [TOO_LONG], as_json=as_json), as_json)
    assert only_failed["items"] == [{**FAILED, "id": "item-0", "error": ERROR}]
    assert only_failed["usage"] == {"input_tokens": 0}


PUBLIC_SCRIPT = textwrap.dedent(
    """
    import json, sys
    from sie_sdk import SIEClient

    url, model, labels, good, words = sys.argv[1:6]
    good = json.loads(good)
    items = [{"text": good[0]}, {"text": " ".join(["word"] * int(words))}, {"text": good[1]}]
    with SIEClient(url, timeout_s=120) as client:
        results = client.extract(model, items, labels=json.loads(labels))
    print(json.dumps([dict(result) for result in results]))
    """
)


def assert_sdk_results(results: list[dict[str, Any]], families: Server) -> None:
    """What an SDK user reads: the failed item's ``error``, the others' entities as the server sent."""
    wire = decoded(extract(families.url, [GOOD[0], TOO_LONG, GOOD[1]], as_json=True), True)["items"]
    assert [result.get("error") for result in results] == [None, ERROR, None]
    assert results[1]["entities"] == []
    for got, sent in zip([results[0], results[2]], [wire[0], wire[2]], strict=True):
        assert [(e["text"], e["label"], e["start"], e["end"]) for e in got["entities"]] == [
            (e["text"], e["label"], e["start"], e["end"]) for e in sent["entities"]
        ]


@pytest.mark.parametrize("where", ["server", "gateway"])
def test_the_public_sdk_reads_the_failed_items_error(
    families: Server, gateway: Gateway, run_public_sdk: Any, where: str
) -> None:
    url = families.url if where == "server" else gateway.url
    results = run_public_sdk(
        PUBLIC_SCRIPT, url, GLINER, json.dumps(LABELS), json.dumps(GOOD), str(TOO_MANY_WORDS)
    )
    assert_sdk_results(results, families)


@pytest.mark.parametrize("where", ["server", "gateway"])
def test_our_sdk_reads_the_failed_items_error(families: Server, gateway: Gateway, where: str) -> None:
    url = families.url if where == "server" else gateway.url
    with SIEClient(url, timeout_s=120) as client:
        results = client.extract(
            GLINER, [{"text": GOOD[0]}, {"text": TOO_LONG}, {"text": GOOD[1]}], labels=LABELS
        )
    assert_sdk_results([dict(result) for result in results], families)
