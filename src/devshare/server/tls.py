"""Serving certificates: load a cert/key pair, pick up a renewed pair without a restart, make one.

:class:`CertReloader` owns the server's :class:`ssl.SSLContext`. On each TLS handshake (at most once
per ``interval`` seconds) it looks at the files' modification time, size and inode; when they
changed it loads the new pair into a fresh context and hands that context to the connection
through the SNI callback, so connections already open keep theirs and new ones get the new
certificate. A half-written or mismatched pair, or a certificate that is expired or not valid yet,
is not taken: the previous one stays in use, the failure is logged, kept in
:attr:`CertReloader.last_error` until a good pair appears and counted by reason
(``devshare_tls_reload_failures_total{reason}``, :class:`TLSCollector`).

With ``client_ca`` the server asks for a client certificate and verifies it against that CA (the
extender: kube-scheduler's extender ``tlsConfig`` presents ``certFile``/``keyFile``). The TLS layer
lets a client without a certificate in (kubelet probes and Prometheus present none); the
application refuses the endpoints that need one (:func:`peer_verified`).

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
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from devshare.model.errors import InvalidInput

log = logging.getLogger(__name__)

_Stamp = tuple[int, ...]  # (mtime_ns, size, inode) of each file


def _stamp(*files: Path) -> _Stamp:
    out: list[int] = []
    for f in files:
        st = f.stat()
        out += [st.st_mtime_ns, st.st_size, st.st_ino]
    return tuple(out)


class CertProblem(InvalidInput):
    """A pair that cannot be served. ``reason``: a short class for the metric (missing, unreadable,
    mismatch, expired, not-yet-valid, client-ca)."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


def certificate_dates(cert: Path) -> tuple[float, float] | None:
    """(notBefore, notAfter) of the first certificate in a PEM file, as UNIX times; None when this
    Python cannot decode certificates (the check is then skipped)."""
    decode = getattr(getattr(ssl, "_ssl", None), "_test_decode_cert", None)  # CPython's, since 3.x
    if decode is None:
        return None
    try:
        info = decode(str(cert))
        return ssl.cert_time_to_seconds(info["notBefore"]), ssl.cert_time_to_seconds(info["notAfter"])
    except (ssl.SSLError, OSError, KeyError, ValueError) as e:
        raise CertProblem(f"cannot read the validity dates of {cert}: {e}", "unreadable") from None


def _utc(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t))


def check_dates(cert: Path, now: float | None = None) -> float | None:
    """Raise :class:`CertProblem` when the certificate is expired or not valid yet; its notAfter."""
    dates = certificate_dates(cert)
    if dates is None:
        return None
    not_before, not_after = dates
    now = time.time() if now is None else now
    if now >= not_after:
        raise CertProblem(f"certificate {cert} expired at {_utc(not_after)}: renew it", "expired")
    if now < not_before:
        raise CertProblem(f"certificate {cert} is not valid before {_utc(not_before)}: check the clocks, or wait",
                          "not-yet-valid")
    return not_after


def load_server_context(cert: Path, key: Path, client_ca: Path | None = None) -> ssl.SSLContext:
    """A TLS server context (TLS 1.2+) holding the pair (and verifying client certificates against
    ``client_ca`` when given); raises :class:`CertProblem` (an InvalidInput) with the reason."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(str(cert), str(key))
    except FileNotFoundError as e:
        raise CertProblem(f"{e.filename or cert}: no such file", "missing") from None
    except ssl.SSLError as e:
        raise CertProblem(
            f"cannot use {cert} with {key}: {e.reason or e} (is it a PEM certificate and its matching "
            "private key?)", "mismatch"
        ) from None
    except OSError as e:
        raise CertProblem(f"cannot read {cert} / {key}: {e.strerror or e}", "unreadable") from None
    check_dates(cert)
    if client_ca is not None:
        try:
            ctx.load_verify_locations(cafile=str(client_ca))
        except FileNotFoundError:
            raise CertProblem(f"{client_ca}: no such file (the CA that signs client certificates)", "client-ca") \
                from None
        except (ssl.SSLError, OSError) as e:
            raise CertProblem(f"cannot use {client_ca} as the client CA: {e} (is it a PEM CA certificate?)",
                              "client-ca") from None
        ctx.verify_mode = ssl.CERT_OPTIONAL  # no certificate: let in, the app decides (probes, metrics)
    return ctx


def peer_verified(transport: object) -> bool:
    """True when the connection's client presented a certificate the server verified."""
    get = getattr(transport, "get_extra_info", None)
    return bool(get("peercert")) if get is not None else False


class CertReloader:
    """A server SSLContext whose certificate follows the files on disk."""

    def __init__(self, cert: Path | str, key: Path | str, *, interval: float = 5.0,
                 client_ca: Path | str | None = None) -> None:
        self.cert = Path(cert)
        self.key = Path(key)
        self.client_ca = Path(client_ca) if client_ca is not None else None
        self.interval = interval
        self.last_error: str | None = None
        self.reloads = 0
        self.failures: dict[str, int] = {}  # reason -> reloads refused
        self._current = self._load()
        self._stamp = self._files_stamp()
        self.not_after = certificate_dates(self.cert)
        self._checked = time.monotonic()
        # The context the listening socket is created with: its SNI callback swaps in the newest one.
        self.context = self._load()
        self.context.sni_callback = self._on_hello

    def _load(self) -> ssl.SSLContext:
        return load_server_context(self.cert, self.key, self.client_ca)

    def _files_stamp(self) -> _Stamp:
        return _stamp(self.cert, self.key, *([self.client_ca] if self.client_ca is not None else []))

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
            stamp = self._files_stamp()
        except OSError as e:
            self._fail(f"cannot stat {self.cert} / {self.key}: {e.strerror or e}", "missing")
            return False
        if stamp == self._stamp:
            return False
        try:
            ctx = self._load()
            dates = certificate_dates(self.cert)
        except CertProblem as e:
            # mid-rotation (cert written, key not yet), or a pair that must never replace a valid one
            # (expired, not valid yet): keep the old pair, look again when the files change
            self._fail(str(e), e.reason)
            return False
        self._current = ctx
        self._stamp = stamp
        self.not_after = dates
        self.last_error = None
        self.reloads += 1
        log.info("loaded renewed TLS certificate %s", self.cert)
        return True

    def _fail(self, message: str, reason: str) -> None:
        if message != self.last_error:
            log.warning("keeping the previous TLS certificate: %s", message)
            self.failures[reason] = self.failures.get(reason, 0) + 1
        self.last_error = message

    def _on_hello(self, sslobj: ssl.SSLObject | ssl.SSLSocket, server_name: str | None,
                  ctx: ssl.SSLContext) -> None:
        try:
            self.maybe_reload()
            sslobj.context = self._current
        except Exception:  # never break a handshake over a reload problem
            log.exception("TLS certificate reload failed")


class TLSCollector(Collector):
    """Prometheus view of a :class:`CertReloader`: ``devshare_tls_reloads_total``,
    ``devshare_tls_reload_failures_total{reason}`` (renewed pairs refused: the old pair stays) and
    ``devshare_tls_certificate_expiry_timestamp_seconds`` (notAfter of the pair being served)."""

    def __init__(self, reloader: CertReloader) -> None:
        self.reloader = reloader

    def collect(self) -> Iterator[Metric]:
        r = self.reloader
        yield CounterMetricFamily("devshare_tls_reloads", "Renewed serving certificates taken up without a restart.",
                                  value=r.reloads)
        failed = CounterMetricFamily("devshare_tls_reload_failures",
                                     "Renewed serving certificates refused (the previous one is kept), by reason: "
                                     "mismatch, expired, not-yet-valid, missing or unreadable.", labels=["reason"])
        for reason, n in sorted(r.failures.items()):
            failed.add_metric([reason], n)
        yield failed
        if r.not_after is not None:
            yield GaugeMetricFamily("devshare_tls_certificate_expiry_timestamp_seconds",
                                    "When the certificate being served expires (UNIX time, in seconds).",
                                    value=r.not_after[1])


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
