"""The floor under any kube-scheduler extender on this machine: an extender that does nothing but
what the protocol makes every one of them do, for ``bench_e2e.py --extender floor``.

- ``/filter``: reads kube-scheduler's ``ExtenderArgs`` (``nodeCacheCapable``: the pod and the
  candidates' names) and passes the first candidate, as devshare's shortlist passes its best one;
  no engine, no state, no watch;
- ``/bind``: posts the pod's Binding with one allocation annotation of devshare's size (the
  binding subresource copies it onto the pod in the same write), over one keep-alive aiohttp
  session with the ServiceAccount's token; no claim ledger, no fence;
- ``/metrics``: empty (no bind is ever refused here).

With ``--no-bind`` kube-scheduler binds the pods itself (bench_e2e drops ``bindVerb``): the floor of
the filter alone. With ``--webhook-port`` (and ``--tls-cert``/``--tls-key``) it also serves, over TLS,
``/mutate-binding``: a mutating admission webhook on ``pods/binding`` that adds the same allocation
annotation to kube-scheduler's own Binding (the API server copies a Binding's annotations onto the
pod): the floor of a design where kube-scheduler binds and the allocation rides in its Binding
(bench_e2e's ``floor-webhook``). With ``--annotate`` as well, the filter first writes the same annotation onto the
pod (one merge patch), the floor of a design that records the allocation at filter time and lets
kube-scheduler send its own Binding. Whatever devshare spends above these runs is devshare's own; what these runs
spend above kube-scheduler alone is the price of the extender protocol, on the same cores.

    python bench/floor_extender.py --kubeconfig K --port P
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import ssl
import subprocess
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
import yaml
from aiohttp import web


class Meta(msgspec.Struct, frozen=True):
    name: str = ""
    namespace: str = ""


class Pod(msgspec.Struct, frozen=True):
    metadata: Meta = Meta()


class Args(msgspec.Struct):
    Pod: Pod = Pod()
    NodeNames: list[str] | None = None


class BindArgs(msgspec.Struct):
    PodName: str
    PodNamespace: str
    PodUID: str
    Node: str


ALLOCATION = ('{"node":"%s","containers":[{"name":"main","devices":[{"type":"gpu","minor":0,'
              '"id":"GPU-00000000-0000-0000-0000-000000000000","core":100,"memory":85899345920}]}]}')


def load(path: str) -> tuple[str, str, str]:
    with open(path) as f:
        cfg: dict[str, Any] = yaml.safe_load(f)
    cluster = cfg["clusters"][0]["cluster"]
    return cluster["server"], cluster["certificate-authority"], cfg["users"][0]["user"]["token"]


def app(server: str, ca: str, token: str, annotate: bool = False) -> web.Application:
    decode_args = msgspec.json.Decoder(Args).decode
    decode_bind = msgspec.json.Decoder(BindArgs).decode
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    session: dict[str, aiohttp.ClientSession] = {}

    async def start(_: web.Application) -> None:
        session["s"] = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ssl.create_default_context(cafile=ca)))

    async def stop(_: web.Application) -> None:
        await session["s"].close()

    async def filter_(request: web.Request) -> web.Response:
        return web.Response(body=await filter_body(await request.read()), content_type="application/json")

    async def filter_body(raw: bytes) -> bytes:
        args = decode_args(raw)
        names = args.NodeNames or []
        if annotate and names:
            m = args.Pod.metadata
            patch = {"metadata": {"annotations": {"devshare.io/allocation": ALLOCATION % names[0]}}}
            url = f"{server}/api/v1/namespaces/{m.namespace}/pods/{m.name}"
            async with session["s"].patch(url, data=msgspec.json.encode(patch),
                                          headers={**headers, "Content-Type": "application/merge-patch+json"}) as r:
                if r.status >= 300:
                    return msgspec.json.encode({"Error": f"patch: {r.status} {await r.text()}"})
        return msgspec.json.encode({"NodeNames": names[:1], "FailedNodes": {}, "FailedAndUnresolvableNodes": {},
                                    "Error": ""})

    conns: set[object] = set()

    async def bind(request: web.Request) -> web.Response:
        conns.add(request.transport)
        return web.Response(body=await bind_body(await request.read()), content_type="application/json")

    async def bind_body(raw: bytes) -> bytes:
        a = decode_bind(raw)
        body = {"apiVersion": "v1", "kind": "Binding",
                "metadata": {"name": a.PodName, "namespace": a.PodNamespace, "uid": a.PodUID,
                             "annotations": {"devshare.io/allocation": ALLOCATION % a.Node}},
                "target": {"apiVersion": "v1", "kind": "Node", "name": a.Node}}
        url = f"{server}/api/v1/namespaces/{a.PodNamespace}/pods/{a.PodName}/binding"
        async with session["s"].post(url, data=msgspec.json.encode(body), headers=headers) as r:
            error = "" if r.status < 300 else f"binding: {r.status} {await r.text()}"
        return msgspec.json.encode({"Error": error})

    async def mutate_binding(request: web.Request) -> web.Response:
        review = msgspec.json.decode(await request.read())
        req = review["request"]
        node = ((req.get("object") or {}).get("target") or {}).get("name", "")
        has = bool(((req.get("object") or {}).get("metadata") or {}).get("annotations"))
        value = ALLOCATION % node
        patch = ([{"op": "add", "path": "/metadata/annotations/devshare.io~1allocation", "value": value}] if has
                 else [{"op": "add", "path": "/metadata/annotations", "value": {"devshare.io/allocation": value}}])
        answer = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                  "response": {"uid": req["uid"], "allowed": True, "patchType": "JSONPatch",
                               "patch": base64.b64encode(msgspec.json.encode(patch)).decode()}}
        return web.Response(body=msgspec.json.encode(answer), content_type="application/json")

    async def empty(_: web.Request) -> web.Response:
        return web.Response(text="")

    async def metrics(_: web.Request) -> web.Response:
        return web.Response(text=f"# connections kube-scheduler opened for binds: {len(conns)}\n")

    out = web.Application()
    out["filter"], out["bind"] = filter_body, bind_body
    out.on_startup.append(start)
    out.on_cleanup.append(stop)
    out.router.add_post("/filter", filter_)
    out.router.add_post("/bind", bind)
    out.router.add_post("/mutate-binding", mutate_binding)
    out.router.add_get("/readyz", empty)
    out.router.add_get("/metrics", metrics)
    return out


class H2Protocol(asyncio.Protocol):
    """A bare HTTP/2 server connection: each request's path and body to ``handle``, its answer back."""

    def __init__(self, handle: Callable[[bytes, bytes], Awaitable[bytes]]) -> None:
        import h2.config
        import h2.connection

        self.handle = handle
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False, header_encoding=None))
        self.bodies: dict[int, list[bytes]] = {}
        self.paths: dict[int, bytes] = {}
        self.transport: asyncio.Transport | None = None
        self.tasks: set[asyncio.Task[None]] = set()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.conn.initiate_connection()
        transport.write(self.conn.data_to_send())

    def data_received(self, data: bytes) -> None:
        import h2.events

        assert self.transport is not None
        for ev in self.conn.receive_data(data):
            if isinstance(ev, h2.events.RequestReceived):
                self.paths[ev.stream_id] = dict(ev.headers)[b":path"]
                self.bodies[ev.stream_id] = []
            elif isinstance(ev, h2.events.DataReceived):
                self.bodies[ev.stream_id].append(ev.data)
                self.conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
            elif isinstance(ev, h2.events.StreamEnded):
                body = b"".join(self.bodies.pop(ev.stream_id))
                task = asyncio.ensure_future(self.respond(ev.stream_id, self.paths.pop(ev.stream_id), body))
                self.tasks.add(task)
                task.add_done_callback(self.tasks.discard)
        self.transport.write(self.conn.data_to_send())

    async def respond(self, stream: int, path: bytes, body: bytes) -> None:
        out = await self.handle(path, body)
        assert self.transport is not None
        self.conn.send_headers(stream, [(b":status", b"200"), (b"content-type", b"application/json"),
                                        (b"content-length", str(len(out)).encode())])
        self.conn.send_data(stream, out, end_stream=True)
        self.transport.write(self.conn.data_to_send())


async def serve_h2(server: str, ca: str, token: str, port: int, workdir: Path) -> None:
    """The same verbs over TLS and HTTP/2 (a self-signed certificate; kube-scheduler's tlsConfig: insecure)."""
    cert, key = workdir / "tls.crt", workdir / "tls.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                    "-subj", "/CN=127.0.0.1", "-days", "2", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    ctx.set_alpn_protocols(["h2"])
    web_app = app(server, ca, token)
    for hook in web_app.on_startup:
        await hook(web_app)
    handlers = {b"/filter": web_app["filter"], b"/bind": web_app["bind"]}

    async def handle(path: bytes, body: bytes) -> bytes:
        verb = handlers.get(path)
        return b"{}" if verb is None else await verb(body)

    loop = asyncio.get_running_loop()
    srv = await loop.create_server(lambda: H2Protocol(handle), "127.0.0.1", port, ssl=ctx)
    async with srv:
        await srv.serve_forever()


async def serve_both(web_app: web.Application, port: int, webhook_port: int, cert: str, key: str) -> None:
    """The verbs on ``port`` (plain HTTP) and the same application over TLS on ``webhook_port``."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    runner = web.AppRunner(web_app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    await web.TCPSite(runner, "127.0.0.1", webhook_port, ssl_context=ctx).start()
    try:
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kubeconfig", required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--annotate", action="store_true", help="write the annotation onto the pod in filter")
    ap.add_argument("--h2", action="store_true", help="serve TLS and HTTP/2 (needs the h2 package)")
    ap.add_argument("--webhook-port", type=int, help="also serve /mutate-binding over TLS on this port")
    ap.add_argument("--tls-cert", help="the webhook port's certificate (PEM)")
    ap.add_argument("--tls-key", help="its key (PEM)")
    args = ap.parse_args()
    if args.webhook_port:
        asyncio.run(serve_both(app(*load(args.kubeconfig)), args.port, args.webhook_port, args.tls_cert, args.tls_key))
        return
    if args.h2:
        with tempfile.TemporaryDirectory() as tmp:
            asyncio.run(serve_h2(*load(args.kubeconfig), args.port, Path(tmp)))
        return
    web.run_app(app(*load(args.kubeconfig), annotate=args.annotate), host="127.0.0.1", port=args.port,
                access_log=None, print=None)


if __name__ == "__main__":
    main()
