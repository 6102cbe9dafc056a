"""The upstream pool from the server's settings, as the public server starts it: a bad upstreams file
named by ``SIE_UPSTREAMS_FILE`` (a chart's) is a warning, and the server starts with no upstream and
remote serving off, rather than crash-looping; the ``--upstreams-file`` flag checks it first and stops
(``server.cli``). With nothing loaded, nothing is sent outside this deployment."""

from __future__ import annotations

import logging

from sie.settings.server import Settings
from sie.upstream.config import UpstreamConfigError, load_upstreams, remote_serving_from_env
from sie.upstream.pool import UpstreamPool

log = logging.getLogger(__name__)


def upstream_pool(settings: Settings) -> UpstreamPool:
    enabled = remote_serving_from_env(settings.remote_serving)
    if settings.upstreams_file is None:
        return UpstreamPool({}, enabled)
    try:
        upstreams = load_upstreams(settings.upstreams_file)
    except UpstreamConfigError as exc:
        log.warning("%s. No upstream is loaded and remote serving is off.", exc)
        return UpstreamPool({}, enabled=False)
    log.info("upstreams: %s", ", ".join(sorted(upstreams)) or "none defined")
    if not enabled:
        log.info("remote serving: off (SIE_REMOTE_SERVING); every remote profile is refused")
    return UpstreamPool(upstreams, enabled)
