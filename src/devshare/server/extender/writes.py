"""What a bind writes to the API server: the allocation annotations, the Binding, and, when a bind
fails after the annotations were written, taking them back. Each returns an error text ("" when it
worked) that the extender passes on to kube-scheduler."""

from __future__ import annotations

import logging
from collections.abc import Callable

from devshare.kube.backend import Backend
from devshare.kube.errors import BackendError

log = logging.getLogger(__name__)


class PodWrites:
    def __init__(self, backend: Backend, after_bind: Callable[[], None] | None = None) -> None:
        self.backend = backend
        self.after_bind = after_bind  # e.g. save the --cluster file

    async def annotate(self, ns: str, name: str, annotations: dict[str, str]) -> str:
        try:
            await self.backend.patch_pod_annotations(ns, name, annotations)
        except BackendError as e:
            return f"writing the allocation annotations of pod {ns}/{name} failed: {e}"
        return ""

    async def bind(self, ns: str, name: str, node: str, uid: str) -> str:
        try:
            await self.backend.bind_pod(ns, name, node, uid=uid or None)
        except BackendError as e:
            return f"binding pod {ns}/{name} to node {node} failed: {e}"
        if self.after_bind is not None:
            self.after_bind()
        return ""

    async def forget(self, ns: str, name: str, annotations: dict[str, str]) -> None:
        """Best effort: take our annotations off a pod left unbound (unless someone else bound it)."""
        try:
            obj = await self.backend.get_pod(ns, name)
            if obj is not None and not (obj.get("spec") or {}).get("nodeName"):
                await self.backend.patch_pod_annotations(ns, name, dict.fromkeys(annotations))
        except BackendError as e:
            log.info("could not remove the annotations of unbound pod %s/%s: %s", ns, name, e)
