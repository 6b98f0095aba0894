"""What every devshare process exports about itself on /metrics (the extender, the webhook, the node
agent): ``devshare_build_info``.

Importing this module also turns off prometheus_client's ``_created`` series (the creation time of
every counter and histogram: one extra series each, which no dashboard reads), for every registry of
the process.
"""

from __future__ import annotations

import platform

from prometheus_client import disable_created_metrics
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from devshare import __version__

disable_created_metrics()

BUILD_INFO = "devshare_build_info"


class BuildInfoCollector(Collector):
    """``devshare_build_info{version, python} 1``: which devshare and which Python this process runs
    (the ``*_build_info`` convention: a constant 1 whose labels carry the facts)."""

    def collect(self) -> list[Metric]:
        family = GaugeMetricFamily(BUILD_INFO, "Always 1: the devshare version and the Python version this process "
                                   "runs, as labels.", labels=["version", "python"])
        family.add_metric([__version__, platform.python_version()], 1)
        return [family]
