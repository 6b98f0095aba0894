"""``devshare extender``: the scheduler extender (kube-scheduler's extender protocol over HTTP)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated

import typer

from devshare.cli.common import (
    ConfigOption,
    ContextOption,
    EventLoopOption,
    KubeconfigOption,
    LogLevelOption,
    check_event_loop,
    connect_live,
    fail,
    load_cluster,
    user_errors,
)
from devshare.cli.common import (
    log_level as parse_log_level,
)


def extender(
    cluster: Annotated[
        Path | None,
        typer.Option(help="Serve a cluster from a multi-document YAML of Node, Device and Pod objects (in memory); "
                     "pods without spec.nodeName are pending and get bound in memory on /bind."),
    ] = None,
    save: Annotated[
        Path | None,
        typer.Option(help="With --cluster: write the objects back to this file, atomically; each bind is on disk "
                     "(fsynced) before it is answered, binds arriving together share one write; again on shutdown."),
    ] = None,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
    namespace: Annotated[
        str | None, typer.Option(help="Namespace devshare runs in (its leader Lease lives there).")
    ] = None,
    port: Annotated[int, typer.Option(help="HTTP port (kube-scheduler's extender urlPrefix points here).")] = 8888,
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    metrics_port: Annotated[
        int, typer.Option(help="Also serve GET /metrics, /healthz, /readyz, /inspect and /ui (read-only) on this "
                          "port of --metrics-host (for Prometheus and people), over TLS when the extender uses "
                          "TLS (the same certificate); 0: no such listener.")
    ] = 0,
    metrics_host: Annotated[
        str, typer.Option(help="Address of the read-only port: 127.0.0.1 (the default) lets only this machine or "
                          "pod in; Prometheus scraping from another pod needs 0.0.0.0 (every address) or the pod IP.")
    ] = "127.0.0.1",
    leader_elect: Annotated[
        bool | None,
        typer.Option("--leader-elect/--no-leader-elect",
                     help="Campaign for the Lease; only the leader binds (default: on with a real cluster, off "
                     "with --cluster)."),
    ] = None,
    follow_lease: Annotated[
        str | None,
        typer.Option(help="Lead exactly while the kube-scheduler in this pod holds this Lease (its "
                     "leaderElection.resourceName, in --namespace) instead of electing a leader of its own: "
                     "whichever kube-scheduler is active has its binds served (docs/deploy.md). Needs --pod-name."),
    ] = None,
    pod_name: Annotated[
        str | None,
        typer.Option(envvar="POD_NAME", help="This pod's name (the downward API's metadata.name): kube-scheduler's "
                     "identity in its Lease starts with it. Read from $POD_NAME when not given."),
    ] = None,
    claim_ledger: Annotated[
        bool,
        typer.Option("--claim-ledger/--no-claim-ledger",
                     help="Record each pod's claim in the claim ledger (the ConfigMap devshare-claims in "
                     "--namespace) before its Binding, so that replicas binding at once never over-book a card "
                     "(docs/deploy.md). Always on unless turned off here, which is only safe while no other "
                     "extender binds."),
    ] = True,
    config: ConfigOption = None,
    assume_ttl: Annotated[
        float | None, typer.Option(help="Seconds a reservation waits for its bind before its devices are freed "
                                   "(default 60, or the --config file's scheduling.assumeTTLSeconds).")
    ] = None,
    policy: Annotated[
        str | None, typer.Option(help="Node policy: devshare (fragmentation-aware, the default), binpack or spread "
                                 "(overrides the --config file's scheduling.nodePolicy).")
    ] = None,
    core_weight: Annotated[
        float | None, typer.Option(help="binpack/spread: weight of compute vs memory in a card's score, 0..1 "
                                   "(default 0.5; overrides the --config file's scheduling.coreWeight).")
    ] = None,
    tls_cert: Annotated[
        Path | None, typer.Option("--tls-cert", help="PEM serving certificate: serve HTTPS (re-read when it changes).")
    ] = None,
    tls_key: Annotated[Path | None, typer.Option("--tls-key", help="PEM private key of --tls-cert.")] = None,
    tls_client_ca: Annotated[
        Path | None,
        typer.Option("--tls-client-ca", help="PEM CA of the client certificates allowed to call the verbs and "
                     "/inspect (kube-scheduler's extender tlsConfig certFile/keyFile)."),
    ] = None,
    insecure: Annotated[
        bool, typer.Option("--insecure", help="Allow a non-loopback --host without TLS and client certificates.")
    ] = False,
    scheduler_name: Annotated[
        str, typer.Option(help="spec.schedulerName of the kube-scheduler profile this extender serves: its pending "
                          "pods are followed for bind, and nudged when devices free up.")
    ] = "devshare-scheduler",
    event_loop: EventLoopOption = "auto",
    lane: Annotated[
        bool,
        typer.Option("--lane/--no-lane",
                     help="On a plain-HTTP port, read kube-scheduler's verb requests straight off the socket, "
                     "handing every other request to the full HTTP server (less CPU per pod; docs/extender.md). "
                     "--no-lane: every request through the full HTTP server."),
    ] = True,
    dra: Annotated[  # DRA (issue 38): devshare allocates the claims of its DeviceClasses (docs/dra.md)
        bool,
        typer.Option("--dra/--no-dra",
                     help="Allocate the ResourceClaims of devshare's DeviceClasses (pods held by the webhook's "
                     "scheduling gate) with the same engine and accounting, and publish ResourceSlices for "
                     "Device objects no devshare agent publishes (docs/dra.md). Needs resource.k8s.io/v1."),
    ] = True,
    bind_summary_interval: Annotated[
        float, typer.Option(help="Seconds between two log lines summing up the binds (bound, refused, median "
                            "latency); 0: none. Each bind has a line of its own at --log-level debug.")
    ] = 60.0,
    log_level: LogLevelOption = "info",
) -> None:
    """Run the scheduler extender: POST /filter, /prioritize, /bind, /preempt; GET /inspect, /metrics,
    /healthz, /readyz."""
    with user_errors():
        if cluster is not None and kubeconfig is not None:
            raise fail("give either --cluster FILE or --kubeconfig PATH, not both")
        if save is not None and cluster is None:
            raise fail("--save writes a --cluster file back: it needs --cluster")
        if not 0 < port < 65536:
            raise fail(f"--port must be between 1 and 65535, got {port}")
        if not 0 <= metrics_port < 65536 or metrics_port == port:
            raise fail(f"--metrics-port must be between 1 and 65535 and differ from --port, got {metrics_port}")
        if bind_summary_interval < 0:
            raise fail(f"--bind-summary-interval must be >= 0 (0: no summary), got {bind_summary_interval}")
        if assume_ttl is not None and assume_ttl <= 0:
            raise fail(f"--assume-ttl must be > 0, got {assume_ttl}")
        from devshare.engine.policies import LIVE_NAMES

        if policy is not None and policy not in LIVE_NAMES:
            raise fail(f"unknown --policy {policy!r}: use one of {', '.join(LIVE_NAMES)}")
        if core_weight is not None and not 0.0 <= core_weight <= 1.0:
            raise fail(f"--core-weight must be between 0 and 1, got {core_weight}")
        if follow_lease is not None:
            if cluster is not None:
                raise fail("--follow-lease follows a kube-scheduler's Lease on a real cluster: it needs --kubeconfig "
                           "(or the in-cluster configuration), not --cluster")
            if leader_elect:
                raise fail("give either --leader-elect (a Lease of the extender's own) or --follow-lease "
                           "(the kube-scheduler's Lease), not both")
            if not pod_name:
                raise fail("--follow-lease needs this pod's name: give --pod-name or set $POD_NAME from the "
                           "downward API (env: valueFrom: fieldRef: fieldPath: metadata.name)")
        check_event_loop(event_loop)
        from devshare.config import load_config, with_overrides

        cfg = with_overrides(load_config(config), policy=policy, core_weight=core_weight, assume_ttl=assume_ttl)
        level = parse_log_level(log_level)
        if (tls_cert is None) != (tls_key is None):
            raise fail("--tls-cert and --tls-key go together: give both (or neither, on 127.0.0.1)")
        if tls_client_ca is not None and tls_cert is None:
            raise fail("--tls-client-ca needs --tls-cert and --tls-key (client certificates are checked over TLS)")
        from devshare.server.extender.listening import listen_check

        try:
            warning = listen_check(host, tls=tls_client_ca is not None, insecure=insecure)
        except ValueError as e:
            raise fail(str(e)) from None
        logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        if warning:
            logging.getLogger("devshare.extender").warning(warning)
        tls = None
        if tls_cert is not None and tls_key is not None:
            from devshare.server.tls import CertReloader

            tls = CertReloader(tls_cert, tls_key, client_ca=tls_client_ca)

        from devshare.kube.backend import Backend
        from devshare.server.extender.serve import ExtenderOptions, cluster_saver, serve

        backend: Backend
        options = ExtenderOptions(config=cfg,
                                  metrics_port=metrics_port, scheduler_name=scheduler_name,
                                  claim_ledger=claim_ledger, event_loop=event_loop, lane=lane,
                                  bind_summary_interval=bind_summary_interval)
        if not claim_ledger:
            logging.getLogger("devshare.extender").warning(
                "--no-claim-ledger: binds are not recorded in the claim ledger; if another extender binds pods "
                "beside this one (several replicas, one run by hand), two pods can be bound to one card")
        if cluster is not None:

            memory = load_cluster(cluster)
            backend = memory
            if save is not None:
                options.save = cluster_saver(memory, save)
            options.leader_election = bool(leader_elect)
        else:
            client = connect_live(kubeconfig, context=context, namespace=namespace)
            backend = client
            if dra:  # DRA (issue 38)
                from devshare.kube.dra import LiveDraApi

                options.dra_api = LiveDraApi(client)
            options.leader_election = True if leader_elect is None else leader_elect
            if follow_lease is not None:
                options.leader_election = False
                options.follow_lease, options.pod_name = follow_lease, str(pod_name)
    try:
        serve(backend, options, host=host, port=port, metrics_host=metrics_host, tls=tls)
    except OSError as e:
        where = f"{host}:{port}" + (f" or {metrics_host}:{metrics_port}" if metrics_port else "")
        raise fail(f"cannot listen on {where}: {e.strerror or e}") from None


def register(app: typer.Typer) -> None:
    app.command("extender", short_help="The kube-scheduler extender (filter, bind, /ui).")(extender)
