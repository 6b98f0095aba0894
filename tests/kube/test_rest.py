"""KubeClient, the one client of the API server, against the fake API server: paths (one function,
every segment quoted, names checked before any request), the Backend's requests, the agent's, lists in
pages, watches, the kubeconfig's credentials (token, token file re-read on 401, exec plugin, client
certificate) over TLS, and errors mapped to the backend's."""

from __future__ import annotations

import asyncio
import json
import ssl
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from devshare.kube.errors import BackendError, Conflict, Gone, NotFound, Unavailable
from devshare.kube.rest import DEVICES, EVENTS, NODES, PAGE, PODS, InvalidName, KubeClient, api_path, load_config
from devshare.model.errors import InvalidInput
from devshare.server.tls import ServingCert, load_server_context, make_serving_cert
from fakeapi.plugin import fake_api, fake_kubeconfig, live_backend  # noqa: F401
from fakeapi.server import FakeApiServer
from support.certs import signed_pair
from support.kube import node, pod
from support.waiting import settled


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> ServingCert:
    return make_serving_cert("api", "default", tmp_path_factory.mktemp("pki"), extra_names=("127.0.0.1",))


async def serving(pki: ServingCert, *, token: str | None = "s3cret", client_ca: bool = False) -> FakeApiServer:
    ctx = load_server_context(pki.cert, pki.key, pki.ca_cert if client_ca else None)
    if client_ca:
        ctx.verify_mode = ssl.CERT_REQUIRED
    return await FakeApiServer(ssl_context=ctx, token=token).start()


@pytest.fixture
async def tls_api(pki: ServingCert) -> AsyncIterator[FakeApiServer]:
    server = await serving(pki)
    try:
        yield server
    finally:
        await server.stop()


def requests_for(server: FakeApiServer, path: Path, pki: ServingCert, user: dict[str, Any] | None = None
                 ) -> KubeClient:
    return KubeClient(load_config(server.write_kubeconfig(path, ca=pki.ca_cert, user=user)), watch_timeout=1)


@pytest.fixture
async def api(tls_api: FakeApiServer, tmp_path: Path, pki: ServingCert) -> AsyncIterator[KubeClient]:
    out = requests_for(tls_api, tmp_path / "kc", pki)
    try:
        yield out
    finally:
        await out.close()


# ---------------------------------------------------------------------------------------------- paths
def test_paths_of_every_resource() -> None:
    assert api_path(PODS) == "/api/v1/pods"
    assert api_path(PODS, namespace="team-a", name="p.1", subresource="binding") == \
        "/api/v1/namespaces/team-a/pods/p.1/binding"
    assert api_path(NODES, name="n1", subresource="status") == "/api/v1/nodes/n1/status"
    assert api_path(DEVICES, name="n1") == "/apis/devshare.io/v1alpha1/devices/n1"
    assert api_path(EVENTS, namespace="x") == "/api/v1/namespaces/x/events"
    with pytest.raises(InvalidName, match="not namespaced"):
        api_path(NODES, namespace="x")


HOSTILE = [
    "a HTTP/1.1\r\nHost: x\r\n\r\nDELETE /api/v1/namespaces/kube-system/pods/victim",  # request splitting
    "../kube-system/pods/victim", "a/b", "a b", "A", "a\x00", "a\nb", "-a", "a-", "é", "", "a" * 254,
    "a?watch=true", "a#b", "%2e%2e",
]


@pytest.mark.parametrize("name", HOSTILE)
def test_a_name_that_is_not_a_kubernetes_name_is_refused(name: str) -> None:
    with pytest.raises(InvalidName, match="no request was sent"):
        api_path(PODS, namespace="default", name=name)
    with pytest.raises(InvalidName, match="not a valid Kubernetes namespace"):
        api_path(PODS, namespace=name, name="a")


@given(st.text(max_size=80))
def test_any_path_is_quoted_and_names_one_object(name: str) -> None:
    """Whatever the name, the path either is refused or has exactly the resource's segments, each
    made only of characters that need no quoting."""
    try:
        path = api_path(PODS, namespace="default", name=name, subresource="binding")
    except InvalidName:
        return
    segments = path.split("/")
    assert segments == ["", "api", "v1", "namespaces", "default", "pods", name, "binding"]
    assert all(c.isascii() and (c.isalnum() or c in "-.") for c in name)


async def test_a_hostile_pod_name_never_reaches_the_api_server(fake_api: FakeApiServer,  # noqa: F811
                                                              live_backend: KubeClient) -> None:  # noqa: F811
    """Issue 37: a PodName holding CRLF was written into the request line and became a second, authenticated
    request of the caller's choosing (it deleted kube-system/victim). Now no request is sent at all."""
    fake_api.put(pod("victim", ns="kube-system"))
    fake_api.put(pod("a"))
    evil = "a/binding HTTP/1.1\r\nHost: x\r\n\r\nDELETE /api/v1/namespaces/kube-system/pods/victim"
    with pytest.raises(InvalidName):
        await live_backend.bind_pod("default", evil, "n1")
    with pytest.raises(InvalidName):
        await live_backend.get_pod("default", evil)
    with pytest.raises(InvalidName):
        await live_backend.delete_pod("kube-system", "victim/../victim")
    with pytest.raises(InvalidName):
        await live_backend.patch_pod_annotations("default\r\n", "a", {"x": "1"})
    assert fake_api.requests == []
    assert fake_api.get("pods", "kube-system/victim") is not None


# ---------------------------------------------------------------------------------------------- the Backend
async def test_pods_are_listed_in_every_namespace_in_pages(fake_api: FakeApiServer,  # noqa: F811
                                                           live_backend: KubeClient) -> None:  # noqa: F811
    for i in range(PAGE + 3):
        fake_api.put(pod(f"p{i}", ns="one" if i % 2 else "two"))
    listed = await live_backend.list("pods")
    assert len(listed.items) == PAGE + 3 and {p["metadata"]["namespace"] for p in listed.items} == {"one", "two"}
    assert listed.resource_version == str(fake_api.store.rv)
    assert all(type(p) is dict for p in listed.items)
    pages = [q for m, p, q in fake_api.requests if p == "/api/v1/pods"]
    assert pages == [{"limit": str(PAGE)}, {"limit": str(PAGE), "continue": str(PAGE)}]


async def test_patch_merges_annotations(fake_api: FakeApiServer, live_backend: KubeClient) -> None:  # noqa: F811
    fake_api.put(pod("a", annotations={"keep": "1", "drop": "2"}))
    out = await live_backend.patch_pod_annotations("default", "a", {"new": "3", "drop": None})
    assert out["metadata"]["annotations"] == {"keep": "1", "new": "3"}
    (_method, path, query), = [r for r in fake_api.requests if r[0] == "PATCH"]
    assert path == "/api/v1/namespaces/default/pods/a" and query == {"fieldManager": "devshare"}
    with pytest.raises(NotFound):
        await live_backend.patch_pod_annotations("default", "nobody", {"x": "1"})
    with pytest.raises(Conflict, match="UID in precondition"):  # another pod under the name now
        await live_backend.patch_pod_annotations("default", "a", {"x": "1"}, uid="another")


async def test_bind_creates_the_binding_once(fake_api: FakeApiServer, live_backend: KubeClient) -> None:  # noqa: F811
    created = fake_api.put(pod("a"))
    with pytest.raises(Conflict):
        await live_backend.bind_pod("default", "a", "n1", uid="another-uid")
    await live_backend.bind_pod("default", "a", "n1", uid=created["metadata"]["uid"])
    bound = await live_backend.get_pod("default", "a")
    assert bound is not None and bound["spec"]["nodeName"] == "n1"
    with pytest.raises(Conflict, match="already assigned"):
        await live_backend.bind_pod("default", "a", "n2")
    with pytest.raises(NotFound):
        await live_backend.bind_pod("default", "nobody", "n1")
    assert await live_backend.get_pod("default", "nobody") is None
    assert ("POST", "/api/v1/namespaces/default/pods/a/binding", {}) in fake_api.requests


async def test_bind_writes_the_annotations_with_the_binding_and_checks_the_version(
        fake_api: FakeApiServer, live_backend: KubeClient) -> None:  # noqa: F811
    """The binding subresource copies the Binding's annotations onto the pod in the same write and
    takes metadata.resourceVersion as a precondition (as kube-apiserver's BindingREST does; the
    e2e suite checks the real one)."""
    created = fake_api.put(pod("a"))
    rv = created["metadata"]["resourceVersion"]
    fake_api.put(pod("a", annotations={"devshare.io/allocation": "written by a user"}))  # changed since read
    with pytest.raises(Conflict, match="modified"):
        await live_backend.bind_pod("default", "a", "n1", annotations={"k": "v"}, resource_version=rv)
    current = await live_backend.get_pod("default", "a")
    assert current is not None and not current["spec"].get("nodeName")
    await live_backend.bind_pod("default", "a", "n1", annotations={"k": "v"},
                                resource_version=current["metadata"]["resourceVersion"])
    bound = await live_backend.get_pod("default", "a")
    assert bound is not None and bound["spec"]["nodeName"] == "n1"
    assert bound["metadata"]["annotations"]["k"] == "v"


async def test_a_deletion_with_a_uid_leaves_another_pod_of_the_name(fake_api: FakeApiServer,  # noqa: F811
                                                                    live_backend: KubeClient) -> None:  # noqa: F811
    created = fake_api.put(pod("a"))
    await live_backend.delete_pod("default", "a", uid="an-older-pod")  # re-created meanwhile: left alone
    assert fake_api.get("pods", "default/a") is not None
    await live_backend.delete_pod("default", "a", uid=created["metadata"]["uid"])
    assert fake_api.get("pods", "default/a") is None
    with pytest.raises(NotFound):
        await live_backend.delete_pod("default", "a")


@pytest.mark.parametrize(("code", "error"), [
    (0, Unavailable), (500, Unavailable), (503, Unavailable), (429, Unavailable),
    (403, BackendError), (404, NotFound), (409, Conflict), (410, Gone),
])
async def test_errors_are_translated(fake_api: FakeApiServer, live_backend: KubeClient, code: int,  # noqa: F811
                                     error: type[BackendError]) -> None:
    fake_api.put(node("n1"))
    # a cut connection: aiohttp's client sends an idempotent request once more on a new one
    fake_api.fail_next("list", "nodes", times=2 if code == 0 else 1, code=code)
    with pytest.raises(error) as err:
        await live_backend.list("nodes")
    assert type(err.value) is error
    if code:
        assert "injected failure of list nodes" in str(err.value) and err.value.code == code
    assert (await live_backend.list("nodes")).items[0]["metadata"]["name"] == "n1"


async def test_events_leases_and_config_maps(fake_api: FakeApiServer, live_backend: KubeClient) -> None:  # noqa: F811
    await live_backend.record_event("default", {
        "metadata": {"name": "a.1"}, "involvedObject": {"kind": "Pod", "name": "a", "namespace": "default"},
        "reason": "Scheduled", "message": "bound to n1", "type": "Normal"})
    event = fake_api.get("events", "default/a.1")
    assert event is not None and event["kind"] == "Event" and event["apiVersion"] == "v1"
    lease = await live_backend.create_lease("ns", {"metadata": {"name": "l"}, "spec": {"holderIdentity": "me"}})
    assert lease["kind"] == "Lease" and lease["apiVersion"] == "coordination.k8s.io/v1"
    assert await live_backend.get_lease("ns", "l") == lease
    with pytest.raises(Conflict):  # a stale resourceVersion
        await live_backend.replace_lease("ns", {**lease, "metadata": {**lease["metadata"], "resourceVersion": "1"}})
    assert (await live_backend.replace_lease("ns", lease))["spec"] == {"holderIdentity": "me"}
    assert await live_backend.get_config_map("ns", "c") is None
    cm = await live_backend.create_config_map("ns", {"metadata": {"name": "c"}, "data": {"k": "v"}})
    assert (await live_backend.replace_config_map("ns", cm))["data"] == {"k": "v"}


async def test_the_agents_objects(fake_api: FakeApiServer, live_backend: KubeClient) -> None:  # noqa: F811
    fake_api.put({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}, "status": {}})
    fake_api.put(pod("on", ns="one", node_name="n1"))
    fake_api.put(pod("elsewhere", ns="two", node_name="n2"))
    device = {"apiVersion": "devshare.io/v1alpha1", "kind": "Device", "metadata": {"name": "n1"}, "spec": {}}
    assert await live_backend.get_device("n1") is None
    created = await live_backend.create_device(device)
    assert (await live_backend.replace_device(created))["metadata"]["name"] == "n1"
    await live_backend.patch_node_status("n1", {"capacity": {"x/y": "1"}})
    await live_backend.patch_node_labels("n1", {"a": "b"})
    n1 = fake_api.get("nodes", "n1")
    assert n1 is not None and n1["status"]["capacity"] == {"x/y": "1"} and n1["metadata"]["labels"] == {"a": "b"}
    assert [p["metadata"]["name"] for p in await live_backend.list_node_pods(None, "n1")] == ["on"]
    assert ("GET", "/api/v1/pods", {"fieldSelector": "spec.nodeName=n1", "limit": str(PAGE)}) in fake_api.requests


# ---------------------------------------------------------------------------------------------- watches
async def test_watch_streams_events_after_a_version_and_ends_with_the_server(tls_api: FakeApiServer,
                                                                            api: KubeClient) -> None:
    tls_api.put(pod("before"))
    start = str(tls_api.store.rv)
    seen: list[tuple[str, str]] = []

    async def follow() -> None:
        async for ev in api.watch("pods", start):
            seen.append((ev.type, ev.object["metadata"]["name"]))

    task = asyncio.create_task(follow())
    await asyncio.sleep(0.1)
    tls_api.put(pod("a"))
    tls_api.put({**pod("big"), "metadata": {**pod("big")["metadata"], "annotations": {"x": "y" * 300_000}}})
    tls_api.delete("pods", "default/a")
    await settled(task)  # the server ends the watch after its timeout: so does the iterator
    assert seen == [("ADDED", "a"), ("ADDED", "big"), ("DELETED", "a")]
    (_, path, query) = next(r for r in tls_api.requests if r[2].get("watch") == "true")
    assert path == "/api/v1/pods" and query["resourceVersion"] == start and query["timeoutSeconds"] == "1"


async def test_a_watch_from_a_compacted_version_is_gone(tls_api: FakeApiServer, api: KubeClient) -> None:
    tls_api.put(pod("a"))
    old = str(tls_api.store.rv)
    tls_api.put(pod("b"))
    tls_api.compact()
    with pytest.raises(Gone):
        async for _ in api.watch("pods", old):
            pass
    tls_api.gone_as_http = True
    with pytest.raises(Gone):
        async for _ in api.watch("pods", old):
            pass


# ---------------------------------------------------------------------------------------------- credentials
async def test_a_wrong_token_is_refused(tls_api: FakeApiServer, tmp_path: Path, pki: ServingCert) -> None:
    api = requests_for(tls_api, tmp_path / "kc", pki, user={"token": "wrong"})
    try:
        with pytest.raises(BackendError) as err:
            await api.get_pod("default", "a")
        assert err.value.code == 401
    finally:
        await api.close()


async def test_a_token_file_is_read_again_after_a_401(tls_api: FakeApiServer, tmp_path: Path,
                                                      pki: ServingCert) -> None:
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    tls_api.put(pod("a"))
    api = requests_for(tls_api, tmp_path / "kc", pki, user={"tokenFile": str(token)})
    try:
        assert await api.get_pod("default", "a") is not None
        tls_api.token = "rotated"  # the kubelet rotated the ServiceAccount token
        token.write_text("rotated\n")
        before = len(tls_api.requests)
        assert await api.get_pod("default", "a") is not None
        assert len(tls_api.requests) - before == 2  # refused once, then with the file's new token
        assert await api.get_pod("default", "a") is not None
        assert len(tls_api.requests) - before == 3  # the new token is kept
    finally:
        await api.close()


async def test_an_exec_plugin_gives_the_token_and_runs_again_after_a_401(tls_api: FakeApiServer, tmp_path: Path,
                                                                         pki: ServingCert) -> None:
    token = tmp_path / "token"
    token.write_text("s3cret")
    plugin = tmp_path / "plugin.py"
    plugin.write_text("import json, sys\n"
                      f"print(json.dumps({{'apiVersion': 'client.authentication.k8s.io/v1beta1', "
                      f"'kind': 'ExecCredential', 'status': {{'token': open({str(token)!r}).read()}}}}))\n")
    user = {"exec": {"apiVersion": "client.authentication.k8s.io/v1beta1", "command": sys.executable,
                     "args": [str(plugin)]}}
    tls_api.put(pod("a"))
    api = requests_for(tls_api, tmp_path / "kc", pki, user=user)
    try:
        assert await api.get_pod("default", "a") is not None
        tls_api.token = "next"
        token.write_text("next")
        assert await api.get_pod("default", "a") is not None
    finally:
        await api.close()


async def test_a_client_certificate_authenticates(pki: ServingCert, tmp_path: Path) -> None:
    crt, key = signed_pair(pki, tmp_path / "client", cn="devshare", usage="clientAuth")
    server = await serving(pki, token=None, client_ca=True)
    server.put(pod("a"))
    api = requests_for(server, tmp_path / "kc", pki, user={"client-certificate": str(crt), "client-key": str(key)})
    anonymous = requests_for(server, tmp_path / "kc2", pki, user={})
    try:
        assert await api.get_pod("default", "a") is not None
        with pytest.raises(Unavailable):  # the handshake fails without a certificate
            await anonymous.get_pod("default", "a")
    finally:
        await api.close()
        await anonymous.close()
        await server.stop()


async def test_an_untrusted_server_certificate_fails_the_connection(tls_api: FakeApiServer, tmp_path: Path) -> None:
    other = make_serving_cert("other", "default", tmp_path / "other", extra_names=("127.0.0.1",))
    api = requests_for(tls_api, tmp_path / "kc", other)
    try:
        with pytest.raises(Unavailable, match=r"(?i)certificate"):
            await api.get_pod("default", "a")
    finally:
        await api.close()


def test_a_bad_kubeconfig_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match="cannot load the cluster configuration"):
        KubeClient.connect(tmp_path / "missing")
    (tmp_path / "kc").write_text("apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\n")
    with pytest.raises(InvalidInput):
        KubeClient.connect(tmp_path / "kc", context="nope")


async def test_an_unreachable_server_is_unavailable(tmp_path: Path) -> None:
    server = await FakeApiServer().start()
    kc = server.write_kubeconfig(tmp_path / "kc")
    await server.stop()
    backend = KubeClient.connect(kc)
    try:
        with pytest.raises(Unavailable):
            await backend.list("nodes")
    finally:
        await backend.close()


def _kubeconfig(path: Path, server: str) -> Path:
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": server}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u", "namespace": "mine"}}]}))
    return path


def test_the_client_is_made_from_the_kubeconfig(tmp_path: Path) -> None:
    api = KubeClient.connect(_kubeconfig(tmp_path / "kc", "http://127.0.0.1:1/"))
    assert api.server == "http://127.0.0.1:1" and api.ssl is None and api.namespace == "mine"


def test_the_environments_proxy_is_looked_up_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = load_config(_kubeconfig(tmp_path / "kc", "http://api.example:6443"))
    for var in ("NO_PROXY", "no_proxy", "HTTP_PROXY", "http_proxy"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.example:3128")
    assert str(KubeClient(config).proxy) == "http://proxy.example:3128"
    monkeypatch.setenv("NO_PROXY", "api.example")
    assert KubeClient(config).proxy is None


async def test_requests_go_under_the_servers_path(tmp_path: Path) -> None:
    """A server URL with a path (an API server behind a gateway): the requests go under it."""
    seen: list[str] = []
    gateway = await asyncio.start_server(lambda r, w: _gateway(r, w, seen), "127.0.0.1", 0)
    port = gateway.sockets[0].getsockname()[1]
    api = KubeClient.connect(_kubeconfig(tmp_path / "kc", f"http://127.0.0.1:{port}/k8s/clusters/c1/"))
    try:
        assert await api.get_pod("ns", "p") is None
    finally:
        await api.close()
        gateway.close()
    assert seen == ["GET /k8s/clusters/c1/api/v1/namespaces/ns/pods/p HTTP/1.1"]


async def _gateway(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, seen: list[str]) -> None:
    """A gateway: notes the request line, answers 404 as the API server would for a missing pod."""
    head = await reader.readuntil(b"\r\n\r\n")
    seen.append(head.split(b"\r\n")[0].decode())
    body = b'{"kind":"Status","code":404,"message":"not found"}'
    writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                 % (len(body), body))
    await writer.drain()
    writer.close()
