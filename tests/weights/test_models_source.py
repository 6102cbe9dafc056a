"""``SIE_MODELS_DIR`` as an ``s3://`` prefix, read through a real S3 API (moto's server)."""

import pytest

from sie.catalog.catalog import Catalog
from sie.catalog.model_config import ModelConfigError
from sie.catalog.source import models_directory
from tests.conftest import MODELS_DIR
from tests.s3 import moto_s3

SHIPPED = ["sentence-transformers__all-MiniLM-L6-v2.yaml", "BAAI__bge-m3.yaml"]


def test_yamls_in_a_bucket_make_the_same_catalog_as_the_folder(monkeypatch):
    with moto_s3("models") as s3:
        for key, value in s3.env().items():
            monkeypatch.setenv(key, value)
        for name in SHIPPED:
            s3.put("models", f"catalog/{name}", (MODELS_DIR / name).read_bytes())
        s3.put("models", "catalog/notes.txt", b"not a model")
        s3.put("models", "catalog/nested/other.yaml", b"sie_id: nested/ignored")
        local = models_directory("s3://models/catalog")
        assert sorted(p.name for p in local.iterdir()) == sorted(SHIPPED)
        remote_names = Catalog.from_directory(local).names()
        with pytest.raises(ModelConfigError, match="s3://models/empty: models directory does not exist"):
            models_directory("s3://models/empty")
    assert remote_names == [
        n
        for n in Catalog.from_directory(MODELS_DIR).names()
        if n.startswith(("BAAI/bge-m3", "sentence-transformers/all-MiniLM-L6-v2"))
    ]


def test_local_folders_are_used_in_place(tmp_path):
    assert models_directory(str(tmp_path)) == tmp_path
