"""A verb's pod and candidate nodes, read once: the extender's request parsing and its caches.

kube-scheduler sends the same Pod to filter, to prioritize and again when it retries, and the watch
has delivered that very pod (the same uid and resourceVersion) a moment before. So a pod's request is
read from the API server's object when the watch holds that version (:meth:`Requests.from_api`,
cached by ``(key, uid, resourceVersion)``, which bind reads too), otherwise from the body, cached by
its bytes; the candidates' ``NodeNames`` are resolved to state rows by :class:`~devshare.server.
extender.nodeset.NodeSets`. An invalid request is kept as its error (without its traceback).

Before a pod is parsed, its namespace and name must be Kubernetes names (they go into the paths of
API requests: issue 37), and the configuration's refusals (:mod:`devshare.engine.refusals`) apply.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec

from devshare.engine.caches import LRU
from devshare.engine.refusals import Refusals
from devshare.engine.state import ClusterState
from devshare.model.errors import InvalidInput
from devshare.model.kubeobjects import check_name, check_namespace
from devshare.model.pod import parse_pod
from devshare.model.request import PodRequest
from devshare.server.extender.nodeset import NodeSet, NodeSets, resolve
from devshare.server.extender.shortlist import has_soft_wishes
from devshare.server.extender.verdicts import event_safe
from devshare.server.extender.view import ClusterView
from devshare.server.extender.wire import BadRequest, ExtenderArgs, decode_nodes, decode_pod, is_null

PARSED_BYTES = 32 * 2**20  # budget of the pod requests cached by their JSON (bodies included)
MESSAGE_LIMIT = 2048  # characters of a refusal's reason (it may quote a value of any length)
PodId = tuple[str, str, str]  # (namespace/name, uid, resourceVersion)
Judged = tuple[PodRequest | InvalidInput, bool]  # the request or why it is invalid; whether it has soft wishes


def shorten(message: str) -> str:
    if len(message) <= MESSAGE_LIMIT:
        return message
    cut = len(message) - MESSAGE_LIMIT
    return f"{message[:MESSAGE_LIMIT // 2]}...({cut} characters cut)...{message[-MESSAGE_LIMIT // 2:]}"


def invalid_request(e: InvalidInput) -> str:
    return event_safe(f"invalid request: {shorten(str(e))}")


def pod_id_of(obj: dict[str, Any]) -> PodId:
    """``(namespace/name, uid, resourceVersion)`` of a Pod object: one version of one pod."""
    m = obj.get("metadata")
    m = m if isinstance(m, dict) else {}
    return f"{m.get('namespace')}/{m.get('name')}", str(m.get("uid") or ""), str(m.get("resourceVersion") or "")


class _PodMeta(msgspec.Struct):
    name: str = ""
    namespace: str = ""
    uid: str = ""
    resourceVersion: str = ""  # the API's spelling


class _PodHead(msgspec.Struct):
    metadata: _PodMeta = msgspec.field(default_factory=_PodMeta)


_pod_head = msgspec.json.Decoder(_PodHead)


def decode_pod_id(raw: bytes) -> PodId | None:
    """``(namespace/name, uid, resourceVersion)`` of a Pod's JSON, reading nothing else of it (None when
    they cannot be read so: :func:`decode_pod` then says what is wrong)."""
    try:
        m = _pod_head.decode(raw).metadata
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return None
    return f"{m.namespace}/{m.name}", m.uid, m.resourceVersion


def request_size(req: PodRequest) -> int:
    """About the bytes a parsed request keeps alive (for the caches' budgets)."""
    return 512 + 4 * len(msgspec.json.encode(req))


def _size(judged: PodRequest | InvalidInput) -> int:
    return len(str(judged)) if isinstance(judged, InvalidInput) else request_size(judged)


def _request(judged: PodRequest | InvalidInput) -> PodRequest:
    """The request kept, or a fresh copy of why it is invalid (raising the kept error would hang a
    traceback on it)."""
    if isinstance(judged, InvalidInput):
        raise InvalidInput(str(judged))
    return judged


@dataclass
class Candidates:
    """The nodes of a filter/prioritize call, resolved against the state, and the full NodeList
    when one was sent (nodeCacheCapable: false)."""

    nodes: NodeSet
    node_list: dict[str, Any] | None = None
    items: list[dict[str, Any]] | None = None

    @property
    def names(self) -> list[str]:
        return self.nodes.names


def names_of_node_list(node_list: dict[str, Any]) -> tuple[list[str], list[dict[str, Any]]]:
    """Names and items of a v1 NodeList."""
    items = node_list.get("items")
    if items is None:
        items = []
    if not isinstance(items, list):
        raise BadRequest("Nodes.items must be a list of v1 Node objects")
    names: list[str] = []
    for i, node in enumerate(items):
        m = node.get("metadata") if isinstance(node, dict) else None
        name = m.get("name") if isinstance(m, dict) else None
        if not isinstance(name, str) or not name:
            raise BadRequest(f"Nodes.items[{i}] has no metadata.name")
        names.append(name)
    return names, items


class Requests:
    """The pods and candidates of the verbs, over ``state``, with the pods ``cluster`` keeps from the
    watch and the configuration's ``refusals``."""

    def __init__(self, state: ClusterState, cluster: ClusterView, refusals: Refusals) -> None:
        self.state = state
        self.cluster = cluster
        self.refusals = refusals
        self.nodesets = NodeSets(state)
        # the requests of pods as the API server has them (the watch's objects, reads), by (key, uid,
        # resourceVersion): a version of a pod is one object, so filter and bind read it once
        self._from_api: LRU[PodId, Judged] = LRU(PARSED_BYTES, max_entry=PARSED_BYTES // 4)
        # Pod JSON sent by a caller -> (request or why it is invalid, id, soft wishes): never used by bind
        self._parsed_raw: LRU[bytes, tuple[PodRequest | InvalidInput, PodId, bool]] = LRU(
            PARSED_BYTES, max_entry=PARSED_BYTES // 4)
        self._last: tuple[bytes, tuple[PodRequest | InvalidInput, PodId, bool]] | None = None

    # ------------------------------------------------------------------ pods
    def parse(self, pod: dict[str, Any]) -> PodRequest:
        """The pod's request, with what the configuration refuses of it (InvalidInput). Not cached."""
        m = pod.get("metadata")
        m = m if isinstance(m, dict) else {}
        check_namespace(m.get("namespace") or "default", what="metadata.namespace")  # they go into API paths
        check_name(m.get("name"), what="metadata.name")
        refused = self.refusals.of_pod(pod, frozenset(self.state.tables))
        if refused:
            raise InvalidInput(refused)
        req = parse_pod(pod)
        refused = self.refusals.of_request(req)
        if refused:
            raise InvalidInput(refused)
        return req

    def _judged(self, pod: dict[str, Any]) -> Judged:
        """:meth:`parse` and whether the pod has soft wishes, an invalid request kept as its error."""
        req: PodRequest | InvalidInput
        try:
            req = self.parse(pod)
        except InvalidInput as e:
            # kept without its traceback: its frames hold the decoded pod and the request body
            req = e.with_traceback(None) if len(str(e)) <= MESSAGE_LIMIT else InvalidInput(shorten(str(e)))
            req.__context__ = None
        return req, has_soft_wishes(pod)

    def from_api(self, pod: dict[str, Any]) -> tuple[PodRequest, bool]:
        """The request of a pod *as the API server has it* (the watch's object or a read, never a
        caller's body) and whether it has soft wishes; InvalidInput when it is not valid."""
        judged, soft = self.judged_from_api(pod)
        return _request(judged), soft

    def judged_from_api(self, pod: dict[str, Any]) -> Judged:
        """:meth:`from_api`, an invalid request kept as its error (the watch reads pending pods here
        ahead of their filter)."""
        pod_id = pod_id_of(pod)
        versioned = bool(pod_id[1] and pod_id[2])
        hit = self._from_api.get(pod_id) if versioned else None
        if hit is None:
            hit = self._judged(pod)
            if versioned:
                self._from_api.put(pod_id, hit, sum(map(len, pod_id)) + _size(hit[0]))
        return hit

    def request_of(self, raw: bytes) -> tuple[PodRequest, PodId, bool]:
        """The request of the ``Pod`` of a filter or prioritize (JSON bytes), its id, and whether it has
        soft wishes kube-scheduler's scoring would weigh. From the watch's object when it holds that very
        version, otherwise from the body, cached by its bytes. The last body's answer is kept as well:
        kube-scheduler's prioritize of a pod follows its filter with the same body."""
        last = self._last
        if last is not None and last[0] == raw:
            judged, pod_id, soft = last[1]
            return _request(judged), pod_id, soft
        named = decode_pod_id(raw)
        hit: tuple[PodRequest | InvalidInput, PodId, bool] | None = None
        if named is not None and named[1] and named[2]:
            # that very version as the API server has it: read already (the watch delivered it, and
            # :meth:`judged_from_api` read it then), else the watch's object when it holds that version
            api = self._from_api.get(named)
            if api is None and (watched := self.watched_version(named)) is not None:
                api = self.judged_from_api(watched)
            if api is not None:
                hit = (api[0], named, api[1])
        if hit is None:
            hit = self._parsed_raw.get(raw)
        if hit is None:
            obj = decode_pod(raw)
            pod_id = pod_id_of(obj)
            judged, soft = self._judged(obj)
            hit = (judged, pod_id, soft)
            self._parsed_raw.put(raw, hit, len(raw) + sum(map(len, pod_id)) + _size(judged))
        self._last = (raw, hit)
        judged, pod_id, soft = hit
        return _request(judged), pod_id, soft

    def watched_version(self, pod_id: PodId) -> dict[str, Any] | None:
        """The pending pod the watch holds when it is this very version (the same uid and
        resourceVersion, both given); None otherwise."""
        if not pod_id[1] or not pod_id[2]:
            return None
        watched = self.cluster.pending_pod(pod_id[0])
        return watched if watched is not None and pod_id_of(watched)[1:] == pod_id[1:] else None

    # ------------------------------------------------------------------ a verb's arguments
    def read(self, args: ExtenderArgs) -> tuple[Candidates, tuple[PodRequest, PodId, bool] | InvalidInput]:
        """A filter's or prioritize's candidates (:meth:`candidates`) and its pod (:meth:`request_of`),
        or why the pod is not valid."""
        cands = self.candidates(args)
        try:
            return cands, self.request_of(bytes(args.pod))
        except InvalidInput as e:
            return cands, e

    # ------------------------------------------------------------------ nodes
    def candidates(self, args: ExtenderArgs) -> Candidates:
        """Node names from ``NodeNames`` (nodeCacheCapable) or from the ``Nodes`` NodeList."""
        if not is_null(args.node_names):
            return Candidates(self.nodesets.get(bytes(args.node_names)))
        if is_null(args.nodes):
            raise BadRequest("neither NodeNames nor Nodes is given: send the candidate nodes in one of them")
        node_list = decode_nodes(bytes(args.nodes))
        names, items = names_of_node_list(node_list)
        return Candidates(resolve(self.state, names), node_list, items)
