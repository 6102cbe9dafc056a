"""Log setup: plain lines for people, or one JSON object per line (``--json-logs``) for Loki and friends."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Final

from sie.observability.tracing import TraceLogFilter

_EXTRA_FIELDS: Final = ("model", "request_id", "trace_id", "latency_ms", "batch_size", "endpoint", "status")


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        stamp = datetime.fromtimestamp(record.created, tz=UTC).isoformat(timespec="milliseconds")
        entry: dict[str, object] = {
            "timestamp": stamp.replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in _EXTRA_FIELDS:
            if hasattr(record, name):
                entry[name] = getattr(record, name)
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def configure_logging(level: str, *, json_lines: bool) -> None:
    handler = logging.StreamHandler()
    handler.addFilter(TraceLogFilter())  # trace_id and request_id on each record (observability.tracing)
    if json_lines:
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
