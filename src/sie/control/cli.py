"""``sie-config``: ``serve`` (the cluster's config control plane) and ``version``."""

from __future__ import annotations

from typing import Annotated, Any

import typer

app = typer.Typer(add_completion=False, no_args_is_help=True, help="SIE config service.")


@app.command()
def serve(
    port: Annotated[int | None, typer.Option("--port", "-p", help="Port (default 8080).")] = None,
    host: Annotated[str | None, typer.Option("--host", "-h", help="Interface (default 0.0.0.0).")] = None,
    log_level: Annotated[
        str | None, typer.Option("--log-level", "-l", envvar="SIE_LOG_LEVEL", help="Log level.")
    ] = None,
    json_logs: Annotated[
        bool | None, typer.Option("--json-logs", envvar="SIE_LOG_JSON", help="JSON log lines.")
    ] = None,
) -> None:
    """Start the config service."""
    import uvicorn

    from sie.catalog.model_config import ModelConfigError
    from sie.control.app import create_app
    from sie.observability.logging import configure_logging
    from sie.settings.control import ConfigServiceSettings

    overrides: dict[str, Any] = {
        "host": host,
        "port": port,
        "log_json": json_logs,
        "log_level": log_level.upper() if log_level else None,
    }
    settings = ConfigServiceSettings(**{k: v for k, v in overrides.items() if v is not None})
    configure_logging(settings.log_level, json_lines=settings.log_json)
    try:
        application = create_app(settings)
    except (ModelConfigError, ValueError, OSError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from exc
    uvicorn.run(application, host=settings.host, port=settings.port, log_config=None, access_log=False)


@app.command()
def version() -> None:
    """Print the version."""
    from sie import __version__

    typer.echo(f"sie-config {__version__}")


def main() -> None:
    app()
