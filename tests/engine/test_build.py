"""engine/build.py: the one way an engine is made from the configuration file, used by every command:
each knob reaches the engine."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from devshare.config import API_VERSION, KIND, Configuration, parse_config
from devshare.engine.build import build_engine, policy_of, settings_of
from devshare.engine.policies.binpack import BinpackPolicy
from devshare.engine.policies.devshare import DevsharePolicy
from devshare.server.extender.serve import RUNTIME, ExtenderOptions, build_app


def doc(**sections: Any) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": KIND, **sections}


def test_defaults_are_the_engine_defaults() -> None:
    cfg = Configuration()
    s = settings_of(cfg)
    assert (s.core_weight, s.card_binpack, s.node_binpack, s.dfs_budget, s.topology) == (0.5, True, True, 2000, True)
    assert build_engine(cfg).state.max_containers == 16
    assert isinstance(policy_of(cfg), DevsharePolicy)
    assert cfg.scheduling.assume_ttl_seconds == 60
    assert cfg.device_types.disabled() == frozenset()
    assert parse_config(yaml.safe_load(cfg.to_yaml())) == cfg  # the printed defaults read back


def test_every_knob_reaches_the_engine() -> None:
    cfg = parse_config(doc(
        deviceTypes={"rdma": False},
        scheduling={"nodePolicy": "spread", "cardPolicy": "binpack", "coreWeight": 20, "maxContainersPerCard": 4,
                    "topology": False, "dfsBudget": 50, "assumeTTLSeconds": 12.5},
        policies={"binpack": {"cardWeight": 0.25}},
    ))
    s = settings_of(cfg)
    assert s.core_weight == pytest.approx(0.2)  # seed 000: MGPUWeightOfCore 20 means 0.2
    assert (s.card_binpack, s.node_binpack, s.topology, s.dfs_budget) == (True, False, False, 50)
    policy = policy_of(cfg)
    assert isinstance(policy, BinpackPolicy)
    assert (policy.card_binpack, policy.node_binpack, policy.card_weight) == (True, False, 0.25)
    assert policy.core_weight == pytest.approx(0.2)
    assert build_engine(cfg).state.max_containers == 4
    assert cfg.device_types.disabled() == {"rdma"}
    devshare = policy_of(parse_config(doc(policies={"devshare": {"kappa": 0.1, "cpuPack": 0.7}})))
    assert isinstance(devshare, DevsharePolicy)
    assert (devshare.kappa, devshare.cpu_pack) == (0.1, 0.7)


async def test_extender_builds_its_engine_from_the_file() -> None:
    from devshare.kube.memory import MemoryBackend

    cfg = parse_config(doc(deviceTypes={"fpga": False}, scheduling={"nodePolicy": "binpack", "coreWeight": 20,
                                                                     "maxContainersPerCard": 3}))
    app_ = build_app(MemoryBackend(), ExtenderOptions(config=cfg))
    rt = app_[RUNTIME]
    assert rt.state.max_containers == 3
    scheduler = rt.extender.lifecycle.scheduler
    assert scheduler.settings.core_weight == pytest.approx(0.2)
    assert isinstance(scheduler.policy, BinpackPolicy)
    assert rt.extender.requests.refusals.disabled_types == {"fpga"}
    assert rt.extender.lifecycle.ttl == cfg.scheduling.assume_ttl_seconds


