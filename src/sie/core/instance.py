"""This process's identity as the public server reports it: one random id per process, sent as the
``X-SIE-Runtime-Instance`` header on every answer and as ``runtime_instance_id`` on every profile of
``/v1/models``, so a client can tell a restarted server (or another replica) from the one it spoke to."""

from __future__ import annotations

import secrets
from typing import Final

RUNTIME_INSTANCE: Final = secrets.token_hex(32)
