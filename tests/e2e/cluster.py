"""A real control plane on 127.0.0.1 for the end-to-end suite.

etcd, kube-apiserver (its own CA and serving certificate, client certificates, RBAC, service-account
tokens) and kube-scheduler are real binaries built by ``build-binaries.sh``. devshare is installed as a
user installs it (``kubectl apply -k deploy/...``) and its processes run with the identity of their
ServiceAccounts from deploy/ (a token from the TokenRequest API), so a verb missing from a ClusterRole
fails the suite. There is no kubelet: Nodes are objects whose status the tests write.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
BUILD = Path(__file__).with_name("build-binaries.sh")
DEVSHARE = [sys.executable, "-m", "devshare.cli.main"]
SCHEDULER_NAME = "devshare-scheduler"
SYSTEM_NS = "devshare-system"


class ControlPlaneError(RuntimeError):
    """The control plane could not be built or started; the message holds the cause."""


def binaries() -> Path:
    """The folder with kube-apiserver, kube-scheduler, kubectl, etcd and helm (built once, then cached;
    ``DEVSHARE_E2E_BIN`` names a folder of binaries built elsewhere instead)."""
    given = os.environ.get("DEVSHARE_E2E_BIN")
    if given:
        return Path(given)
    proc = subprocess.run(["bash", str(BUILD)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise ControlPlaneError(f"{BUILD.name} failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
    return Path(proc.stdout.strip().splitlines()[-1])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def extender_bind(port: int, ns: str, name: str, uid: str, node: str) -> str:
    """Ask the extender on ``port`` to bind a pod, as kube-scheduler does; its answer's Error ("": bound)."""
    body = json.dumps({"PodName": name, "PodNamespace": ns, "PodUID": uid, "Node": node}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/bind", data=body,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return str(json.load(r)["Error"])


WAIT_FLOOR = 120.0  # seconds every wait allows at least: a hang guard, never a measure of speed (issue 37)


def wait_until(check: Callable[[], Any], *, timeout: float = 30.0, interval: float = 0.1, what: str = "") -> Any:
    """Poll ``check`` until it returns a truthy value; raise with ``what`` when ``timeout`` passes (never
    before :data:`WAIT_FLOOR`: on a loaded machine a control plane may take long to act)."""
    timeout = max(timeout, WAIT_FLOOR)
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = check()
            if value:
                return value
        except Exception as e:
            last = e
        time.sleep(interval)
    detail = f" (last: {last})" if last else ""
    raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what or check}{detail}")


# --- certificates (openssl, as `devshare webhook cert` does) ---------------------------------------

def _openssl(*args: str, cwd: Path) -> None:
    proc = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True)
    if proc.returncode:
        raise ControlPlaneError(f"openssl {' '.join(args)}: {proc.stderr.strip()}")


def _sign(pki: Path, name: str, subject: str, *, sans: str = "", client: bool = False) -> None:
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
             "-subj", subject, cwd=pki)
    ext = ["basicConstraints=CA:FALSE", "keyUsage=digitalSignature,keyEncipherment",
           f"extendedKeyUsage={'clientAuth' if client else 'serverAuth'}"]
    if sans:
        ext.append(f"subjectAltName={sans}")
    (pki / f"{name}.ext").write_text("\n".join(ext) + "\n")
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
             "-out", f"{name}.crt", "-days", "2", "-extfile", f"{name}.ext", cwd=pki)


def make_pki(pki: Path) -> None:
    pki.mkdir(parents=True, exist_ok=True)
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt",
             "-days", "2", "-subj", "/CN=devshare-e2e-ca", cwd=pki)
    _sign(pki, "apiserver", "/CN=kube-apiserver",
          sans="IP:127.0.0.1,IP:10.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default.svc")
    _sign(pki, "admin", "/O=system:masters/CN=e2e-admin", client=True)
    _sign(pki, "webhook", "/CN=devshare-webhook",
          sans="IP:127.0.0.1,DNS:devshare-webhook.devshare-system.svc")
    _openssl("genrsa", "-out", "sa.key", "2048", cwd=pki)
    _openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=pki)


def kubeconfig(server: str, ca: Path, *, token: str | None = None, cert: Path | None = None,
               key: Path | None = None) -> dict[str, Any]:
    user: dict[str, Any] = {"token": token} if token else {"client-certificate": str(cert), "client-key": str(key)}
    return {
        "apiVersion": "v1", "kind": "Config", "current-context": "e2e",
        "clusters": [{"name": "e2e", "cluster": {"server": server, "certificate-authority": str(ca)}}],
        "users": [{"name": "e2e", "user": user}],
        "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": "e2e"}}],
    }


# --- processes -------------------------------------------------------------------------------------

@dataclass
class Process:
    name: str
    args: list[str]
    log: Path
    env: dict[str, str] | None = None
    popen: subprocess.Popen[bytes] | None = None
    stopped: str = ""  # how the last stop went: on SIGTERM in time, or killed

    def start(self) -> Process:
        out = self.log.open("ab")
        self.popen = subprocess.Popen(self.args, stdout=out, stderr=subprocess.STDOUT, env=self.env,
                                      start_new_session=True, cwd=REPO)
        out.close()
        return self

    @property
    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def signal(self, sig: int) -> None:
        if self.alive:
            assert self.popen is not None
            os.killpg(self.popen.pid, sig)

    def stop(self, timeout: float = 10.0) -> None:
        if self.popen is None:
            return
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGCONT)
                os.killpg(self.popen.pid, signal.SIGTERM)
            t0 = time.monotonic()
            try:
                self.popen.wait(timeout)
                self.stopped = f"exited {time.monotonic() - t0:.1f} s after SIGTERM"
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.popen.pid, signal.SIGKILL)
                self.popen.wait()
                self.stopped = f"killed: SIGTERM unanswered for {timeout:.0f} s"

    def tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])
        except FileNotFoundError:
            return ""


@dataclass
class ControlPlane:
    """etcd + kube-apiserver (+ kube-scheduler, devshare's extender and webhook once installed)."""

    root: Path
    bin: Path
    processes: dict[str, Process] = field(default_factory=dict)
    server: str = ""
    admin: Path = Path()
    extender_port: int = 0
    webhook_port: int = 0
    api_args: tuple[str, ...] = ()  # more kube-apiserver flags (a test that needs one starts its own plane)

    # --- plumbing ----------------------------------------------------------------------------------
    @property
    def pki(self) -> Path:
        return self.root / "pki"

    def spawn(self, name: str, args: list[str], env: dict[str, str] | None = None) -> Process:
        old = self.processes.get(name)
        if old is not None:
            old.stop()
        proc = Process(name, args, self.root / f"{name}.log", env=env).start()
        self.processes[name] = proc
        return proc

    def kubectl(self, *args: str, input: str | None = None, as_: Path | None = None, check: bool = True,
                timeout: float = 120) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([str(self.bin / "kubectl"), "--kubeconfig", str(as_ or self.admin), *args],
                              input=input, capture_output=True, text=True, timeout=timeout, cwd=REPO)
        if check and proc.returncode:
            raise AssertionError(f"kubectl {' '.join(args)} failed: {proc.stderr.strip()}")
        return proc

    def get(self, *args: str) -> Any:
        return json.loads(self.kubectl("get", "-o", "json", *args).stdout)

    def apply(self, objects: list[dict[str, Any]] | dict[str, Any], *, server_side: bool = False) -> None:
        docs = objects if isinstance(objects, list) else [objects]
        flags = ["--server-side", "--force-conflicts"] if server_side else []
        self.kubectl("apply", *flags, "-f", "-", input=yaml.safe_dump_all(docs))

    def write_status(self, kind: str, name: str, status: dict[str, Any], namespace: str | None = None) -> None:
        ns = ["-n", namespace] if namespace else []
        self.kubectl("patch", kind, name, *ns, "--subresource=status", "--type=merge",
                     "-p", json.dumps({"status": status}))

    # --- lifecycle ---------------------------------------------------------------------------------
    def start(self) -> ControlPlane:
        make_pki(self.pki)
        etcd_port, peer_port, api_port = free_port(), free_port(), free_port()
        etcd = self.spawn("etcd", [
            str(self.bin / "etcd"), "--name", "e2e", "--data-dir", str(self.root / "etcd"),
            "--listen-client-urls", f"http://127.0.0.1:{etcd_port}",
            "--advertise-client-urls", f"http://127.0.0.1:{etcd_port}",
            "--listen-peer-urls", f"http://127.0.0.1:{peer_port}",
            "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer_port}",
            "--initial-cluster", f"e2e=http://127.0.0.1:{peer_port}",
            "--unsafe-no-fsync", "--log-level", "warn", "--quota-backend-bytes", str(4 << 30),
        ])
        pki = self.pki
        api = self.spawn("kube-apiserver", [
            str(self.bin / "kube-apiserver"),
            f"--etcd-servers=http://127.0.0.1:{etcd_port}",
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", f"--secure-port={api_port}",
            f"--cert-dir={self.root / 'apiserver-certs'}",
            f"--tls-cert-file={pki / 'apiserver.crt'}", f"--tls-private-key-file={pki / 'apiserver.key'}",
            f"--client-ca-file={pki / 'ca.crt'}",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            "--service-account-issuer=https://kubernetes.default.svc",
            "--authorization-mode=RBAC",
            # no node lifecycle controller runs to lift the not-ready taint this plugin puts on new nodes
            "--disable-admission-plugins=TaintNodesByCondition",
            "--service-cluster-ip-range=10.0.0.0/24",
            "--endpoint-reconciler-type=none",
            "--allow-privileged=true",
            "--max-requests-inflight=2000", "--max-mutating-requests-inflight=1000",
            # /debug/pprof for a benchmark that asks (DEVSHARE_E2E_PROFILING=1); off otherwise, as in a cluster
            f"--profiling={'true' if os.environ.get('DEVSHARE_E2E_PROFILING') else 'false'}",
            "--v=1", *self.api_args,
        ])
        self.server = f"https://127.0.0.1:{api_port}"
        self.admin = self.root / "admin.kubeconfig"
        self.admin.write_text(yaml.safe_dump(kubeconfig(self.server, pki / "ca.crt", cert=pki / "admin.crt",
                                                        key=pki / "admin.key")))

        def ready() -> bool:
            for p in (etcd, api):
                if not p.alive:
                    raise ControlPlaneError(f"{p.name} exited:\n{p.tail()}")
            return self.kubectl("get", "--raw", "/readyz", check=False, timeout=10).returncode == 0

        try:
            wait_until(ready, timeout=120, interval=0.5, what="kube-apiserver /readyz")
            # the bootstrap RBAC roles (system:kube-scheduler, ...) are made by a post-start hook
            wait_until(lambda: self.kubectl("get", "clusterrole", "system:kube-scheduler", check=False).returncode == 0,
                       timeout=60, what="bootstrap RBAC")
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for proc in reversed(list(self.processes.values())):
            proc.stop()

    def logs(self) -> str:
        return "\n".join(f"--- {p.name} ---\n{p.tail()}" for p in self.processes.values())

    # --- identities ----------------------------------------------------------------------------------
    def token_kubeconfig(self, account: str, namespace: str = SYSTEM_NS, *, on_node: str | None = None) -> Path:
        """A kubeconfig holding a TokenRequest token of the ServiceAccount (its RBAC, nothing more).
        ``on_node``: the token is bound to a pod of that ServiceAccount on that node, as a DaemonSet
        pod's is (the API server then puts the node in the user's extra,
        ``authentication.kubernetes.io/node-name``); the pod is made here (no kubelet runs it)."""
        bind: list[str] = []
        if on_node is not None:
            pod = f"{account}-{on_node}"
            self.apply({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": pod, "namespace": namespace},
                        "spec": {"serviceAccountName": account, "nodeName": on_node,
                                 "containers": [{"name": "agent", "image": "devshare:0.1.0"}]}})
            uid = self.kubectl("get", "pod", pod, "-n", namespace, "-o", "jsonpath={.metadata.uid}").stdout.strip()
            bind = ["--bound-object-kind=Pod", f"--bound-object-name={pod}", f"--bound-object-uid={uid}"]
        token = self.kubectl("create", "token", account, "-n", namespace, "--duration=48h", *bind).stdout.strip()
        path = self.root / f"{namespace}-{account}{'-' + on_node if on_node else ''}.kubeconfig"
        path.write_text(yaml.safe_dump(kubeconfig(self.server, self.pki / "ca.crt", token=token)))
        return path

    def cert_kubeconfig(self, user: str, groups: tuple[str, ...] = ()) -> Path:
        """A kubeconfig with a client certificate for ``user`` (signed by this plane's CA): the identity
        of a component that authenticates by certificate, as kube-scheduler (system:kube-scheduler) does."""
        name = user.replace(":", "-")
        subject = "".join(f"/O={g}" for g in groups) + f"/CN={user}"
        _sign(self.pki, name, subject, client=True)
        path = self.root / f"{name}.kubeconfig"
        path.write_text(yaml.safe_dump(kubeconfig(self.server, self.pki / "ca.crt", cert=self.pki / f"{name}.crt",
                                                  key=self.pki / f"{name}.key")))
        return path

    # --- devshare, installed as a user installs it ---------------------------------------------------
    def install(self) -> None:
        """kubectl apply -k deploy/scheduler, deploy/dra and deploy/agent; the webhook is registered by
        start_webhook."""
        self.kubectl("apply", "-k", str(DEPLOY / "scheduler"))
        self.kubectl("apply", "-k", str(DEPLOY / "dra"))  # v1.37 serves resource.k8s.io/v1
        self.kubectl("apply", "-k", str(DEPLOY / "agent"))
        wait_until(lambda: self.kubectl("get", "crd", "devices.devshare.io", "-o",
                                        "jsonpath={.status.conditions[?(@.type=='Established')].status}"
                                        ).stdout == "True", timeout=60, what="Device CRD established")

    def start_extender(self, *extra: str, name: str = "extender", port: int | None = None,
                       env: dict[str, str] | None = None) -> Process:
        port = port or self.extender_port or free_port()
        if name == "extender":
            self.extender_port = port
        cfg = self.token_kubeconfig("devshare-scheduler")
        # deploy/'s configuration file, as its Deployment mounts it (the ConfigMap devshare-config)
        shipped = DEPLOY / "scheduler" / "config" / "devshare-config.yaml"
        config = [] if "--config" in extra else ["--config", str(shipped)]
        proc = self.spawn(name, [*DEVSHARE, "extender", "--kubeconfig", str(cfg), "--namespace", SYSTEM_NS,
                                 "--port", str(port), "--host", "127.0.0.1", *config, *extra],
                          env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})})
        wait_until(lambda: _ok(f"http://127.0.0.1:{port}/readyz") or _dead(proc), timeout=60,
                   what=f"{name} /readyz")
        if not proc.alive:
            raise ControlPlaneError(f"{name} exited:\n{proc.tail()}")
        return proc

    def scheduler_config(self, extender_port: int, *, scheduler_name: str | None = None,
                         lease_seconds: tuple[int, int, int] | None = None, file: str = "scheduler-config.yaml"
                         ) -> Path:
        """deploy/scheduler/config with the extender URL pointed at the test's port; the client
        connection uses the scheduler's ServiceAccount token (in a pod: the in-cluster config).
        ``scheduler_name``: the profile's schedulerName, which also names its Lease (a second set of
        replicas beside the session's); ``lease_seconds``: (duration, renew deadline, retry period)."""
        cfg = yaml.safe_load((DEPLOY / "scheduler" / "config" / "scheduler-config.yaml").read_text())
        for ext in cfg["extenders"]:
            ext["urlPrefix"] = f"http://127.0.0.1:{extender_port}"
        cfg["clientConnection"] = {"kubeconfig": str(self.token_kubeconfig("devshare-scheduler")),
                                   "qps": 500, "burst": 1000}
        if scheduler_name is not None:
            cfg["profiles"][0]["schedulerName"] = scheduler_name
            cfg["leaderElection"]["resourceName"] = scheduler_name
        if lease_seconds is not None:
            cfg["leaderElection"].update(zip(("leaseDuration", "renewDeadline", "retryPeriod"),
                                             (f"{s}s" for s in lease_seconds), strict=True))
        path = self.root / file
        path.write_text(yaml.safe_dump(cfg))
        return path

    def start_scheduler(self, *, extender_port: int | None = None, name: str = "kube-scheduler",
                        config: Path | None = None, hostname: str | None = None, standby: bool = False) -> Process:
        """kube-scheduler; with ``hostname``, in a UTS namespace of its own under that hostname (as in a
        pod, where the hostname is the pod's name and starts kube-scheduler's Lease identity); with
        ``standby``, ready once it campaigns for its Lease rather than once it holds it."""
        config = config or self.scheduler_config(extender_port or self.extender_port)
        port = free_port()
        args = [str(self.bin / "kube-scheduler"), f"--config={config}",
                "--bind-address=127.0.0.1", f"--secure-port={port}",
                f"--cert-dir={self.root / (name + '-certs')}",
                f"--authentication-kubeconfig={self.admin}",
                f"--authorization-kubeconfig={self.admin}", "--v=2"]
        if hostname is not None:
            if shutil.which("unshare") is None:
                raise ControlPlaneError("running kube-scheduler under a hostname of its own needs unshare "
                                        "(util-linux) and root")
            # unshare execs sh in a new UTS namespace; sh sets the hostname and execs kube-scheduler (one pid)
            args = ["unshare", "--uts", "--", "sh", "-c", 'hostname "$0" && exec "$@"', hostname, *args]
        proc = self.spawn(name, args)
        elects = (yaml.safe_load(config.read_text()).get("leaderElection") or {}).get("leaderElect", True)
        ready = ("attempting to acquire leader lease" if standby else "successfully acquired lease") if elects \
            else "starting kubernetes scheduler"
        wait_until(lambda: _dead(proc) or ready in proc.log.read_text(errors="replace").lower(),
                   timeout=60, what=f"{name} started")
        if not proc.alive:
            raise ControlPlaneError(f"{name} exited:\n{proc.tail()}")
        return proc

    def start_webhook(self) -> Process:
        """The webhook as deploy/webhook runs it, registered through the real admission configuration
        (deploy/webhook/webhooks.yaml with its caBundle; the Service reference becomes a URL, as no
        Service routes to 127.0.0.1 here)."""
        self.kubectl("apply", "-f", str(DEPLOY / "webhook" / "deployment.yaml"))
        self.webhook_port = port = free_port()
        cfg = self.token_kubeconfig("devshare-webhook")
        proc = self.spawn("webhook", [*DEVSHARE, "webhook", "--tls-cert", str(self.pki / "webhook.crt"),
                                      "--tls-key", str(self.pki / "webhook.key"), "--port", str(port),
                                      "--host", "127.0.0.1", "--kubeconfig", str(cfg),
                                      "--scheduler-name", SCHEDULER_NAME],
                          env={**os.environ, "PYTHONUNBUFFERED": "1"})
        docs = self.webhook_configurations(f"https://127.0.0.1:{port}")
        wait_until(lambda: _ok(f"https://127.0.0.1:{port}/readyz", self.pki / "ca.crt") or _dead(proc),
                   timeout=60, what="webhook /readyz")
        if not proc.alive:
            raise ControlPlaneError(f"webhook exited:\n{proc.tail()}")
        self.apply(docs)
        return proc

    def webhook_configurations(self, base_url: str) -> list[dict[str, Any]]:
        """deploy/webhook/webhooks.yaml with this control plane's CA as caBundle and each webhook's
        Service reference turned into ``base_url`` + its path (no Service routes to 127.0.0.1 here)."""
        ca = base64.b64encode((self.pki / "ca.crt").read_bytes()).decode()
        docs = [d for d in yaml.safe_load_all((DEPLOY / "webhook" / "webhooks.yaml").read_text()) if d]
        for doc in docs:
            for hook in doc["webhooks"]:
                path = hook["clientConfig"]["service"]["path"]
                hook["clientConfig"] = {"url": f"{base_url}{path}", "caBundle": ca}
        return docs

    def namespace(self, name: str) -> str:
        """A namespace for test pods, with the ``default`` ServiceAccount the ServiceAccount admission
        plugin looks up (no controller-manager runs here to create it)."""
        self.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}},
                    {"apiVersion": "v1", "kind": "ServiceAccount",
                     "metadata": {"name": "default", "namespace": name}}])
        return name


def _dead(proc: Process) -> bool:
    return not proc.alive


def _ok(url: str, ca: Path | None = None) -> bool:
    """True when ``url`` answers 200 (over TLS verified by ``ca`` when given)."""
    import ssl
    import urllib.request

    ctx = ssl.create_default_context(cafile=str(ca)) if ca is not None else None
    try:
        with urllib.request.urlopen(url, timeout=2, context=ctx) as r:
            return bool(r.status == 200)
    except OSError:
        return False


@contextlib.contextmanager
def control_plane(root: Path, api_args: tuple[str, ...] = ()) -> Iterator[ControlPlane]:
    if shutil.which("openssl") is None:
        raise ControlPlaneError("the e2e suite needs the openssl command (apt-get install openssl)")
    cp = ControlPlane(root=root, bin=binaries(), api_args=api_args).start()
    try:
        yield cp
    finally:
        cp.stop()
