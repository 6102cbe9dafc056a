"""``sie-gateway``: ``serve`` (the cluster's HTTP front door) and ``version``."""

from __future__ import annotations

import os
import signal
from typing import Annotated, Any

import typer

app = typer.Typer(add_completion=False, no_args_is_help=True, help="SIE cluster gateway.")


@app.command()
def serve(
    host: Annotated[
        str | None, typer.Option(help="Interface to bind (env SIE_GATEWAY_HOST, default 0.0.0.0).")
    ] = None,
    port: Annotated[
        int | None, typer.Option("--port", "-p", help="Port (env SIE_GATEWAY_PORT, default 8080).")
    ] = None,
    nats_url: Annotated[
        str | None, typer.Option(help="NATS server(s), comma-separated (env SIE_NATS_URL).")
    ] = None,
    json_logs: Annotated[bool | None, typer.Option("--json-logs", help="JSON log lines.")] = None,
    log_level: Annotated[str | None, typer.Option("--log-level", "-l", help="Log level.")] = None,
    worker: Annotated[
        list[str] | None,
        typer.Option(
            "--worker", "-w", help="A worker URL whose /ws/status ws mode reads (env SIE_GATEWAY_WORKERS)."
        ),
    ] = None,
    health_mode: Annotated[
        str | None, typer.Option(help="nats (default: heartbeats) or ws (env SIE_GATEWAY_HEALTH_MODE).")
    ] = None,
    kubernetes: Annotated[
        bool | None,
        typer.Option("--kubernetes", help="ws mode: workers from Kubernetes endpoints (refused: not built)."),
    ] = None,
    k8s_namespace: Annotated[str | None, typer.Option(help="env SIE_GATEWAY_K8S_NAMESPACE.")] = None,
    k8s_service: Annotated[str | None, typer.Option(help="env SIE_GATEWAY_K8S_SERVICE.")] = None,
    k8s_port: Annotated[int | None, typer.Option(help="env SIE_GATEWAY_K8S_PORT.")] = None,
    bundles_dir: Annotated[str | None, typer.Option(help="Bundle YAMLs (env SIE_BUNDLES_DIR).")] = None,
    models_dir: Annotated[str | None, typer.Option(help="Model YAMLs (env SIE_MODELS_DIR).")] = None,
) -> None:
    """Start the gateway."""
    import uvicorn

    from sie.catalog.model_config import ModelConfigError
    from sie.gateway.app import create_app
    from sie.observability.logging import configure_logging
    from sie.settings.gateway import GatewaySettings

    overrides: dict[str, Any] = {
        "gateway_host": host,
        "gateway_port": port,
        "nats_url": nats_url,
        "log_json": json_logs,
        "log_level": log_level.upper() if log_level else None,
        "gateway_workers": ",".join(worker) if worker else None,
        "gateway_health_mode": health_mode,
        "gateway_kubernetes": kubernetes,
        "gateway_k8s_namespace": k8s_namespace,
        "gateway_k8s_service": k8s_service,
        "gateway_k8s_port": k8s_port,
        "bundles_dir": bundles_dir,
        "models_dir": models_dir,
    }
    settings = GatewaySettings(**{k: v for k, v in overrides.items() if v is not None})
    configure_logging(settings.log_level, json_lines=settings.log_json)
    try:
        application = create_app(settings)
    except (ModelConfigError, ValueError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from exc
    uvicorn.run(
        application,
        host=settings.gateway_host,
        port=settings.gateway_port,
        log_config=None,
        timeout_keep_alive=120,
        access_log=False,
    )


@app.command()
def local(
    workers: Annotated[int, typer.Option("--workers", "-w", min=0, help="Queue workers to start.")] = 2,
    host: Annotated[str, typer.Option(help="Interface the gateway binds.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", "-p", help="The gateway's port.")] = 8080,
    preload: Annotated[
        str | None, typer.Option(help="Comma-separated ids every worker loads before serving.")
    ] = None,
) -> None:
    """A local cluster: nats-server (JetStream), sie-config, WORKERS queue workers and the gateway;
    Ctrl-C stops all."""
    import uvicorn

    from sie.gateway.app import create_app
    from sie.gateway.local import LocalClusterError, local_cluster
    from sie.observability.logging import configure_logging
    from sie.settings.gateway import GatewaySettings

    try:
        with local_cluster(workers, preload) as cluster:
            store = os.environ.get("SIE_PAYLOAD_STORE_URL", str(cluster.folder / "payloads"))
            given: dict[str, Any] = {
                "gateway_host": host,
                "gateway_port": port,
                "nats_url": cluster.nats_url,
                "nats_user": cluster.nats_env("gateway")["SIE_NATS_USER"],
                "nats_password": cluster.nats_env("gateway")["SIE_NATS_PASSWORD"],
                "config_service_url": cluster.config_url,
                "payload_store_url": store,
            }
            settings = GatewaySettings(**given)
            configure_logging(settings.log_level, json_lines=settings.log_json)
            typer.echo(
                f"nats {cluster.nats_url}; sie-config {cluster.config_url}; "
                f"workers {', '.join(cluster.worker_urls) or 'none'}; "
                f"gateway http://{host}:{port}; logs in {cluster.folder}",
                err=True,
            )
            # uvicorn re-raises the signal that stopped it: SIGTERM must unwind (stopping the workers and
            # NATS below) rather than end the process where it stands.
            signal.signal(signal.SIGTERM, _exit_cleanly)
            uvicorn.run(create_app(settings), host=host, port=port, log_config=None, access_log=False)
    except LocalClusterError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from exc


def _exit_cleanly(signum: int, frame: object) -> None:
    raise SystemExit(0)


@app.command()
def version() -> None:
    """Print the version."""
    from sie import __version__

    typer.echo(__version__)


def main() -> None:
    app()
