"""CDI (Container Device Interface) specs for prepared claims: one JSON file per claim in the CDI spec
directory, one CDI device per request of the claim carrying its environment and device nodes.
kubelet passes the fully qualified device names (``gpu.devshare.io/claim=<uid>-<request>``) to the
container runtime, which applies the edits. Files are written atomically (a temporary file renamed
over), so a runtime never reads half a spec."""

from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path

from devshare.agent.envs import ContainerDevices

CDI_DIR = Path("/var/run/cdi")
CDI_VERSION = "0.6.0"
KIND = "gpu.devshare.io/claim"
_UNSAFE = re.compile(r"[^A-Za-z0-9_.:-]")


def device_name(claim_uid: str, request: str) -> str:
    return _UNSAFE.sub("_", f"{claim_uid}-{request}")


class CdiSpecs:
    def __init__(self, directory: Path = CDI_DIR) -> None:
        self.directory = directory

    def path(self, claim_uid: str) -> Path:
        return self.directory / f"{KIND.replace('/', '-')}_{_UNSAFE.sub('_', claim_uid)}.json"

    def write(self, claim_uid: str, requests: dict[str, ContainerDevices]) -> dict[str, str]:
        """Write the claim's spec; returns the fully qualified CDI device id of each request."""
        devices = []
        ids: dict[str, str] = {}
        for request, cd in requests.items():
            name = device_name(claim_uid, request)
            edits: dict[str, object] = {"env": [f"{k}={v}" for k, v in sorted(cd.envs.items())]}
            if cd.device_files:
                edits["deviceNodes"] = [{"path": p} for p in cd.device_files]
            devices.append({"name": name, "containerEdits": edits})
            ids[request] = f"{KIND}={name}"
        spec = {"cdiVersion": CDI_VERSION, "kind": KIND, "devices": devices}
        self.directory.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".devshare-", suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(spec, f, indent=2)
            os.replace(tmp, self.path(claim_uid))
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return ids

    def remove(self, claim_uid: str) -> None:
        self.path(claim_uid).unlink(missing_ok=True)
