"""``devshare webhook``: the admission webhook server, and ``devshare webhook cert`` to make its
serving certificate."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated

import typer

from devshare.cli.common import (
    ConfigOption,
    EventLoopOption,
    LogLevelOption,
    check_event_loop,
    connect_live,
    fail,
    user_errors,
)
from devshare.cli.common import (
    log_level as parse_log_level,
)
from devshare.kube.persist import load_documents

webhook_app = typer.Typer(
    help="Admission webhook: validate and normalise device pods (POST /validate, POST /mutate).",
    add_completion=False,
)


@webhook_app.callback(invoke_without_command=True)
def webhook(
    ctx: typer.Context,
    tls_cert: Annotated[
        Path | None, typer.Option("--tls-cert", help="PEM serving certificate (re-read when it changes).")
    ] = None,
    tls_key: Annotated[Path | None, typer.Option("--tls-key", help="PEM private key of the certificate.")] = None,
    port: Annotated[int, typer.Option(help="HTTPS port.")] = 9443,
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "0.0.0.0",
    cluster: Annotated[
        Path | None,
        typer.Option(help="Multi-document YAML with Device objects: refuse pods asking for a device type no "
                     "node has (without it, that check is skipped)."),
    ] = None,
    kubeconfig: Annotated[
        Path | None,
        typer.Option(help="Follow the Device objects of a real cluster (this kubeconfig) to refuse pods asking "
                     "for a device type no node has."),
    ] = None,
    in_cluster: Annotated[
        bool, typer.Option("--in-cluster", help="Like --kubeconfig, with the pod's service account.")
    ] = False,
    scheduler_name: Annotated[
        str, typer.Option(help="schedulerName the mutating webhook gives device pods.")
    ] = "devshare-scheduler",
    replace_scheduler: Annotated[
        list[str] | None,
        typer.Option(help="A schedulerName that was not chosen on purpose and may be replaced (repeatable; "
                     "default: none set, and default-scheduler)."),
    ] = None,
    reload_interval: Annotated[
        float, typer.Option(help="Seconds between checks of the certificate files for a renewal.")
    ] = 5.0,
    allocation_writer: Annotated[
        list[str] | None,
        typer.Option(help="A username that may write allocation annotations on pods (repeatable; default: "
                     "devshare's extender, system:serviceaccount:devshare-system:devshare-scheduler). Anyone "
                     "else's pod CREATE carrying them, or UPDATE changing them, is refused, and so is anyone "
                     "else's Binding of a device pod (/validate-binding)."),
    ] = None,
    allocation_trader: Annotated[
        list[str] | None,
        typer.Option(help="A username that may mark pods assigned and trade the allocations of identical pods "
                     "of one node (repeatable; default: the node agent, "
                     "system:serviceaccount:devshare-system:devshare-agent)."),
    ] = None,
    dra: Annotated[bool, typer.Option(  # DRA (issue 38)
        "--dra/--no-dra", help="Gate pods whose ResourceClaims use devshare's DeviceClasses until devshare's "
        "allocator (devshare extender --dra) has allocated them (docs/dra.md).")] = True,
    log_level: LogLevelOption = "info",
    config_file: ConfigOption = None,
    event_loop: EventLoopOption = "auto",
) -> None:
    """Run the webhook over HTTPS: devshare webhook --tls-cert tls.crt --tls-key tls.key."""
    if ctx.invoked_subcommand is not None:
        return
    with user_errors():
        from devshare.config import load_config
        from devshare.engine.build import configure_model

        settings = load_config(config_file)  # bad input files are reported before anything else
        configure_model(settings)  # the configured device types' resource names
        if cluster is not None and not load_documents(cluster):
            raise fail(f"{cluster}: no Node, Device or Pod object in the file: give a multi-document YAML "
                       "with the cluster's Device objects (examples/cluster.yaml is one)")
        if tls_cert is None or tls_key is None:
            raise fail(
                "--tls-cert and --tls-key are required (the API server only calls webhooks over HTTPS); "
                "make a pair with: devshare webhook cert --service NAME --namespace NS --out DIR"
            )
        if not 0 < port < 65536:
            raise fail(f"--port must be between 1 and 65535, got {port}")
        if reload_interval < 0:
            raise fail(f"--reload-interval must be >= 0, got {reload_interval}")
        check_event_loop(event_loop)
        level = parse_log_level(log_level)
        logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

        from devshare.server.tls import load_server_context
        from devshare.server.webhook.app import WebhookConfig
        from devshare.server.webhook.cluster import ClusterFileDeviceTypes, DeviceTypes
        from devshare.server.webhook.mutate import REPLACEABLE_SCHEDULERS
        from devshare.server.webhook.pods import PodSource
        from devshare.server.webhook.serve import serve

        load_server_context(tls_cert, tls_key)  # a bad pair is reported here, as one line
        if cluster is not None and (kubeconfig is not None or in_cluster):
            raise fail("give --cluster or --kubeconfig/--in-cluster, not both")
        source: DeviceTypes | None = None
        pods: PodSource | None = None  # where a Binding's pod and a trade's partner are read
        dra_claims = None
        if cluster is not None:
            from devshare.kube.memory import MemoryBackend

            source = ClusterFileDeviceTypes(cluster)
            pods = MemoryBackend.load(cluster)
        elif kubeconfig is not None or in_cluster:
            from devshare.server.webhook.cluster import WatchedDeviceTypes

            backend = connect_live(kubeconfig)
            source, pods = WatchedDeviceTypes(backend), backend
            from devshare.kube.dra import LiveDraApi  # DRA (issue 38): claims read to decide the gate
            from devshare.server.webhook.dra_gate import ApiClaims

            dra_claims = ApiClaims(LiveDraApi(backend))
        config = WebhookConfig(
            disabled_types=settings.device_types.disabled(),
            disabled_dialects=settings.disabled_dialects(),
            scheduler_name=scheduler_name,
            replace_schedulers=tuple(replace_scheduler) if replace_scheduler else REPLACEABLE_SCHEDULERS,
            cluster=source,
            pods=pods,
            dra_claims=dra_claims,
            dra=dra,
        )
        if allocation_writer:
            bad = [w for w in allocation_writer if not w.strip()]
            if bad:
                raise fail("--allocation-writer must be a username, e.g. "
                           "system:serviceaccount:devshare-system:devshare-scheduler")
            config.allocation_writers = tuple(allocation_writer)
        if allocation_trader:
            if not all(w.strip() for w in allocation_trader):
                raise fail("--allocation-trader must be a username, e.g. "
                           "system:serviceaccount:devshare-system:devshare-agent")
            config.allocation_traders = tuple(allocation_trader)
    try:
        serve(config, tls_cert=tls_cert, tls_key=tls_key, host=host, port=port, reload_interval=reload_interval,
              event_loop=event_loop)
    except OSError as e:
        raise fail(f"cannot listen on {host}:{port}: {e.strerror or e}") from None


@webhook_app.command("cert")
def cert(
    service: Annotated[str, typer.Option(help="Name of the webhook's Service.")],
    namespace: Annotated[str, typer.Option(help="Namespace of the Service.")],
    out: Annotated[Path, typer.Option(help="Directory to write ca.crt, ca.key, tls.crt, tls.key into.")],
    days: Annotated[int, typer.Option(help="Validity in days.")] = 3650,
    extra_name: Annotated[
        list[str] | None, typer.Option(help="Another DNS name or IP for the certificate (repeatable).")
    ] = None,
) -> None:
    """Make a self-signed CA and a serving certificate for SERVICE.NAMESPACE.svc (needs openssl).

    Prints the caBundle (base64 of ca.crt) on stdout: put it in the webhook configurations'
    clientConfig.caBundle; store tls.crt/tls.key in the Secret the Deployment mounts."""
    from devshare.server.tls import make_serving_cert

    with user_errors():
        made = make_serving_cert(service, namespace, out, days=days, extra_names=tuple(extra_name or ()))
    typer.echo(f"wrote {made.ca_cert}, {made.ca_key}, {made.cert}, {made.key}", err=True)
    typer.echo(f"certificate names: {', '.join(made.names)}", err=True)
    typer.echo(
        f"next: kubectl -n {namespace} create secret tls {service}-tls --cert {made.cert} --key {made.key}; "
        "set clientConfig.caBundle in deploy/webhook/webhooks.yaml to the line below",
        err=True,
    )
    typer.echo(made.ca_bundle)


def register(app: typer.Typer) -> None:
    app.add_typer(webhook_app, name="webhook", short_help="The admission webhook; its certificate.")
