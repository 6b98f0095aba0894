"""A v1 Pod (a plain dict) read into a :class:`~devshare.model.request.PodRequest`.

- Container resources come from ``resources.requests``, or ``limits`` for a name not in requests.
- One :class:`ContainerRequest` per app container, in order, those asking nothing included, and one
  per init container (``init_containers``), with kubelet's semantics: an init container's devices
  are handed on to the app containers, so the pod's need is the larger of its largest init container
  and its app containers together (:mod:`devshare.model.initplan`); a restartable one (a sidecar)
  keeps its devices. Refused only where the dialect's node side cannot give an init container devices.
- Each container asks in one dialect, read by that dialect's module through the registry
  (:mod:`devshare.model.dialects`); a dialect may carry another's asks (``nvidia.com/gpu`` next to
  Koordinator's ``rdma``/``fpga`` is of the ``koordinator`` dialect, whose annotation carries
  both). A pod asks in one dialect.
- Allowed GPU models: the pod annotation ``devshare.io/gpu-model: "A100|H100"`` (``|`` or ``,``),
  a ``nodeSelector`` on the node label ``devshare.io/gpu-model``, and required node affinity ``In``
  on that label (when every term constrains it; terms are ORed). All given sources must agree:
  the allowed models are the ones every source allows.
- GPU selection: HAMi's annotations ``nvidia.com/use-gpuuuid``, ``nouse-gpuuuid``, ``use-gputype``,
  ``nouse-gputype`` (comma-separated; ids exact, types case-insensitive substrings of the card's
  model), for the GPUs of every dialect (:class:`~devshare.model.request.GpuSelection`).
- Group: labels ``gputopology.scheduling.koordinator.sh/name`` + ``/replica`` (seed 003); gang:
  annotations ``gang.scheduling.koordinator.sh/name`` + ``/min-available``. With both, they must
  agree. A gang alone makes a group of that name and size. A gang key written as a label (or a
  group key as an annotation) is refused with the fix rather than ignored.
- ``cpu_milli``/``memory_bytes``: what kube-scheduler counts for the node
  (:func:`~devshare.model.podresources.node_requests`: app containers, sidecars, init containers,
  pod-level resources, overhead; rounded up).

:func:`read_pod` never raises: it returns what it could read and every problem found.
:func:`parse_pod` raises them (:class:`~devshare.model.errors.InvalidRequest`).
"""

from __future__ import annotations

from typing import Any

from devshare.model import dialects, names, prefixes, validation
from devshare.model.dialects import Dialect
from devshare.model.podresources import ZERO, container_resources, node_requests
from devshare.model.problems import Problems
from devshare.model.request import (
    ContainerRequest,
    DeviceRequest,
    GpuSelection,
    GroupRef,
    PodRequest,
)


def _str_map(obj: Any, where: str, problems: Problems) -> dict[str, str]:
    if obj is None:
        return {}
    if not isinstance(obj, dict):
        problems.add(where, "must be a mapping of names to strings")
        return {}
    return {str(k): v if isinstance(v, str) else str(v) for k, v in obj.items()}


def _models_from_affinity(spec: dict[str, Any]) -> set[str] | None:
    try:
        terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    except (KeyError, TypeError):
        return None
    if not isinstance(terms, list) or not terms:
        return None
    allowed: set[str] = set()
    for term in terms:
        exprs = term.get("matchExpressions") if isinstance(term, dict) else None
        term_models: set[str] | None = None
        for e in exprs if isinstance(exprs, list) else []:
            if isinstance(e, dict) and e.get("key") == names.NODE_GPU_MODEL and e.get("operator") == "In":
                values = e.get("values")
                vals = {str(v) for v in values} if isinstance(values, list) else set()
                term_models = vals if term_models is None else term_models & vals
        if term_models is None:
            return None  # a term that does not constrain the model: any model can match
        allowed |= term_models
    return allowed


def _gpu_models(spec: dict[str, Any], annotations: dict[str, str], problems: Problems) -> tuple[str, ...]:
    sources: list[tuple[str, list[str]]] = []
    raw = annotations.get(names.POD_GPU_MODEL)
    if raw is not None:
        models = [m.strip() for m in raw.replace(",", "|").split("|") if m.strip()]
        if not models:
            problems.add(f"annotation {names.POD_GPU_MODEL}", 'is empty: list the allowed GPU models, e.g. "A100|H100"')
            return ()
        sources.append((f"annotation {names.POD_GPU_MODEL}", models))
    selector = spec.get("nodeSelector")
    if isinstance(selector, dict) and names.NODE_GPU_MODEL in selector:
        sources.append((f"nodeSelector {names.NODE_GPU_MODEL}", [str(selector[names.NODE_GPU_MODEL])]))
    from_affinity = _models_from_affinity(spec)
    if from_affinity is not None:
        sources.append((f"node affinity on {names.NODE_GPU_MODEL}", sorted(from_affinity)))
    if not sources:
        return ()
    allowed = [m for m in dict.fromkeys(sources[0][1]) if all(m in s for _, s in sources[1:])]
    if not allowed:
        problems.add(
            "GPU model",
            "no GPU model is allowed by all of "
            + ", ".join(f"{w} ({'|'.join(s) or 'none'})" for w, s in sources)
            + ": make them agree",
        )
    return tuple(allowed)


def _gpu_selection(annotations: dict[str, str], problems: Problems) -> GpuSelection | None:
    """HAMi's GPU selection annotations (``nvidia.com/use-gpuuuid`` and the others), checked."""
    if not any(k in annotations for k in names.GPU_SELECTION):
        return None
    lists: dict[str, tuple[str, ...]] = {}
    for key in names.GPU_SELECTION:
        raw = annotations.get(key)
        if raw is None:
            continue
        entries, msg = validation.selection_list(key, raw)
        if msg:
            problems.add(f"annotation {key}", msg)
            continue
        lists[key] = entries
    sel = GpuSelection(use_ids=lists.get(names.GPU_USE_UUID, ()), avoid_ids=lists.get(names.GPU_NOUSE_UUID, ()),
                       use_types=lists.get(names.GPU_USE_TYPE, ()), avoid_types=lists.get(names.GPU_NOUSE_TYPE, ()))
    for what, use, avoid in (("uuid", sel.use_ids, sel.avoid_ids), ("type", sel.use_types, sel.avoid_types)):
        msg = validation.selection_overlap(what, use, avoid)
        if msg:
            problems.add("GPU selection", msg)
    return sel if lists else None


def _group(labels: dict[str, str], annotations: dict[str, str], problems: Problems) -> GroupRef | None:
    def pair(src: dict[str, str], name_key: str, count_key: str, kind: str) -> tuple[str | None, int | None]:
        name = src.get(name_key) or None
        raw = src.get(count_key) or None
        msg = validation.group_complete(name, raw, f"{kind} {name_key}", f"{kind} {count_key}")
        if msg:
            problems.add("group", msg)
            return None, None
        count = None
        if raw is not None:
            count, msg = validation.positive_int_text(f"{kind} {count_key}", raw)
            if msg:
                problems.add("group", msg)
                return None, None
        return name, count

    misplaced = validation.group_keys_misplaced(labels, annotations)
    if misplaced:
        problems.extend("group", misplaced)
        return None
    name, replicas = pair(labels, names.GROUP_NAME, names.GROUP_REPLICA, "label")
    gang, min_available = pair(annotations, names.GANG_NAME, names.GANG_MIN_AVAILABLE, "annotation")
    msgs = validation.group_consistent(name, replicas, gang, min_available)
    if msgs:
        problems.extend("group", msgs)
        return None
    if name is not None and replicas is not None:
        return GroupRef(name=name, replicas=replicas, gang_name=gang, min_available=min_available)
    if gang is not None and min_available is not None:
        return GroupRef(name=gang, replicas=min_available, gang_name=gang, min_available=min_available)
    return None


Row = tuple[str, dict[str, Any], list[str], list[Dialect]]  # a container's name, resources, dialects, readers


def _section(pod: dict[str, Any], key: str, problems: Problems) -> dict[str, Any]:
    """``pod[key]`` when it is a mapping (else a problem, unless absent, and an empty one)."""
    value = pod.get(key)
    if isinstance(value, dict):
        return value
    if value is not None:
        problems.add(key, "must be a mapping")
    return {}


def _container_rows(spec: dict[str, Any], problems: Problems) -> list[Row]:
    """Each app container's name, resources and the dialect(s) it asks in."""
    raw_containers = spec.get("containers")
    if raw_containers is None:
        raw_containers = []
    if not isinstance(raw_containers, list):
        problems.add("spec.containers", "must be a list of containers")
        raw_containers = []
    rows: list[Row] = []
    for i, c in enumerate(raw_containers):
        if not isinstance(c, dict):
            problems.add(f"spec.containers[{i}]", "must be a mapping with name and resources")
            rows.append((f"#{i}", {}, [], []))
            continue
        name = c.get("name")
        if not isinstance(name, str) or not name:
            problems.add(f"spec.containers[{i}]", "name is missing")
            name = f"#{i}"
        where = f"container {name!r}"
        resources = container_resources(c, where, problems)
        problems.extend(where, prefixes.refusals(k for k, v in resources.items() if v not in ZERO))
        asked, readers = dialects.dialects_in(resources)
        msg = validation.one_dialect(asked, "container")
        if msg:
            problems.add(where, msg)
            asked, readers = [], []
        rows.append((name, resources, asked, readers))
    return rows


def _app_containers(rows: list[Row], annotations: dict[str, str], problems: Problems) -> list[ContainerRequest]:
    """The containers' requests (with each asked dialect's pod-level input, e.g. mGPU's card counts
    from the pod's annotation)."""
    contexts: dict[str, Any] = {}
    for _, _, _, readers in rows:
        for d in readers:
            if d.name not in contexts:
                contexts[d.name] = d.pod_context(annotations, len(rows), problems)
    containers: list[ContainerRequest] = []
    for i, (name, resources, _, readers) in enumerate(rows):
        where = f"container {name!r}"
        devices: list[DeviceRequest] = []
        for d in readers:
            devices += d.read(resources, where, problems, contexts[d.name], i)
        containers.append(ContainerRequest(name=name, devices=tuple(devices)))
    return containers


def _init_containers(spec: dict[str, Any], problems: Problems) -> tuple[list[ContainerRequest], list[str]]:
    """Each init container's requests (read in its dialect, with no pod-level input) and dialects."""
    init = spec.get("initContainers")
    out: list[ContainerRequest] = []
    asked_in: list[str] = []
    for i, c in enumerate(init if isinstance(init, list) else []):
        if not isinstance(c, dict):
            problems.add(f"spec.initContainers[{i}]", "must be a mapping with name and resources")
            continue
        raw_name = c.get("name")
        name = raw_name if isinstance(raw_name, str) and raw_name else f"#{i}"
        where = f"init container {name!r}"
        resources = container_resources(c, where, problems)
        problems.extend(where, prefixes.refusals(k for k, v in resources.items() if v not in ZERO))
        asked, readers = dialects.dialects_in(resources)
        msg = validation.one_dialect(asked, "container")
        if msg:
            problems.add(where, msg)
            readers = []
        devices: list[DeviceRequest] = []
        for d in readers:
            if not d.init_containers:
                problems.add(where, validation.init_container_devices(d.name, sorted(
                    k for k, v in resources.items() if k in d.resource_names and v not in ZERO)))
                continue
            devices += d.read(resources, where, problems, None, i)
        asked_in += asked if not msg else []
        out.append(ContainerRequest(name=name, devices=tuple(devices), restartable=c.get("restartPolicy") == "Always"))
    return out, asked_in


def _pod_dialect(rows: list[Row], init_dialects: list[str], problems: Problems) -> str:
    """The one dialect of the pod (one carried by another container's dialect, as nvidia.com/gpu
    beside Koordinator's rdma/fpga, counts as the carrier)."""
    pod_dialects = dialects.pod_dialects([d for _, _, ds, _ in rows for d in ds] + init_dialects)
    msg = validation.one_dialect(pod_dialects, "pod")
    if msg:
        problems.add("Pod", msg)
    return pod_dialects[0] if pod_dialects and not msg else dialects.DEFAULT


def _priority(spec: dict[str, Any], problems: Problems) -> tuple[int, bool]:
    """``spec.priority`` and whether the pod may preempt (``spec.preemptionPolicy``)."""
    priority = spec.get("priority")
    if priority is None:
        priority = 0
    elif isinstance(priority, bool) or not isinstance(priority, int):
        problems.add("spec.priority", f"must be a whole number, got {priority!r}")
        priority = 0
    preemption = spec.get("preemptionPolicy")
    if preemption not in (None, "PreemptLowerPriority", "Never"):
        problems.add("spec.preemptionPolicy", f"must be PreemptLowerPriority or Never, got {preemption!r}")
    return priority, preemption != "Never"


def read_pod(pod: Any) -> tuple[PodRequest | None, Problems]:
    """Read ``pod``; never raises. The request is None only when the pod is not a mapping."""
    problems = Problems()
    if not isinstance(pod, dict):
        problems.add("Pod", "a Pod must be a mapping with metadata and spec")
        return None, problems
    meta = _section(pod, "metadata", problems)
    spec = _section(pod, "spec", problems)
    labels = _str_map(meta.get("labels"), "metadata.labels", problems)
    annotations = _str_map(meta.get("annotations"), "metadata.annotations", problems)
    # the containers' resources and dialects first: the mGPU card counts depend on them
    rows = _container_rows(spec, problems)
    containers = _app_containers(rows, annotations, problems)
    init_containers, init_dialects = _init_containers(spec, problems)
    cpu, memory = node_requests(spec, problems)
    dialect = _pod_dialect(rows, init_dialects, problems)
    msg = validation.one_card_per_pod(dialect, dialects.dialect_of(dialect), containers + init_containers)
    if msg:
        problems.add("Pod", msg)

    policy = annotations.get(names.COMPUTE_POLICY)
    msg = validation.compute_policy(policy)
    if msg:
        problems.add(f"annotation {names.COMPUTE_POLICY}", msg)
        policy = None
    priority, preempts = _priority(spec, problems)

    ns = meta.get("namespace")
    pod_name = meta.get("name") or meta.get("generateName") or ""
    request = PodRequest(
        namespace=ns if isinstance(ns, str) and ns else "default",
        name=pod_name if isinstance(pod_name, str) else str(pod_name),
        uid=str(meta.get("uid") or ""),
        containers=tuple(containers),
        init_containers=tuple(init_containers) if any(c.devices for c in init_containers) else (),
        dialect=dialect,
        compute_policy=policy,
        gpu_models=_gpu_models(spec, annotations, problems),
        gpu_selection=_gpu_selection(annotations, problems),
        cpu_milli=cpu,
        memory_bytes=memory,
        priority=priority,
        preempts=preempts,
        group=_group(labels, annotations, problems),
    )
    msg = validation.multi_share_policy(policy, request.multi_card_share())
    if msg:
        problems.add(f"annotation {names.COMPUTE_POLICY}", msg)
    return request, problems


def parse_pod(pod: Any) -> PodRequest:
    """Read ``pod`` (a v1 Pod dict). Raises :class:`~devshare.model.errors.InvalidRequest` with every
    problem found (what is wrong, where, how to fix it)."""
    request, problems = read_pod(pod)
    problems.raise_if_any()
    assert request is not None  # read_pod records a problem whenever it returns None
    return request


def validate_pod(pod: Any) -> list[str]:
    """Every problem of ``pod`` (a v1 Pod dict), each a sentence naming where and how to fix it;
    empty when the pod can be scheduled. Never raises.

    Besides the parse rules, admission refuses a pod created with ``spec.nodeName`` that asks for
    devices (unless it already carries a devshare allocation, i.e. it is being restored)."""
    try:
        request, problems = read_pod(pod)
        if request is not None and isinstance(pod, dict):
            spec = pod.get("spec")
            meta = pod.get("metadata")
            ann = meta.get("annotations") if isinstance(meta, dict) else None
            allocated = isinstance(ann, dict) and names.ALLOCATION in ann
            node_name = spec.get("nodeName") if isinstance(spec, dict) else None
            msg = validation.node_name_bypass(node_name, request.has_devices(), allocated)
            if msg:
                problems.add("spec.nodeName", msg)
        return problems.messages()
    except Exception as e:  # a bug in a rule must not turn into a 500 at admission
        return [f"the pod could not be read ({type(e).__name__}: {e}); check its spec"]
