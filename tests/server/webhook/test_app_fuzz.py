"""Hypothesis against the live HTTPS server: random pod specs and random bodies never get a 500 or
crash the webhook, malformed reviews get a 400 with a message, every answer echoes the uid, every
patch applies, and mutating is idempotent."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from devshare.model import dialects, names
from devshare.model.dialects import mgpu
from devshare.server.webhook.app import WebhookConfig
from support.webhook_client import Client, decode_patch
from support.webhook_pods import apply_patch

SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

KEYS = [*dialects.resource_names(), "cpu", "memory", "example.com/dongle"]
quantities = st.one_of(
    st.sampled_from(["50", "100", "200", "-20", "0", "6k", "128", "1Gi", "4Gi", "0.5", "abc", "1e3", "", " 50",
                     "99999999999999999999999", "1e40", "2,1", "50m"]),
    st.integers(-(10**6), 10**6),
    st.floats(allow_nan=False, allow_infinity=False),  # JSON has no NaN
    st.text(max_size=6),
    st.none(),
    st.booleans(),
    st.lists(st.integers(), max_size=2),
)
device_maps = st.dictionaries(st.sampled_from(KEYS), quantities, min_size=1, max_size=4)
resource_maps = st.one_of(device_maps, st.dictionaries(st.one_of(st.sampled_from(KEYS), st.text(max_size=8)),
                                                       quantities, max_size=5))
junk = st.one_of(st.none(), st.integers(), st.text(max_size=5), st.lists(st.integers(), max_size=2))
annotations = st.dictionaries(
    st.sampled_from([mgpu.MGPU_MULTIPLE, names.COMPUTE_POLICY, names.ALLOCATION, "x"]),
    st.one_of(st.from_regex(r"\A-?\d{0,2}(,-?\d{0,2}){0,3}\Z"), st.text(max_size=8), st.integers()),
    max_size=3,
)
scheduler_names = st.sampled_from(["", "default-scheduler", "devshare-scheduler", "volcano"])


def containers_of(resources: st.SearchStrategy[Any], names_: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.lists(st.fixed_dictionaries({"name": names_}, optional={"resources": resources}), max_size=4)


# pods shaped like real ones: device resource names with good and bad quantities
shaped = st.fixed_dictionaries(
    {
        "metadata": st.fixed_dictionaries({"name": st.just("p"), "namespace": st.just("default")},
                                          optional={"annotations": annotations}),
        "spec": st.fixed_dictionaries(
            {"containers": containers_of(
                st.fixed_dictionaries({}, optional={"requests": device_maps, "limits": device_maps}),
                st.sampled_from(["main", "side", "c"]))},
            optional={"nodeName": st.sampled_from(["", "node-1"]), "schedulerName": scheduler_names,
                      "initContainers": containers_of(st.fixed_dictionaries({"limits": device_maps}),
                                                      st.just("init"))},
        ),
    }
)
# anything goes: junk where objects are expected
resources = st.one_of(
    st.fixed_dictionaries({}, optional={"requests": st.one_of(resource_maps, junk),
                                        "limits": st.one_of(resource_maps, junk)}),
    junk,
)
containers = st.lists(
    st.one_of(
        st.fixed_dictionaries({"name": st.one_of(st.text(max_size=6), st.integers())},
                              optional={"resources": resources}),
        junk,
    ),
    max_size=4,
)
specs = st.fixed_dictionaries(
    {"containers": st.one_of(containers, junk)},
    optional={
        "initContainers": containers,
        "nodeName": st.one_of(st.sampled_from(["", "node-1"]), junk),
        "schedulerName": st.one_of(scheduler_names, junk),
    },
)
metadata = st.fixed_dictionaries(
    {},
    optional={
        "name": st.one_of(st.text(max_size=6), junk),
        "namespace": st.one_of(st.text(max_size=6), junk),
        "generateName": st.text(max_size=6),
        "annotations": st.one_of(annotations, junk),
        "labels": st.one_of(st.dictionaries(st.text(max_size=4), st.text(max_size=4), max_size=2), junk),
    },
)
pods = st.one_of(
    shaped,
    st.fixed_dictionaries({}, optional={"metadata": st.one_of(metadata, junk), "spec": st.one_of(specs, junk)}),
)


@SETTINGS
@given(pod=pods, uid=st.text(min_size=1, max_size=12))
def test_random_pods(client: Client, webhook_config: WebhookConfig, pod: dict[str, Any], uid: str) -> None:
    errors = webhook_config.metrics.count("validate", "error") + webhook_config.metrics.count("mutate", "error")

    verdict = client.review("/validate", pod, uid=uid)  # asserts 200 and the uid echoed
    assert isinstance(verdict["allowed"], bool)
    event("refused" if not verdict["allowed"] else "allowed")
    if not verdict["allowed"]:
        assert verdict["status"]["message"].startswith("devshare: ")

    response = client.review("/mutate", pod, uid=uid)
    assert response["allowed"] is True
    ops = decode_patch(response)
    patched = apply_patch(pod, ops)  # every operation applies
    assert decode_patch(client.review("/mutate", patched)) == []  # idempotent
    if ops:
        assert response.get("warnings")
        event("patched")

    # no pod makes the webhook fail inside (a bug would be counted as an error and logged)
    after = webhook_config.metrics.count("validate", "error") + webhook_config.metrics.count("mutate", "error")
    assert after == errors


json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=6)),
    lambda children: st.one_of(st.lists(children, max_size=3), st.dictionaries(st.text(max_size=6), children,
                                                                               max_size=3)),
    max_leaves=12,
)
review_like = st.fixed_dictionaries(
    {},
    optional={
        "apiVersion": st.one_of(st.sampled_from(["admission.k8s.io/v1", "admission.k8s.io/v1beta1"]), json_values),
        "kind": st.one_of(st.just("AdmissionReview"), json_values),
        "request": st.one_of(
            st.fixed_dictionaries(
                {},
                optional={
                    "uid": st.one_of(st.text(max_size=8), json_values),
                    "kind": st.one_of(st.fixed_dictionaries({"kind": st.sampled_from(["Pod", "Node"])}),
                                      json_values),
                    "operation": st.one_of(st.sampled_from(["CREATE", "UPDATE", "DELETE"]), json_values),
                    "object": st.one_of(pods, json_values),
                    "namespace": json_values,
                },
            ),
            json_values,
        ),
    },
)
bodies = st.one_of(st.binary(max_size=64), json_values.map(lambda v: json.dumps(v).encode()),
                   review_like.map(lambda v: json.dumps(v).encode()))


@SETTINGS
@given(raw=bodies, path=st.sampled_from(["/validate", "/mutate"]))
def test_random_bodies(client: Client, raw: bytes, path: str) -> None:
    status, answer = client.post(path, raw)
    assert status in (200, 400), (status, answer)
    doc = json.loads(answer)
    if status == 400:
        assert isinstance(doc["message"], str) and doc["message"]
        return
    sent = json.loads(raw)
    assert doc["response"]["uid"] == sent["request"]["uid"]
    assert doc["apiVersion"] == sent.get("apiVersion", "admission.k8s.io/v1")
