"""devshare.buildinfo: every devshare process (extender, webhook, node agent) tells its version on
/metrics and exports no ``_created`` series (issue 40). The extender's: tests/server/extender/test_collectors.py;
the agent's: tests/agent/test_metrics.py."""

from __future__ import annotations

import platform

from prometheus_client.parser import text_string_to_metric_families

from devshare import __version__
from devshare.server.webhook.metrics import Metrics
from support import REPO


def build_info(text: str) -> dict[str, str]:
    [info] = [s for f in text_string_to_metric_families(text) for s in f.samples if s.name == "devshare_build_info"]
    assert info.value == 1
    return dict(info.labels)


def test_the_webhook_tells_its_build_and_has_no_created_series() -> None:
    metrics = Metrics()
    metrics.reviews.labels("mutate", "patched").inc()
    metrics.latency.labels("mutate").observe(0.001)
    text = metrics.render().decode()
    assert "devshare_webhook_reviews_total" in text and "_created" not in text
    assert build_info(text) == {"version": __version__, "python": platform.python_version()}



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
