"""What each process of the cluster may do on NATS: the subjects each role publishes to and reads
from, one table for every place that runs NATS (``sie-gateway local``, ``scripts/cluster``, the
tests, and the Helm chart, whose rendered permissions a test holds equal to this table).

- a **gateway** publishes work items (``sie.work.>``) and dead letters, manages its streams, the
  pools bucket and consumers (``$JS.API``), and reads its result inboxes, heartbeats, config deltas
  and the max-deliveries advisories;
- a **worker** pulls and acks work (``$JS.API``, ``$JS.ACK``), answers into inboxes and publishes its
  own heartbeat; it reads its bundle's config deltas;
- **sie-config** publishes config deltas and nothing else.

So a pod without credentials cannot connect, a gateway's credentials cannot forge a heartbeat or a
config delta, and a worker's cannot publish work or config. The roles share one account (its
JetStream), so ``$JS.API`` is not split further: a gateway or worker can still manage streams.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from sie.queue.contract import (
    CONFIG_ALL_SUBJECT,
    DEAD_LETTER_PREFIX,
    HEALTH_SUBJECT_PREFIX,
    MAX_DELIVERIES_ADVISORY_PREFIX,
    WORK_SUBJECT_PREFIX,
)

ACCOUNT: Final = "SIE"
INBOXES: Final = "_INBOX.>"
JETSTREAM_API: Final = "$JS.API.>"
MAX_DELIVERIES_ADVISORY: Final = f"{MAX_DELIVERIES_ADVISORY_PREFIX}.>"
POOLS_BUCKET: Final = "$KV.sie_pools.>"
CONFIG_DELTAS: Final = "sie.config.models.>"


@dataclass(frozen=True)
class Role:
    publish: tuple[str, ...]
    subscribe: tuple[str, ...]


ROLES: Final[Mapping[str, Role]] = {
    "gateway": Role(
        publish=(f"{WORK_SUBJECT_PREFIX}.>", f"{DEAD_LETTER_PREFIX}.>", JETSTREAM_API, POOLS_BUCKET),
        subscribe=(INBOXES, f"{HEALTH_SUBJECT_PREFIX}.>", CONFIG_ALL_SUBJECT, MAX_DELIVERIES_ADVISORY),
    ),
    "worker": Role(
        publish=(INBOXES, f"{HEALTH_SUBJECT_PREFIX}.>", JETSTREAM_API, "$JS.ACK.>"),
        subscribe=(INBOXES, CONFIG_DELTAS),
    ),
    "config": Role(publish=(CONFIG_DELTAS,), subscribe=(INBOXES,)),
}


@dataclass(frozen=True)
class Routes:
    """One node's place in a NATS cluster (JetStream replicates over these routes): its unique name,
    the address it takes the other nodes' routes on, every node's route address (its own among them
    is fine), and the credentials a node must show to join, so that a pod that reaches the cluster
    port cannot join as a node and read every subject."""

    server_name: str
    listen: str  # host:port
    peers: tuple[str, ...]  # host:port of each node's cluster port
    user: str
    password: str
    name: str = "sie"

    def block(self) -> dict[str, object]:
        return {
            "name": self.name,
            "listen": self.listen,
            "authorization": {"user": self.user, "password": self.password},
            "routes": [f"nats-route://{self.user}:{self.password}@{peer}" for peer in self.peers],
        }


def server_config(
    host: str,
    port: int,
    store_dir: Path,
    passwords: Mapping[str, str],
    users: Mapping[str, str] | None = None,
    routes: Routes | None = None,
) -> str:
    """A ``nats-server`` configuration: JetStream on ``store_dir``, one account whose users are the
    roles (``users``: role → user name, ``sie-{role}`` by default) with their permissions, and no
    anonymous access; with ``routes``, one node of a cluster. NATS reads its configuration as a JSON
    superset, so JSON it is."""
    names = users or {role: f"sie-{role}" for role in ROLES}
    config: dict[str, object] = {
        "host": host,
        "port": port,
        "jetstream": {"store_dir": str(store_dir)},
        "accounts": {
            ACCOUNT: {
                "jetstream": "enabled",
                "users": [
                    {
                        "user": names[role],
                        "password": passwords[role],
                        "permissions": {
                            "publish": {"allow": list(permissions.publish)},
                            "subscribe": {"allow": list(permissions.subscribe)},
                        },
                    }
                    for role, permissions in ROLES.items()
                ],
            }
        },
    }
    if routes is not None:
        config["server_name"] = routes.server_name
        config["cluster"] = routes.block()
    return json.dumps(config, indent=2)
