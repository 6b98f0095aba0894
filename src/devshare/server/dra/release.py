"""Claims released when a pod is deleted before its scheduling gate was lifted: the claims of
devshare's classes that no other pending pod uses, allocated and not reserved by kube-scheduler,
get their allocation cleared."""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable
from typing import Any

from devshare.kube.dra import DraApi
from devshare.kube.errors import BackendError
from devshare.model.dra import Claim, parse_claim, pod_claims
from devshare.model.errors import InvalidInput
from devshare.model.kubeobjects import meta

log = logging.getLogger("devshare.server.dra.controller")


async def release_claims(api: DraApi, key: str, old: dict[str, Any], *, pods: dict[str, dict[str, Any]],
                            claims: dict[str, dict[str, Any]], serves: Callable[[str], bool],
                            is_leader: Callable[[], bool]) -> list[tuple[Claim, dict[str, Any]]]:
    """Release the claims of pod ``key`` (``old``: the pod as last seen); (claim, stored object) of each
    released. None when the pod still exists (it was bound: it left the pending pods), when that
    cannot be told, or when this replica does not lead; never a claim another pending pod uses."""
    ns, _, name = key.partition("/")
    try:
        now = await api.get("pods", ns, name)
    except BackendError as e:
        log.warning("pod %s: cannot tell whether it still exists (%s); its claims stay allocated", key, e)
        return []
    if now is not None and meta(now).get("uid") == meta(old).get("uid"):
        return []
    if not is_leader():
        return []
    used_elsewhere = {r.claim for k, p in pods.items() if k.startswith(f"{ns}/") for r in pod_claims(p)}
    out: list[tuple[Claim, dict[str, Any]]] = []
    for ref in pod_claims(old):
        obj = claims.get(f"{ns}/{ref.claim}") if ref.claim and ref.claim not in used_elsewhere else None
        if obj is None:
            continue
        try:
            claim = parse_claim(obj)
        except InvalidInput:
            continue
        if claim.allocation is None or claim.reserved_for or not all(serves(c) for c in claim.classes()):
            continue
        new = copy.deepcopy(obj)
        new.get("status", {}).pop("allocation", None)
        try:
            out.append((claim, await api.update_status(new)))
        except BackendError as e:
            log.info("claim %s of deleted pod %s not released: %s", claim.key, key, e)
            continue
        log.info("claim %s released: its pod %s was deleted before it was scheduled", claim.key, key)
    return out
