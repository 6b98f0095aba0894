"""Serving certificates: load a cert/key pair, pick up a renewed pair without a restart, make one.

:class:`CertReloader` owns the server's :class:`ssl.SSLContext`. On each TLS handshake (at most once
per ``interval`` seconds) it looks at the files' modification time, size and inode; when they
changed it loads the new pair into a fresh context and hands that context to the connection
through the SNI callback, so connections already open keep theirs and new ones get the new
certificate. A half-written or mismatched pair is not taken: the previous one stays in use and the
failure is logged and kept in :attr:`CertReloader.last_error` until a good pair appears.

:func:`make_serving_cert` makes a self-signed CA and a serving certificate for a Kubernetes
Service with the ``openssl`` binary (no Python crypto dependency).
"""

from __future__ import annotations

import base64
import ipaddress
import logging
import os
import re
import shutil
import ssl
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from devshare.model.errors import InvalidInput

log = logging.getLogger(__name__)

_Stamp = tuple[int, int, int, int, int, int]  # (mtime_ns, size, inode) of cert and key


def _stamp(cert: Path, key: Path) -> _Stamp:
    c, k = cert.stat(), key.stat()
    return (c.st_mtime_ns, c.st_size, c.st_ino, k.st_mtime_ns, k.st_size, k.st_ino)


def load_server_context(cert: Path, key: Path) -> ssl.SSLContext:
    """A TLS server context (TLS 1.2+) holding the pair; raises InvalidInput with the reason."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(str(cert), str(key))
    except FileNotFoundError as e:
        raise InvalidInput(f"{e.filename or cert}: no such file") from None
    except ssl.SSLError as e:
        raise InvalidInput(
            f"cannot use {cert} with {key}: {e.reason or e} (is it a PEM certificate and its matching "
            "private key?)"
        ) from None
    except OSError as e:
        raise InvalidInput(f"cannot read {cert} / {key}: {e.strerror or e}") from None
    return ctx


class CertReloader:
    """A server SSLContext whose certificate follows the files on disk."""

    def __init__(self, cert: Path | str, key: Path | str, *, interval: float = 5.0) -> None:
        self.cert = Path(cert)
        self.key = Path(key)
        self.interval = interval
        self.last_error: str | None = None
        self.reloads = 0
        self._current = load_server_context(self.cert, self.key)
        self._stamp = _stamp(self.cert, self.key)
        self._checked = time.monotonic()
        # The context the listening socket is created with: its SNI callback swaps in the newest one.
        self.context = load_server_context(self.cert, self.key)
        self.context.sni_callback = self._on_hello

    @property
    def current(self) -> ssl.SSLContext:
        """The context new connections get (the newest good pair)."""
        return self._current

    def maybe_reload(self, *, force: bool = False) -> bool:
        """Reload when the files changed (checked at most once per interval). True when reloaded."""
        now = time.monotonic()
        if not force and now - self._checked < self.interval:
            return False
        self._checked = now
        try:
            stamp = _stamp(self.cert, self.key)
        except OSError as e:
            self._fail(f"cannot stat {self.cert} / {self.key}: {e.strerror or e}")
            return False
        if stamp == self._stamp:
            return False
        try:
            ctx = load_server_context(self.cert, self.key)
        except InvalidInput as e:
            # likely mid-rotation (cert written, key not yet): keep the old pair, retry next time
            self._fail(str(e))
            return False
        self._current = ctx
        self._stamp = stamp
        self.last_error = None
        self.reloads += 1
        log.info("loaded renewed TLS certificate %s", self.cert)
        return True

    def _fail(self, message: str) -> None:
        if message != self.last_error:
            log.warning("keeping the previous TLS certificate: %s", message)
        self.last_error = message

    def _on_hello(self, sslobj: ssl.SSLObject | ssl.SSLSocket, server_name: str | None,
                  ctx: ssl.SSLContext) -> None:
        try:
            self.maybe_reload()
            sslobj.context = self._current
        except Exception:  # never break a handshake over a reload problem
            log.exception("TLS certificate reload failed")


# --- making a certificate --------------------------------------------------------------------------


@dataclass(frozen=True)
class ServingCert:
    """Files written by :func:`make_serving_cert` and the CA bundle (base64 PEM) for webhook configs."""

    ca_cert: Path
    ca_key: Path
    cert: Path
    key: Path
    ca_bundle: str
    names: tuple[str, ...]


def service_names(service: str, namespace: str) -> tuple[str, ...]:
    """The DNS names the API server may use to reach a Service."""
    return (
        service,
        f"{service}.{namespace}",
        f"{service}.{namespace}.svc",
        f"{service}.{namespace}.svc.cluster.local",
    )


_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


def _openssl() -> str:
    path = shutil.which("openssl")
    if path is None:
        raise InvalidInput(
            "the openssl command is not installed: install it (e.g. apt-get install openssl) or use "
            "cert-manager (deploy/webhook/cert-manager.yaml)"
        )
    return path


def _run(args: list[str]) -> None:
    proc = subprocess.run(args, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        detail = (proc.stderr or proc.stdout).strip().splitlines()
        raise InvalidInput(f"openssl failed: {detail[-1] if detail else 'exit ' + str(proc.returncode)}")


def _san(name: str) -> str:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return f"DNS:{name}"
    return f"IP:{name}"


def make_serving_cert(
    service: str,
    namespace: str,
    out: Path | str,
    *,
    days: int = 3650,
    extra_names: tuple[str, ...] = (),
) -> ServingCert:
    """Write ca.crt, ca.key, tls.crt, tls.key for ``service.namespace.svc`` under ``out``."""
    for label, value in (("service", service), ("namespace", namespace)):
        if not _DNS_LABEL.fullmatch(value):
            raise InvalidInput(
                f"{label} {value!r} is not a valid Kubernetes name: lower-case letters, digits and '-', "
                "starting and ending with a letter or digit"
            )
    if days <= 0:
        raise InvalidInput(f"days must be positive, got {days}")
    openssl = _openssl()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    names = service_names(service, namespace) + tuple(n for n in extra_names if n)
    ca_crt, ca_key, crt, key = out / "ca.crt", out / "ca.key", out / "tls.crt", out / "tls.key"
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    with tempfile.TemporaryDirectory() as tmp:
        csr, ext = Path(tmp) / "tls.csr", Path(tmp) / "ext.cnf"
        _run([openssl, "req", "-x509", *ec, "-keyout", str(ca_key), "-out", str(ca_crt), "-days", str(days),
              "-subj", f"/CN={service}-ca", "-addext", "basicConstraints=critical,CA:TRUE",
              "-addext", "keyUsage=critical,keyCertSign,cRLSign"])
        _run([openssl, "req", *ec, "-keyout", str(key), "-out", str(csr), "-subj", f"/CN={names[2]}"])
        ext.write_text(
            "basicConstraints=CA:FALSE\n"
            "keyUsage=critical,digitalSignature\n"
            "extendedKeyUsage=serverAuth\n"
            f"subjectAltName={','.join(_san(n) for n in names)}\n"
        )
        _run([openssl, "x509", "-req", "-in", str(csr), "-CA", str(ca_crt), "-CAkey", str(ca_key),
              "-CAcreateserial", "-CAserial", str(Path(tmp) / "ca.srl"), "-out", str(crt),
              "-days", str(days), "-extfile", str(ext)])
    os.chmod(key, 0o600)
    os.chmod(ca_key, 0o600)
    bundle = base64.b64encode(ca_crt.read_bytes()).decode()
    return ServingCert(ca_cert=ca_crt, ca_key=ca_key, cert=crt, key=key, ca_bundle=bundle, names=names)
