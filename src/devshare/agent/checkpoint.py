"""kubelet's device-plugin checkpoint (``/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint``).

Two formats exist (kubelet ``pkg/kubelet/cm/devicemanager/checkpoint``):

- the old flat one (kubelet <= 1.19): ``"DeviceIDs": ["GPU-a", "GPU-b"]``;
- the NUMA-keyed one (kubelet >= 1.20): ``"DeviceIDs": {"0": ["GPU-a"], "1": ["GPU-b"]}``.

Both are ``{"Data": {"PodDeviceEntries": [{"PodUID", "ContainerName", "ResourceName", "DeviceIDs",
"AllocResp"}], "RegisteredDevices": {...}}, "Checksum": N}``. devshare reads it for two things:
which cards another device plugin already handed out (seed 001: published on the Device object so
the scheduler never hands them out again), and which containers kubelet already allocated for
devshare's own resources (so a restarted agent knows how far a pod's allocation got).
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable
from pathlib import Path
from typing import Any

import msgspec

from devshare.model.errors import InvalidInput

DEFAULT_PATH = Path("/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint")


class CheckpointEntry(msgspec.Struct, frozen=True, kw_only=True):
    pod_uid: str
    container: str
    resource: str
    device_ids: tuple[str, ...]


def _device_ids(raw: Any, *, field: str) -> tuple[str, ...]:
    if raw is None:
        return ()
    if isinstance(raw, list):  # old flat format
        ids = raw
    elif isinstance(raw, dict):  # NUMA-keyed: {"<numa node>": [...]}
        ids = []
        for key in sorted(raw, key=lambda k: (len(str(k)), str(k))):
            part = raw[key]
            if not isinstance(part, list):
                raise InvalidInput(f"DeviceIDs[{key!r}] must be a list of ids", field=field)
            ids.extend(part)
    else:
        raise InvalidInput("DeviceIDs must be a list or a map of NUMA node to list", field=field)
    if not all(isinstance(i, str) for i in ids):
        raise InvalidInput("device ids must be strings", field=field)
    return tuple(ids)


def parse_checkpoint(data: str | bytes | dict[str, Any], *, source: str = "checkpoint") -> list[CheckpointEntry]:
    """The pod device entries of a checkpoint (either format)."""
    if not isinstance(data, dict):
        try:
            data = json.loads(data)
        except json.JSONDecodeError as e:
            raise InvalidInput(f"not valid JSON: {e.msg} (line {e.lineno})", field=source) from None
    if not isinstance(data, dict):
        raise InvalidInput("a kubelet checkpoint must be a JSON object with Data", field=source)
    body = data.get("Data", data)
    if not isinstance(body, dict):
        raise InvalidInput("Data must be an object", field=source)
    raw_entries = body.get("PodDeviceEntries")
    if raw_entries is None:
        raw_entries = []
    if not isinstance(raw_entries, list):
        raise InvalidInput("Data.PodDeviceEntries must be a list", field=source)
    out: list[CheckpointEntry] = []
    for i, raw in enumerate(raw_entries):
        field = f"{source}: Data.PodDeviceEntries[{i}]"
        if not isinstance(raw, dict):
            raise InvalidInput("each entry must be an object", field=field)
        out.append(
            CheckpointEntry(
                pod_uid=str(raw.get("PodUID", "")),
                container=str(raw.get("ContainerName", "")),
                resource=str(raw.get("ResourceName", "")),
                device_ids=_device_ids(raw.get("DeviceIDs"), field=field),
            )
        )
    return out


def read_checkpoint(path: Path = DEFAULT_PATH, *, missing_ok: bool = True) -> list[CheckpointEntry]:
    """The entries of the checkpoint file; none when the file does not exist (no device plugin yet:
    kubelet writes it once a plugin has listed its devices), or FileNotFoundError without ``missing_ok``."""
    try:
        text = path.read_bytes()
    except FileNotFoundError:
        if missing_ok:
            return []
        raise
    return parse_checkpoint(text, source=str(path))


def physical_id(device_id: str) -> str:
    """The card behind a device id: plugins that share a card suffix it (``GPU-x::3``, ``GPU-x-_-3``)."""
    for sep in ("::", "-_-"):
        if sep in device_id:
            return device_id.split(sep, 1)[0]
    return device_id


def held_outside(
    entries: Iterable[CheckpointEntry],
    *,
    known_ids: Collection[str],
    own_resources: Collection[str],
    live_pods: Collection[str] | None = None,
    devshare_pods: Collection[str] = (),
) -> list[dict[str, Any]]:
    """Seed 001's PodDevicesEntry list of the cards held outside devshare.

    Keeps the entries of resources devshare does not serve whose ids name one of this node's
    devices (``known_ids``), of pods still alive (``live_pods``, pod UIDs; None: all) that devshare
    did not place (``devshare_pods``: UIDs of pods with a devshare allocation). Ids are reduced to
    the card's id so that they match the Device object's ``id`` fields.
    """
    out: list[dict[str, Any]] = []
    for e in entries:
        if e.resource in own_resources:
            continue
        if (live_pods is not None and e.pod_uid not in live_pods) or e.pod_uid in devshare_pods:
            continue
        ids: list[str] = []
        for raw in e.device_ids:
            dev = physical_id(raw)
            if dev in known_ids and dev not in ids:
                ids.append(dev)
        if ids:
            out.append(
                {"podUID": e.pod_uid, "containerName": e.container, "resourceName": e.resource, "deviceIDs": ids}
            )
    out.sort(key=lambda d: (d["podUID"], d["containerName"], d["resourceName"]))
    return out
