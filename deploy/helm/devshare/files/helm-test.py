"""`helm test`: devshare's extender, webhook and node agents answer (the chart's test hook runs this).

Standard library only (the devshare image's Python). Each check prints one line; the exit code is 1 when
any fails. The API server, the token and the addresses come from the environment, so the same script
runs in the test pod and against any API server (tests/e2e/test_helm.py):

- NAMESPACE: the release namespace; API (default: https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT),
  TOKEN_FILE, CA_FILE (default: the pod's ServiceAccount files).
- CHECK_SCHEDULER, CHECK_WEBHOOK, CHECK_AGENT: "1" for the components the release installs.
- METRICS_PORT: the extender's read-only listener (0: none); WEBHOOK_CA: the webhook's CA (ca.crt of its
  Secret); WEBHOOK_ADDRESS, METRICS_ADDRESS: host:port to connect to instead of the Services' names.
"""

from __future__ import annotations

import http.client
import json
import os
import ssl
import sys
from typing import Any

SA = "/var/run/secrets/kubernetes.io/serviceaccount"
NS = os.environ.get("NAMESPACE", "devshare-system")


class _Conn(http.client.HTTPSConnection):
    """HTTPS to ``address`` checking the certificate against ``name`` (a Service's DNS name)."""

    def __init__(self, address: str, name: str, ctx: ssl.SSLContext) -> None:
        host, _, port = address.rpartition(":")
        super().__init__(host, int(port), timeout=10, context=ctx)
        self._name, self._ctx = name, ctx

    def connect(self) -> None:
        http.client.HTTPConnection.connect(self)
        self.sock = self._ctx.wrap_socket(self.sock, server_hostname=self._name)


def _get(conn: http.client.HTTPConnection, path: str, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    try:
        conn.request("GET", path, headers=headers or {})
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


def api(path: str) -> Any:
    server = os.environ.get("API") or (f"https://{os.environ['KUBERNETES_SERVICE_HOST']}:"
                                       f"{os.environ['KUBERNETES_SERVICE_PORT']}")
    address = server.removeprefix("https://")
    ctx = ssl.create_default_context(cafile=os.environ.get("CA_FILE", f"{SA}/ca.crt"))
    with open(os.environ.get("TOKEN_FILE", f"{SA}/token")) as f:
        token = f.read().strip()
    host = address.rpartition(":")[0]
    status, body = _get(_Conn(address, host, ctx), path, {"Authorization": f"Bearer {token}"})
    if status != 200:
        raise RuntimeError(f"GET {path}: HTTP {status}: {body[:200]!r}")
    return json.loads(body)


def check_scheduler() -> str:
    port = int(os.environ.get("METRICS_PORT", "0") or 0)
    if port:  # the extender's own answer, on its read-only listener
        address = os.environ.get("METRICS_ADDRESS") or f"devshare-scheduler-metrics.{NS}.svc:{port}"
        host, _, p = address.rpartition(":")
        status, body = _get(http.client.HTTPConnection(host, int(p), timeout=10), "/readyz")
        if status != 200:
            raise RuntimeError(f"the extender's /readyz answered {status}: {body[:200]!r}")
    d = api(f"/apis/apps/v1/namespaces/{NS}/deployments/devshare-scheduler")
    ready = (d.get("status") or {}).get("readyReplicas") or 0
    if ready < 1:  # the extender container's readiness probe is its /readyz (synced with the cluster)
        raise RuntimeError("no devshare-scheduler pod is ready: its extender has not answered /readyz "
                           f"(kubectl -n {NS} logs deploy/devshare-scheduler -c extender)")
    return f"extender: {ready} scheduler pod(s) ready" + (f", /readyz answered on port {port}" if port else "")


def check_webhook() -> str:
    name = f"devshare-webhook.{NS}.svc"
    ctx = ssl.create_default_context(cafile=os.environ.get("WEBHOOK_CA", "/webhook-tls/ca.crt"))
    status, body = _get(_Conn(os.environ.get("WEBHOOK_ADDRESS") or f"{name}:443", name, ctx), "/readyz")
    if status != 200:
        raise RuntimeError(f"the webhook's /readyz answered {status}: {body[:200]!r}")
    return f"webhook: {name} answered /readyz over TLS its CA verifies"


def check_agent() -> str:
    ds = api(f"/apis/apps/v1/namespaces/{NS}/daemonsets/devshare-agent").get("status") or {}
    pods = api(f"/api/v1/namespaces/{NS}/pods?labelSelector=app.kubernetes.io%2Fname%3Ddevshare-agent")["items"]
    nodes = sorted({p["spec"]["nodeName"] for p in pods if p.get("spec", {}).get("nodeName")})
    missing = []
    for node in nodes:  # each agent reports its node's Device: the agent answered
        try:
            api(f"/apis/devshare.io/v1alpha1/devices/{node}")
        except RuntimeError:
            missing.append(node)
    if missing:
        raise RuntimeError(f"no Device object for node(s) {', '.join(missing)}: their agent has not reported "
                           f"(kubectl -n {NS} logs ds/devshare-agent)")
    return (f"agents: {len(nodes)} node(s) reported their Device ({ds.get('numberReady', 0)} of "
            f"{ds.get('desiredNumberScheduled', 0)} agent pods ready)")


def main() -> int:
    failed = 0
    for flag, check in (("CHECK_SCHEDULER", check_scheduler), ("CHECK_WEBHOOK", check_webhook),
                        ("CHECK_AGENT", check_agent)):
        if os.environ.get(flag) != "1":
            continue
        try:
            print(f"ok: {check()}")
        except Exception as e:  # one line per failed check, never a stack trace
            failed += 1
            print(f"FAILED: {check.__name__.removeprefix('check_')}: {e}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
