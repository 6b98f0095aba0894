"""``devshare agent``: the node agent (device reporter and kubelet device plugin)."""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from devshare.agent.inventory import Backend
from devshare.cli.common import LogLevelOption, emit, fail, user_errors
from devshare.cli.common import log_level as parse_log_level
from devshare.model.errors import InvalidInput

if TYPE_CHECKING:
    from devshare.agent.kubeclient import KubeAgentClient

agent_app = typer.Typer(name="agent", help="The node agent: device reporter and kubelet device plugin.",
                        no_args_is_help=True)

NodeOpt = Annotated[str, typer.Option("--node", help="Node name (default: $NODE_NAME, else the host name).")]
FakeOpt = Annotated[Path | None, typer.Option("--fake", help="Fake device description (YAML/JSON) instead of NVML; "
                                               "a topology file of examples/topologies/ works (its GPUs and links; "
                                               "other fields defaulted).")]
DevicesOpt = Annotated[Path | None, typer.Option("--devices", help="RDMA/FPGA configuration file (YAML/JSON).")]
BandwidthOpt = Annotated[Path | None, typer.Option("--bandwidth", help="Measured bandwidth matrix (a topology file "
                                                    "with bandwidth_gbps) overriding the link model.")]
CheckpointOpt = Annotated[Path | None, typer.Option("--checkpoint", help="kubelet's device plugin checkpoint, "
                                                    "read whenever needed: it need not exist yet (default: "
                                                    "kubelet_internal_checkpoint in kubelet's device plugin "
                                                    "directory).")]
LabelOpt = Annotated[bool, typer.Option("--node-labels/--no-node-labels",
                                         help="Put the GPU model, driver version and vendor on the Node as labels.")]
XidsOpt = Annotated[str, typer.Option("--ignore-xids", help="XIDs that do not make a GPU unhealthy (comma list).")]


def _node(node: str) -> str:
    return node or os.environ.get("NODE_NAME") or socket.gethostname()


def _backend(fake: Path | None, devices: Path | None, node: str, ignore_xids: str, *,
             watch_health: bool) -> Backend:
    from devshare.agent.others import load_other_devices

    others = load_other_devices(devices) if devices is not None else ()
    if fake is not None:
        from devshare.agent.fake import FakeBackend

        if others:
            raise InvalidInput("--devices cannot be combined with --fake: list rdma/fpga in the fake file")
        return FakeBackend(fake, node=node)
    from devshare.agent.nvml import DEFAULT_IGNORED_XIDS, NvmlBackend, parse_xids

    try:
        xids = parse_xids(ignore_xids) if ignore_xids else DEFAULT_IGNORED_XIDS
    except ValueError:
        raise InvalidInput(f"--ignore-xids must be a comma separated list of numbers, got {ignore_xids!r}") from None
    try:
        return NvmlBackend(ignored_xids=xids, others=others, watch_health=watch_health)
    except Exception as e:  # pynvml.NVMLError and friends: no driver, no library
        raise InvalidInput(f"NVML is not available ({e}); on a machine without NVIDIA GPUs use --fake FILE") from None


def _override(bandwidth: Path | None) -> list[list[float]] | None:
    if bandwidth is None:
        return None
    from devshare.model.links import load_topology_file

    return load_topology_file(bandwidth).matrix


def _checkpoint(path: Path | None, plugin_dir: Path | None = None) -> Path:
    """kubelet's checkpoint: the given file, else the one in kubelet's device plugin directory. It
    need not exist yet: kubelet writes it once a device plugin has listed its devices, and the agent
    reads it again whenever it needs it (a fresh node has none when the agent starts)."""
    from devshare.agent.checkpoint import DEFAULT_PATH

    if path is not None:
        if path.is_dir() or not path.parent.is_dir():
            raise InvalidInput("give kubelet's checkpoint file, in an existing folder (kubelet's device plugin "
                               "directory, mounted)", field=f"--checkpoint {path}")
        return path
    return (plugin_dir or DEFAULT_PATH.parent) / DEFAULT_PATH.name


def _journal(path: Path | None) -> Path | None:
    from devshare.agent.journal import DEFAULT_PATH

    if path is not None:
        if not path.parent.is_dir():
            raise InvalidInput("its folder does not exist", field=f"--agent-checkpoint {path}")
        return path
    if DEFAULT_PATH.parent.is_dir():
        return DEFAULT_PATH
    logging.getLogger("devshare.agent").warning(
        "%s does not exist: devices handed out for identical pods are remembered in memory only (mount it)",
        DEFAULT_PATH.parent)
    return None


def _client() -> KubeAgentClient:
    from devshare.agent.kubeclient import KubeAgentClient

    try:
        return KubeAgentClient()
    except Exception as e:
        raise InvalidInput(f"cannot reach the API server ({e}); run in a cluster, set KUBECONFIG, or use --once")  \
            from None


def _stop_on_signals() -> threading.Event:
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    return stop


@agent_app.command("report")
def report(
    once: Annotated[bool, typer.Option("--once", help="Print the Device object once and exit.")] = False,
    fake: FakeOpt = None,
    node: NodeOpt = "",
    output: Annotated[str, typer.Option("-o", "--output", help="yaml or json (with --once).")] = "yaml",
    devices: DevicesOpt = None,
    bandwidth: BandwidthOpt = None,
    checkpoint: CheckpointOpt = None,
    ignore_xids: XidsOpt = "",
    interval: Annotated[float, typer.Option("--interval", help="Seconds between reports.")] = 2.0,
    node_labels: LabelOpt = True,
) -> None:
    """Report the node's devices: print the Device object (--once), or keep it up to date in the API."""
    from devshare.agent.reporter import Reporter

    if output not in ("yaml", "json"):
        raise fail(f"unknown output format {output!r}: use json or yaml")
    with user_errors():
        name = _node(node)
        backend = _backend(fake, devices, name, ignore_xids, watch_health=not once)
        try:
            reporter = Reporter(backend, name, client=None if once else _client(), override=_override(bandwidth),
                                checkpoint=_checkpoint(checkpoint), label_node=node_labels)
            if once:
                emit(reporter.build(), output)
                return
        except BaseException:
            backend.close()
            raise
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        reporter.run(_stop_on_signals(), interval=interval)
    finally:
        backend.close()


@agent_app.command("run")
def run(
    fake: FakeOpt = None,
    node: NodeOpt = "",
    devices: DevicesOpt = None,
    bandwidth: BandwidthOpt = None,
    checkpoint: CheckpointOpt = None,
    ignore_xids: XidsOpt = "",
    plugin_dir: Annotated[Path, typer.Option("--plugin-dir", help="kubelet's device plugin directory.")] = Path(
        "/var/lib/kubelet/device-plugins"),
    resources: Annotated[str, typer.Option("--resources", help="Resource names to serve as device plugins "
                                           "(comma list; default: all devshare serves).")] = "",
    interval: Annotated[float, typer.Option("--interval", help="Seconds between reports.")] = 2.0,
    node_labels: LabelOpt = True,
    agent_checkpoint: Annotated[Path | None, typer.Option(
        "--agent-checkpoint", help="The agent's own checkpoint: devices handed out for identical pods and the "
        "trades it owes (default: /var/lib/devshare/agent-checkpoint.json when /var/lib/devshare exists).")] = None,
    usage_interval: Annotated[float, typer.Option("--usage-interval", help="Seconds between readings of what each "
                                                  "container uses of its GPUs (0: off).")] = 10.0,
    usage_report_interval: Annotated[float, typer.Option("--usage-report-interval", help="Seconds between "
                                                         "refreshes of the usage in the Device's status.")] = 60.0,
    proc_root: Annotated[Path, typer.Option("--proc-root", help="The host's /proc (run with hostPID), to find each "
                                            "GPU process's pod and container from its cgroup.")] = Path("/proc"),
    metrics_port: Annotated[int, typer.Option("--metrics-port", help="Port of the agent's /metrics (per-container "
                                              "GPU usage; 0: none).")] = 9402,
    metrics_address: Annotated[str, typer.Option("--metrics-address", help="Address /metrics listens on.")] = "0.0.0.0",
    dra: Annotated[bool, typer.Option(  # DRA (issue 38)
        "--dra/--no-dra", help="Also publish this node's ResourceSlice (driver gpu.devshare.io) and serve the DRA "
        "kubelet plugin, preparing claims through CDI specs (docs/dra.md).")] = False,
    cdi_dir: Annotated[Path, typer.Option("--cdi-dir", help="CDI spec directory (with --dra).")] = Path("/var/run/cdi"),
    log_level: LogLevelOption = "info",
) -> None:
    """Run the agent: the reporter and the kubelet device plugins."""
    from devshare.agent.resources import PLUGIN_RESOURCES
    from devshare.agent.run import Agent

    with user_errors():
        level = parse_log_level(log_level)
        chosen = list(PLUGIN_RESOURCES)
        if resources:
            wanted = [r.strip() for r in resources.split(",") if r.strip()]
            known = {r.name: r for r in PLUGIN_RESOURCES}
            unknown = [w for w in wanted if w not in known]
            if unknown:
                raise InvalidInput(f"unknown resource(s) {', '.join(unknown)}: use some of {', '.join(known)}",
                                   field="--resources")
            chosen = [known[w] for w in wanted]
        if not plugin_dir.is_dir():
            raise InvalidInput("not a directory (mount kubelet's device plugin directory here)",
                               field=f"--plugin-dir {plugin_dir}")
        journal = _journal(agent_checkpoint)
        if usage_interval < 0 or usage_report_interval <= 0:
            raise InvalidInput("--usage-interval must be >= 0 (0: off) and --usage-report-interval > 0")
        if not 0 <= metrics_port <= 65535:
            raise InvalidInput(f"--metrics-port must be a port number (0: none), got {metrics_port}")
        if usage_interval and not proc_root.is_dir():
            raise InvalidInput("not a directory (the host's /proc)", field=f"--proc-root {proc_root}")
        name = _node(node)
        backend = _backend(fake, devices, name, ignore_xids, watch_health=True)
        try:
            client = _client()
            agent = Agent(backend, name, client, resources=chosen, plugin_dir=plugin_dir,
                          override=_override(bandwidth), checkpoint=_checkpoint(checkpoint, plugin_dir),
                          label_node=node_labels, journal=journal, usage_interval=usage_interval,
                          usage_publish_interval=usage_report_interval, proc_root=proc_root,
                          metrics_port=metrics_port if usage_interval else 0, metrics_address=metrics_address)
        except BaseException:
            backend.close()
            raise
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    agent.start()
    if dra:  # DRA (issue 38): the kubelet plugin and the node's ResourceSlice, from the reporter's inventory
        from devshare.agent.dra.node import DraNode

        dra_node = DraNode(name, client, lambda: agent.reporter.inventory,
                           lambda: agent.reporter.previous, cdi_dir=cdi_dir)
        dra_node.start(interval=interval)
    try:
        agent.run_until(_stop_on_signals(), interval=interval)
    finally:
        if dra:
            dra_node.stop()


def register(app: typer.Typer) -> None:
    app.add_typer(agent_app, name="agent", short_help="The node agent: devices, device plugin.")
