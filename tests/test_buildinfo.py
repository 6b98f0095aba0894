"""devshare.buildinfo: every devshare process (extender, webhook, node agent) tells its version on
/metrics and exports no ``_created`` series (issue 40). The extender's: tests/server/extender/test_collectors.py;
the webhook's: tests/server/webhook/test_metrics.py; the agent's: tests/agent/test_metrics.py."""

from __future__ import annotations

import platform

from prometheus_client import CollectorRegistry, Counter, generate_latest

from devshare import __version__
from devshare.buildinfo import BUILD_INFO, BuildInfoCollector
from devshare.server.webhook.metrics import Metrics
from support import REPO


def test_the_collector_tells_the_version_and_python_and_no_counter_has_a_created_series() -> None:
    [family] = BuildInfoCollector().collect()
    assert family.name == BUILD_INFO
    assert [(s.labels, s.value) for s in family.samples] == [
        ({"version": __version__, "python": platform.python_version()}, 1)]
    registry = CollectorRegistry()
    Counter("devshare_test_things", "Things.", registry=registry).inc()
    assert b"_created" not in generate_latest(registry)  # importing devshare.buildinfo turned them off


def test_the_webhooks_and_agents_families_are_documented() -> None:
    """docs/metrics.md lists every family of the webhook and the node agent (the extender's:
    tests/server/extender/test_collectors.py)."""
    from devshare.agent import metrics as agent

    documented = (REPO / "docs" / "metrics.md").read_text()
    text = Metrics().render().decode()
    names = {line.split(" ")[2] for line in text.splitlines() if line.startswith("# HELP ")}
    names |= {agent.USED, agent.UTILIZATION, agent.MEMORY_ALLOCATED, agent.CORE_ALLOCATED, agent.OVER_SHARE,
              "devshare_agent_usage_read_seconds", "devshare_agent_gpu_processes_unreadable"}
    for name in names:
        assert f"`{name}" in documented, f"{name} is not in docs/metrics.md"
