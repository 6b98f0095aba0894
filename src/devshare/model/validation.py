"""The pod-level rules a pod's device request must follow, one small function each.

Each dialect's own rules live in its module (:mod:`devshare.model.dialects`); these are the rules
about the pod as a whole (one dialect per pod, init containers, spec.nodeName, compute policy,
groups and gangs). The pod reader (:mod:`devshare.model.pod`) calls them while it parses, so there
is one implementation: ``parse_pod`` raises the problems found, ``validate_pod`` returns them all.
Each rule returns the message(s) for a person (what is wrong and how to fix it), or nothing when
the value is fine; the caller adds where.

Sources: seed 000's webhook section, seed 003 (groups and gang), DESIGN.md.
"""

from __future__ import annotations

from typing import Any

from devshare.model import names

# ----------------------------------------------------------------------------------------------
# Pod level


def one_dialect(dialects: list[str], what: str) -> str | None:
    """One container (``what="container"``) or pod (``"pod"``) asks in one dialect."""
    distinct = sorted(set(dialects))
    if len(distinct) <= 1:
        return None
    return (
        f"the {what} asks for devices in several dialects ({', '.join(distinct)}), whose allocations "
        f"are written differently: use one of them for the whole {what}"
    )


def init_container_devices(dialect: str, asked: list[str]) -> str:
    """A dialect whose node side gives init containers no devices (Volcano's vGPU plugin reads app
    containers only): kubelet could, the node side cannot."""
    return (
        f"init container asks for {', '.join(asked)}: the {dialect} node side gives devices to app containers "
        "only; move the request to a container in spec.containers"
    )


def one_card_per_pod(dialect_name: str, dialect: Any, containers: Any) -> str | None:
    """A dialect that records one card per pod (Volcano's gpushare index) needs the pod's devices
    asked in one container (devshare places each container's ask on its own)."""
    if dialect is None or not getattr(dialect, "one_card_per_pod", False):
        return None
    asking = [c.name for c in containers if c.devices and not getattr(c, "restartable", False)]
    if len(asking) <= 1:
        return None
    return (f"containers {', '.join(repr(n) for n in asking)} each ask for a card, but {dialect_name} records one "
            "card for the whole pod: ask for the memory in one container")


def node_name_bypass(node_name: Any, has_devices: bool, allocated: bool) -> str | None:
    """A pod created with spec.nodeName skips the scheduler, so its devices would never be allocated."""
    if not has_devices or not node_name or allocated:
        return None
    return (
        f"is set to {node_name!r}, which bypasses the scheduler, so no device would be "
        "allocated: remove spec.nodeName and pin the node with a nodeSelector on kubernetes.io/hostname"
    )


def compute_policy(value: Any) -> str | None:
    if value is None or value in names.COMPUTE_POLICIES:
        return None
    return (
        f"annotation {names.COMPUTE_POLICY}={value!r} is not a compute policy: use one of "
        f"{', '.join(names.COMPUTE_POLICIES)}, or remove it to fit any node"
    )


def multi_share_policy(policy: str | None, multi_card_share: bool) -> str | None:
    """Seed 000: one container over several shared cards needs the native-burst-share policy."""
    if not multi_card_share or policy is None or policy == names.MULTI_SHARE_POLICY:
        return None
    return (
        f"a container spreads a share over several GPUs, which needs the {names.MULTI_SHARE_POLICY} "
        f"compute policy, but annotation {names.COMPUTE_POLICY} asks for {policy!r}: set it to "
        f"{names.MULTI_SHARE_POLICY} or remove it"
    )


def positive_int_text(key: str, value: Any) -> tuple[int | None, str | None]:
    """A label/annotation holding a count (replica, min-available): a whole number >= 1."""
    try:
        n = int(str(value).strip(), 10)
    except ValueError:
        return None, f'{key}={value!r} is not a whole number: write the number of pods, e.g. "4"'
    if n < 1:
        return None, f"{key}={value!r} must be 1 or more"
    return n, None


def group_consistent(
    name: str | None, replicas: int | None, gang_name: str | None, min_available: int | None
) -> list[str]:
    """Seed 003: the group label and the gang annotation, when both are set, must agree."""
    out: list[str] = []
    if name is not None and gang_name is not None and name != gang_name:
        out.append(
            f"label {names.GROUP_NAME}={name!r} and annotation {names.GANG_NAME}={gang_name!r} "
            "must be the same: give both the job's name"
        )
    if replicas is not None and min_available is not None and replicas != min_available:
        out.append(
            f"label {names.GROUP_REPLICA}={replicas} and annotation {names.GANG_MIN_AVAILABLE}="
            f"{min_available} must be the same: both are the job's number of pods"
        )
    return out


def group_keys_misplaced(labels: dict[str, str], annotations: dict[str, str]) -> list[str]:
    """Seed 003 reads the group from labels and the gang from annotations (as Koordinator does): a key
    written in the other place would silently be ignored, and the pod placed alone (issue 40: gang
    keys written as labels placed two of three members), so it is refused with the fix."""
    out: list[str] = []
    for key in (names.GANG_NAME, names.GANG_MIN_AVAILABLE):
        if key in labels and key not in annotations:
            out.append(f"{key} is a label here, but gang keys are read from annotations: move it to "
                       "metadata.annotations (as a label it would be ignored and the pod placed alone)")
    for key in (names.GROUP_NAME, names.GROUP_REPLICA):
        if key in annotations and key not in labels:
            out.append(f"{key} is an annotation here, but group keys are read from labels: move it to "
                       "metadata.labels (as an annotation it would be ignored and the pod placed alone)")
    return out


def group_complete(name: str | None, count: str | None, name_key: str, count_key: str) -> str | None:
    """A group (or gang) needs both its name and its count (the raw label/annotation values)."""
    if (name is None) == (count is None):
        return None
    missing, given = (count_key, name_key) if count is None else (name_key, count_key)
    return f"{given} is set but {missing} is not: set both (the job's name and its number of pods)"


# ----------------------------------------------------------------------------------------------
# GPU selection (HAMi's annotations)


def selection_list(key: str, raw: str) -> tuple[tuple[str, ...], str | None]:
    """A comma-separated list of GPU ids or types: each entry non-empty (spaces around it dropped)."""
    entries = [e.strip() for e in raw.split(",")]
    if not any(entries):
        example = "GPU-98583a5c-c155-9cf6-f955-03c189d3dbfb" if "uuid" in key else "A100,H100"
        return (), (f"is empty: list the GPU {'ids' if 'uuid' in key else 'types'}, comma-separated "
                    f"(e.g. {example}), or remove it")
    if not all(entries):
        return (), f"has an empty entry in {raw!r}: separate the entries with single commas"
    if "uuid" in key and any(any(ch.isspace() for ch in e) for e in entries):
        return (), f"has a space inside an id in {raw!r}: GPU ids (UUIDs) hold no spaces"
    return tuple(dict.fromkeys(entries)), None


def selection_overlap(what: str, use: tuple[str, ...], avoid: tuple[str, ...]) -> str | None:
    """The same id or type both used and avoided is a contradiction."""
    both = [e for e in use if e.upper() in {a.upper() for a in avoid}]
    if not both:
        return None
    return (f"{', '.join(both)} is listed in both nvidia.com/use-gpu{what} and nvidia.com/nouse-gpu{what}: "
            "keep it in one of them")
