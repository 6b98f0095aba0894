"""ApiRequests (aiohttp) against the fake API server over TLS with a bearer token: the hot requests
(pod GET, Binding, watch), the kubeconfig's credentials (token, token file re-read on 401, exec
plugin, client certificate) and errors mapped to the backend's."""

from __future__ import annotations

import asyncio
import json
import ssl
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from lightkube.config.kubeconfig import KubeConfig

from devshare.kube.errors import BackendError, Conflict, Gone, NotFound, Unavailable
from devshare.kube.rest import ApiRequests
from devshare.server.tls import ServingCert, load_server_context, make_serving_cert
from fakeapi.server import FakeApiServer
from support.certs import signed_pair
from support.kube import pod


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


@pytest.fixture(params=[True, False], ids=["api-lane", "aiohttp"])
def direct(request: pytest.FixtureRequest) -> bool:
    """Every request test runs both ways: over http1's connections and through aiohttp's client."""
    return bool(request.param)


def requests_for(server: FakeApiServer, path: Path, pki: ServingCert, user: dict[str, Any] | None = None,
                 *, direct: bool = True) -> ApiRequests:
    kc = server.write_kubeconfig(path, ca=pki.ca_cert, user=user)
    config = KubeConfig.from_file(str(kc)).get()
    assert config is not None
    return ApiRequests(config, direct=direct)


@pytest.fixture
async def api(tls_api: FakeApiServer, tmp_path: Path, pki: ServingCert, direct: bool) -> AsyncIterator[ApiRequests]:
    out = requests_for(tls_api, tmp_path / "kc", pki, direct=direct)
    try:
        yield out
    finally:
        await out.close()


async def test_get_and_bind_over_tls_with_a_token(tls_api: FakeApiServer, api: ApiRequests, direct: bool) -> None:
    created = tls_api.put(pod("a"))
    got = await api.get_pod("default", "a")
    assert got == created and type(got) is dict
    assert await api.get_pod("default", "nobody") is None
    binding = {"apiVersion": "v1", "kind": "Binding",
               "metadata": {"name": "a", "namespace": "default", "uid": created["metadata"]["uid"],
                            "resourceVersion": created["metadata"]["resourceVersion"],
                            "annotations": {"devshare.io/allocation": "{}"}},
               "target": {"apiVersion": "v1", "kind": "Node", "name": "n1"}}
    await api.bind_pod("default", "a", binding)
    bound = tls_api.get("pods", "default/a")
    assert bound is not None and bound["spec"]["nodeName"] == "n1"
    assert bound["metadata"]["annotations"]["devshare.io/allocation"] == "{}"
    with pytest.raises(Conflict, match="has been modified"):  # the resourceVersion precondition
        await api.bind_pod("default", "a", binding)
    del binding["metadata"]["resourceVersion"]
    with pytest.raises(Conflict, match="already assigned"):
        await api.bind_pod("default", "a", binding)
    with pytest.raises(NotFound):
        await api.bind_pod("default", "nobody", binding)
    assert ("POST", "/api/v1/namespaces/default/pods/a/binding", {}) in tls_api.requests
    # the API lane carried them, on one kept-alive connection; or aiohttp did
    assert (api.connections.opened == 1) if direct else (api.connections is None)


async def test_watch_streams_events_after_a_version_and_ends_with_the_server(tls_api: FakeApiServer,
                                                                            api: ApiRequests) -> None:
    tls_api.put(pod("before"))
    start = str(tls_api.store.rv)
    seen: list[tuple[str, str]] = []

    async def follow() -> None:
        async for ev in api.watch("/api/v1/pods", start, server_timeout=1):
            seen.append((ev.type, ev.object["metadata"]["name"]))

    task = asyncio.create_task(follow())
    await asyncio.sleep(0.1)
    tls_api.put(pod("a"))
    tls_api.put({**pod("big"), "metadata": {**pod("big")["metadata"], "annotations": {"x": "y" * 300_000}}})
    tls_api.delete("pods", "default/a")
    await asyncio.wait_for(task, 10)  # the server ends the watch after its timeout: so does the iterator
    assert seen == [("ADDED", "a"), ("ADDED", "big"), ("DELETED", "a")]
    (_, path, query) = next(r for r in tls_api.requests if r[2].get("watch") == "true")
    assert path == "/api/v1/pods" and query["resourceVersion"] == start and query["timeoutSeconds"] == "1"


async def test_a_watch_from_a_compacted_version_is_gone(tls_api: FakeApiServer, api: ApiRequests) -> None:
    tls_api.put(pod("a"))
    old = str(tls_api.store.rv)
    tls_api.put(pod("b"))
    tls_api.compact()
    with pytest.raises(Gone):
        async for _ in api.watch("/api/v1/pods", old, server_timeout=5):
            pass
    tls_api.gone_as_http = True
    with pytest.raises(Gone):
        async for _ in api.watch("/api/v1/pods", old, server_timeout=5):
            pass


@pytest.mark.parametrize(("code", "error"), [
    (0, Unavailable), (500, Unavailable), (503, Unavailable), (429, Unavailable),
    (403, BackendError), (404, NotFound), (409, Conflict),
])
async def test_errors_are_the_backends(tls_api: FakeApiServer, api: ApiRequests, code: int,
                                       error: type[BackendError]) -> None:
    tls_api.put(pod("a"))
    tls_api.fail_next("bind", "pods", code=code)
    with pytest.raises(error) as err:
        await api.bind_pod("default", "a", {"target": {"name": "n1"}})
    assert type(err.value) is error
    if code:
        assert "injected failure of bind pods" in str(err.value) and err.value.code == code


async def test_a_wrong_token_is_refused(tls_api: FakeApiServer, tmp_path: Path, pki: ServingCert, direct: bool) -> None:
    api = requests_for(tls_api, tmp_path / "kc", pki, user={"token": "wrong"}, direct=direct)
    try:
        with pytest.raises(BackendError) as err:
            await api.get_pod("default", "a")
        assert err.value.code == 401
    finally:
        await api.close()


async def test_a_token_file_is_read_again_after_a_401(tls_api: FakeApiServer, tmp_path: Path,
                                                      pki: ServingCert, direct: bool) -> None:
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    tls_api.put(pod("a"))
    api = requests_for(tls_api, tmp_path / "kc", pki, user={"tokenFile": str(token)}, direct=direct)
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
                                                                         pki: ServingCert, direct: bool) -> None:
    token = tmp_path / "token"
    token.write_text("s3cret")
    plugin = tmp_path / "plugin.py"
    plugin.write_text("import json, sys\n"
                      f"print(json.dumps({{'apiVersion': 'client.authentication.k8s.io/v1beta1', "
                      f"'kind': 'ExecCredential', 'status': {{'token': open({str(token)!r}).read()}}}}))\n")
    user = {"exec": {"apiVersion": "client.authentication.k8s.io/v1beta1", "command": sys.executable,
                     "args": [str(plugin)]}}
    tls_api.put(pod("a"))
    api = requests_for(tls_api, tmp_path / "kc", pki, user=user, direct=direct)
    try:
        assert await api.get_pod("default", "a") is not None
        tls_api.token = "next"
        token.write_text("next")
        assert await api.get_pod("default", "a") is not None
    finally:
        await api.close()


async def test_a_client_certificate_authenticates(pki: ServingCert, tmp_path: Path, direct: bool) -> None:
    crt, key = signed_pair(pki, tmp_path / "client", cn="devshare", usage="clientAuth")
    server = await serving(pki, token=None, client_ca=True)
    server.put(pod("a"))
    api = requests_for(server, tmp_path / "kc", pki, user={"client-certificate": str(crt), "client-key": str(key)},
                       direct=direct)
    anonymous = requests_for(server, tmp_path / "kc2", pki, user={}, direct=direct)
    try:
        assert await api.get_pod("default", "a") is not None
        with pytest.raises(Unavailable):  # the handshake fails without a certificate
            await anonymous.get_pod("default", "a")
    finally:
        await api.close()
        await anonymous.close()
        await server.stop()


async def test_an_untrusted_server_certificate_fails_the_connection(tls_api: FakeApiServer, tmp_path: Path,
                                                                   direct: bool) -> None:
    other = make_serving_cert("other", "default", tmp_path / "other", extra_names=("127.0.0.1",))
    api = requests_for(tls_api, tmp_path / "kc", other, direct=direct)
    try:
        with pytest.raises(Unavailable, match=r"(?i)certificate"):
            await api.get_pod("default", "a")
    finally:
        await api.close()


def test_requests_are_made_from_lightkubes_configuration(tmp_path: Path) -> None:
    kc = tmp_path / "kc"
    kc.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": "http://127.0.0.1:1/"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
    config = KubeConfig.from_file(str(kc)).get()
    assert config is not None
    api = ApiRequests(config)
    assert api.server == "http://127.0.0.1:1" and api.ssl is None


def test_the_environments_proxy_is_looked_up_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    kc = tmp_path / "kc"
    kc.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": "http://api.example:6443"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
    config = KubeConfig.from_file(str(kc)).get()
    assert config is not None
    for var in ("NO_PROXY", "no_proxy", "HTTP_PROXY", "http_proxy"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.example:3128")
    proxied = ApiRequests(config)
    assert str(proxied.proxy) == "http://proxy.example:3128"
    assert proxied.connections is None  # through a proxy every request goes through aiohttp's client
    monkeypatch.setenv("NO_PROXY", "api.example")
    assert ApiRequests(config).proxy is None and ApiRequests(config).connections is not None


async def test_the_api_lane_sends_to_the_servers_path_with_its_host(tmp_path: Path) -> None:
    """A server URL with a path (an API server behind a gateway): the requests go under it, with the
    server's host and port in Host; a request is written whole, in one piece."""
    seen: list[bytes] = []

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0]) if b"ength:" in head else 0
        seen.append(head + await reader.readexactly(length))
        writer.write(b'HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\n{}')
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    kc = tmp_path / "kc"
    kc.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{port}/k8s/clusters/c1/"}}],
        "users": [{"name": "u", "user": {"token": "t0k"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
    config = KubeConfig.from_file(str(kc)).get()
    assert config is not None
    api = ApiRequests(config)
    try:
        await api.bind_pod("ns", "p", {"kind": "Binding"})
    finally:
        await api.close()
        server.close()
        await server.wait_closed()
    assert seen == [b"POST /k8s/clusters/c1/api/v1/namespaces/ns/pods/p/binding HTTP/1.1\r\n"
                    + f"Host: 127.0.0.1:{port}\r\n".encode()
                    + b"User-Agent: devshare\r\nAccept: application/json\r\nAuthorization: Bearer t0k\r\n"
                    b"Content-Type: application/json\r\nContent-Length: 18\r\n\r\n{\"kind\":\"Binding\"}"]
