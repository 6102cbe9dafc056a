"""How a write lands, under the service's write lock: plan it against the registry, persist it (epoch,
then model, each a compare-and-swap: ``store``), commit it to the registry, publish the deltas. An add
(POST, append-only) and a replace (PUT, ``control.replace``) go this way; a delete moves the epoch,
removes the model's file and publishes nothing, since a delta can only add (followers re-export when
the epoch moves, and the export is whole).

A store shared with another writer (two pods in a rolling update) can move under this one. Then
nothing was written, and the writer catches up before it plans the same body again (it may now be a
replay, or a conflict) and retries, a few times, before it answers 409:

- the epoch is no longer the one it holds: another writer added something, any model, so every
  stored model whose text differs from what the registry holds is read back in with the epoch, and
  this writer's export stays whole at the epoch it says;
- the model's file is not what its registry was built from: that model is read back in.

The epoch a lost race already took stays taken: an epoch with nothing new costs followers one
export, two models at one epoch would cost one of them. A writer that never writes does not learn
of another's writes until it restarts: one writer per store is the deployment (the chart's).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from sie.catalog.config_errors import ConfigRefused
from sie.control.configs import Plan, dump_yaml
from sie.control.replace import Replacement, plan_replacement
from sie.control.state import ControlState
from sie.control.store import ConfigStore, StoreConflict
from sie.wire.errors import ConfigErrorCode

log = logging.getLogger(__name__)

STORE_ATTEMPTS: Final = 5


class StoreRace(ConfigRefused):
    """The store kept moving under this writer, or holds a config of the model it cannot read."""

    code = ConfigErrorCode.CONTENT_CONFLICT


async def write(state: ControlState, config: dict[str, Any]) -> tuple[Plan, list[str]]:
    """``config`` added: the plan carried out and the answer's warnings."""
    async with state.write_lock:
        plan = state.registry.plan(config)
        stored = None
        if plan.created and state.store is not None:

            def replan() -> str | None:
                nonlocal plan
                plan = state.registry.plan(config)
                return dump_yaml(plan.merged) if plan.created else None

            stored = await _persist(state, state.store, plan.model_id, dump_yaml(plan.merged), replan)
        if not plan.created:
            return plan, []
        text = stored if stored is not None else dump_yaml(plan.merged)
        state.registry.commit(plan.merged, stored=stored)
        state.refresh_gauges()
        return plan, await _publish(state, plan.model_id, plan.created, plan.bundles, text)


async def replace(state: ControlState, config: dict[str, Any]) -> tuple[Replacement, list[str]]:
    """The config of ``config["sie_id"]`` replaced by ``config`` (``control.replace``): what was done
    and the answer's warnings. An unchanged config writes nothing and publishes nothing."""
    async with state.write_lock:
        change = plan_replacement(state.registry, config)
        stored = None
        if change.changed and state.store is not None:

            def replan() -> str | None:
                nonlocal change
                change = plan_replacement(state.registry, config)
                return dump_yaml(change.config) if change.changed else None

            stored = await _persist(state, state.store, change.model_id, dump_yaml(change.config), replan)
        if not change.changed:
            return change, []
        text = stored if stored is not None else dump_yaml(change.config)
        state.registry.commit(change.config, stored=stored)
        state.refresh_gauges()
        profiles = sorted(change.config["profiles"])
        return change, await _publish(state, change.model_id, profiles, change.bundles, text)


@dataclass(frozen=True)
class Deletion:
    deleted: bool  # the store held the model (False: nothing to do, an idempotent repeat)
    fallback: bool  # the models dir's config of it is served again
    bundles: list[str]  # bundles whose configs changed, by name


async def delete(state: ControlState, store: ConfigStore, model_id: str) -> Deletion:
    """The API's config of ``model_id`` removed from the store and the registry, the epoch moved.
    No delta is published (a delta can only add): followers see the epoch move and re-export."""
    writes = state.metrics.store_writes
    async with state.write_lock:
        for attempt in range(1, STORE_ATTEMPTS + 1):
            if await asyncio.to_thread(store.read_model, model_id) is None:
                return Deletion(False, False, [])
            try:
                state.epoch = await asyncio.to_thread(store.advance_epoch, state.epoch)
            except StoreConflict as exc:
                writes.labels("increment_epoch", "conflict").inc()
                log.warning(
                    "the config store %s moved under this writer (%s); reading it again (attempt %d of %d)",
                    store.location,
                    exc,
                    attempt,
                    STORE_ATTEMPTS,
                )
                await _catch_up(state, store, None)
                continue
            writes.labels("increment_epoch", "success").inc()
            await asyncio.to_thread(store.delete_model, model_id)
            writes.labels("delete_model", "success").inc()
            bundles = state.registry.remove(model_id)
            state.refresh_gauges()
            return Deletion(True, state.registry.has_baseline(model_id), bundles)
    raise StoreRace(
        f"The config store kept changing under this delete of '{model_id}' ({STORE_ATTEMPTS} tries): "
        "another sie-config writes the same store. Nothing was deleted; retry it.",
        model_id=model_id,
    )


async def _persist(
    state: ControlState, store: ConfigStore, model_id: str, text: str, replan: Callable[[], str | None]
) -> str | None:
    """``text`` stored as ``model_id``'s file, after the epoch moved; the text stored, or None when a
    lost race left nothing to write (``replan`` says what to write after catching up, None: nothing)."""
    writes = state.metrics.store_writes
    for attempt in range(1, STORE_ATTEMPTS + 1):
        op = "increment_epoch"
        try:
            state.epoch = await asyncio.to_thread(store.advance_epoch, state.epoch)
            writes.labels(op, "success").inc()
            op = "write_model"
            expected = state.registry.stored_text(model_id)
            await asyncio.to_thread(store.write_model, model_id, text, expected=expected)
            writes.labels(op, "success").inc()
            return text
        except StoreConflict as exc:
            writes.labels(op, "conflict").inc()
            log.warning(
                "the config store %s moved under this writer (%s): another sie-config writes it; "
                "reading it again (attempt %d of %d)",
                store.location,
                exc,
                attempt,
                STORE_ATTEMPTS,
            )
        except OSError:
            writes.labels(op, "failure").inc()
            raise
        everything = op == "increment_epoch"
        await _catch_up(state, store, None if everything else model_id)
        again = replan()
        if again is None:
            return None
        text = again
    raise StoreRace(
        f"The config store kept changing under this write of '{model_id}' ({STORE_ATTEMPTS} tries): "
        "another sie-config writes the same store. Nothing of this write was stored; retry it.",
        model_id=model_id,
    )


async def _catch_up(state: ControlState, store: ConfigStore, model_id: str | None) -> None:
    """The store's epoch, and its text of ``model_id`` (None: of every model), into this writer's
    registry where it differs from what the registry holds."""
    state.epoch = await asyncio.to_thread(store.read_epoch)
    if model_id is None:
        texts = await asyncio.to_thread(store.load_all)
    else:
        text = await asyncio.to_thread(store.read_model, model_id)
        if text is None:
            state.registry.forget_stored(model_id)
        texts = {model_id: text} if text is not None else {}
    changed = {i: t for i, t in texts.items() if t != state.registry.stored_text(i)}
    unreadable = state.registry.restore(changed)
    state.refresh_gauges()
    if model_id in unreadable:
        raise StoreRace(
            f"The config store holds a config of '{model_id}' that this service cannot read; "
            "fix or remove it in the store before adding to the model.",
            model_id=model_id,
        )
    for bad in unreadable:
        log.error("stored config of %s does not parse; left out", bad)


async def _publish(
    state: ControlState, model_id: str, profiles: list[str], bundles: list[str], text: str
) -> list[str]:
    """One delta per bundle the write touched (the public wire format); the warnings of failures."""
    if state.publisher is None or not bundles:
        return []
    deltas = [
        {
            "bundle_id": bundle,
            "epoch": state.epoch,
            "bundle_config_hash": state.bundle_hash(bundle),
            "model_id": model_id,
            "profiles_added": profiles,
            "model_config": text,
            "affected_bundles": bundles,
            "pool": "default",
            "bundle_adapters": {b: state.bundle_adapters(b) for b in bundles},
        }
        for bundle in bundles
    ]
    failed = await state.publisher.publish(deltas)
    state.metrics.nats_publishes.labels("failure" if failed else "success").inc()
    if not failed:
        return []
    if len(failed) < len(deltas):
        return [
            "nats_publish_partial: Config persisted but NATS notification failed for bundle(s) "
            f"{failed}. Workers on those bundles will stay on the previous epoch until the gateway's "
            "periodic epoch poll triggers a re-export."
        ]
    return ["nats_publish_failed: Config persisted but NATS notification failed. Workers may not be updated."]
