"""When the filter may answer with devshare's best few nodes only (``scheduling.shortlist``).

kube-scheduler adds its own scores to the extender's before it picks a node. For a pod whose spec
asks nothing of those scores, they cannot weigh anything the pod wants: the filter may then answer
with the best ``K`` nodes by devshare's own score, and kube-scheduler's scoring and the prioritize
round trip become trivial (kube-scheduler calls no prioritize for a single node).

A pod *has soft wishes* when kube-scheduler's score plugins would weigh something it asked for:

- preferred node affinity (``affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution``),
- preferred pod affinity or anti-affinity (``affinity.podAffinity`` / ``podAntiAffinity``
  ``.preferredDuringSchedulingIgnoredDuringExecution``),
- a topology spread constraint with ``whenUnsatisfiable: ScheduleAnyway``.

What kube-scheduler weighs on its own (its default spreading of a ReplicaSet's pods, least-allocated
CPU and memory, image locality, nodes' ``PreferNoSchedule`` taints) is not the pod's wish: devshare's
packing of devices decides those pods' nodes, as its weight in kube-scheduler's configuration
already makes it do (a cluster that relies on those scores keeps ``shortlist: 0``). Required
affinities, selectors and hard spread constraints are filters, not scores: kube-scheduler applies
them before it asks the extender, so they never need the full list.
"""

from __future__ import annotations

from typing import Any

PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"


def has_soft_wishes(pod: dict[str, Any]) -> bool:
    """Whether kube-scheduler's own scoring would weigh something ``pod`` (a v1 Pod) asked for."""
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        return False
    affinity = spec.get("affinity")
    if isinstance(affinity, dict):
        for kind in ("nodeAffinity", "podAffinity", "podAntiAffinity"):
            terms = affinity.get(kind)
            if isinstance(terms, dict) and terms.get(PREFERRED):
                return True
    spread = spec.get("topologySpreadConstraints")
    return isinstance(spread, list) and any(
        isinstance(c, dict) and c.get("whenUnsatisfiable") == "ScheduleAnyway" for c in spread)
