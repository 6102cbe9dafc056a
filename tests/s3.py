"""A real S3 API for the tests: moto's standalone server on a free loopback port.

The process under test finds it the standard way, through ``AWS_ENDPOINT_URL`` (botocore, and so
s3fs, read it), with dummy credentials moto accepts. ``upload_folder`` lays a model folder out as the
Hugging Face hub cache does, which is what a cluster cache holds.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import httpx
from moto.server import ThreadedMotoServer

REGION = "us-east-1"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class S3:
    server: ThreadedMotoServer
    endpoint: str

    def env(self) -> dict[str, str]:
        """What a client process needs to reach this server."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": REGION,
        }

    def client(self) -> Any:
        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            region_name=REGION,
        )

    def upload_folder(self, folder: Path, bucket: str, prefix: str) -> int:
        """Every file under ``folder`` to ``s3://bucket/prefix/<relative path>``; the file count."""
        client = self.client()
        files = [f for f in sorted(folder.rglob("*")) if f.is_file()]
        for f in files:
            client.upload_file(str(f), bucket, f"{prefix}/{f.relative_to(folder).as_posix()}")
        return len(files)

    def put(self, bucket: str, key: str, body: bytes) -> None:
        self.client().put_object(Bucket=bucket, Key=key, Body=body)


def hub_prefix(root: str, hf_id: str, revision: str) -> str:
    """The hub-cache key prefix of one snapshot: ``root/models--org--name/snapshots/<revision>``."""
    return f"{root}/models--{hf_id.replace('/', '--')}/snapshots/{revision}"


@contextlib.contextmanager
def moto_s3(*buckets: str) -> Iterator[S3]:
    """A moto S3 server with ``buckets`` created (and nothing else); stopped on exit."""
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    s3 = S3(server, f"http://127.0.0.1:{port}")
    # moto keeps its buckets in process-wide state that outlives a server: start from none.
    httpx.post(f"{s3.endpoint}/moto-api/reset").raise_for_status()
    try:
        for bucket in buckets:
            s3.client().create_bucket(Bucket=bucket)
        yield s3
    finally:
        with contextlib.suppress(Exception):
            server.stop()
