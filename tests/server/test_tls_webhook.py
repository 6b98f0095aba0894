"""TLS: the served certificate follows the files on disk without a restart; a broken renewal keeps
the previous pair; the handshake works with and without SNI."""

from __future__ import annotations

import datetime as dt
import os
import shutil
import socket
import ssl
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from devshare.model.errors import InvalidInput
from devshare.server.tls import CertReloader, ServingCert, TLSCollector, load_server_context, make_serving_cert
from devshare.server.webhook.app import make_app
from support.certs import signed_pair
from support.server import ServerThread
from support.webhook_client import Client
from support.webhook_pods import pod

NAMES = ("localhost", "127.0.0.1")


def served_cert(port: int, ca: Path, host: str) -> bytes:
    """The DER certificate the server presents to a new connection (verified against ``ca``)."""
    ctx = ssl.create_default_context(cafile=str(ca))
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, ctx.wrap_socket(
        raw, server_hostname=host
    ) as tls:
        der = tls.getpeercert(binary_form=True)
        assert der is not None
        return der


def der(cert: Path) -> bytes:
    return ssl.PEM_cert_to_DER_cert(cert.read_text())


def install(src: ServingCert, cert: Path, key: Path) -> None:
    """Replace the live files atomically, the way the kubelet swaps a mounted Secret."""
    for a, b in ((src.cert, cert), (src.key, key)):
        tmp = b.with_suffix(".new")
        shutil.copyfile(a, tmp)
        os.replace(tmp, b)


@pytest.fixture
def pairs(tmp_path: Path) -> tuple[ServingCert, ServingCert]:
    a = make_serving_cert("wh", "ns", tmp_path / "a", extra_names=NAMES)
    b = make_serving_cert("wh", "ns", tmp_path / "b", extra_names=NAMES)
    return a, b


@pytest.fixture
def live(tmp_path: Path, pairs: tuple[ServingCert, ServingCert]) -> Iterator[tuple[ServerThread, CertReloader]]:
    live_dir = tmp_path / "live"
    live_dir.mkdir()
    install(pairs[0], live_dir / "tls.crt", live_dir / "tls.key")
    tls = CertReloader(live_dir / "tls.crt", live_dir / "tls.key", interval=0)
    srv = ServerThread(make_app(), tls.context)
    yield srv, tls
    srv.close()


@pytest.mark.parametrize("host", ["localhost", "127.0.0.1"], ids=["sni", "no-sni"])
def test_renewed_certificate_is_served_without_restart(
    live: tuple[ServerThread, CertReloader], pairs: tuple[ServingCert, ServingCert], host: str
) -> None:
    srv, tls = live
    a, b = pairs
    assert served_cert(srv.port, a.ca_cert, host) == der(a.cert)
    install(b, tls.cert, tls.key)
    assert served_cert(srv.port, b.ca_cert, host) == der(b.cert)
    assert tls.reloads == 1
    # and the webhook answers over the new certificate
    client = Client(srv.port, b.ca_cert, host=host)
    assert client.review("/validate", pod({"cpu": "1"}))["allowed"] is True
    client.close()


def test_broken_renewal_keeps_the_previous_pair(
    live: tuple[ServerThread, CertReloader], pairs: tuple[ServingCert, ServingCert]
) -> None:
    srv, tls = live
    a, b = pairs
    shutil.copyfile(b.cert, tls.cert)  # the new certificate, but still the old key: a mismatch
    assert served_cert(srv.port, a.ca_cert, "localhost") == der(a.cert)
    assert tls.last_error is not None and "private key" in tls.last_error
    shutil.copyfile(b.key, tls.key)  # the rotation completes
    assert served_cert(srv.port, b.ca_cert, "localhost") == der(b.cert)
    assert tls.last_error is None


def test_files_gone_keeps_serving(live: tuple[ServerThread, CertReloader],
                                  pairs: tuple[ServingCert, ServingCert]) -> None:
    srv, tls = live
    tls.cert.unlink()
    assert served_cert(srv.port, pairs[0].ca_cert, "localhost") == der(pairs[0].cert)
    assert tls.last_error is not None and "cannot stat" in tls.last_error


def test_interval_limits_the_checks(tmp_path: Path, pairs: tuple[ServingCert, ServingCert]) -> None:
    a, b = pairs
    tls = CertReloader(a.cert, a.key, interval=3600)
    assert tls.maybe_reload() is False
    install(b, a.cert, a.key)
    assert tls.maybe_reload() is False  # not yet time to look
    assert tls.maybe_reload(force=True) is True
    assert tls.maybe_reload(force=True) is False  # nothing changed since


def test_bad_files_are_reported(tmp_path: Path, pairs: tuple[ServingCert, ServingCert]) -> None:
    a, b = pairs
    with pytest.raises(InvalidInput, match="no such file"):
        load_server_context(tmp_path / "missing.crt", a.key)
    with pytest.raises(InvalidInput, match="matching"):
        load_server_context(a.cert, b.key)
    with pytest.raises(InvalidInput):
        load_server_context(a.key, a.cert)


def test_certificate_names(pairs: tuple[ServingCert, ServingCert]) -> None:
    a, _ = pairs
    assert a.names[:4] == ("wh", "wh.ns", "wh.ns.svc", "wh.ns.svc.cluster.local")
    # the CA signs the serving certificate: a client trusting only ca.crt verifies it
    ctx = ssl.create_default_context(cafile=str(a.ca_cert))
    assert ctx.cert_store_stats()["x509_ca"] == 1
    assert oct(a.key.stat().st_mode & 0o777) == "0o600"


@pytest.mark.parametrize(("service", "namespace", "days"), [("Bad_Name", "ns", 1), ("wh", "", 1), ("wh", "ns", 0)])
def test_make_serving_cert_refuses_bad_input(tmp_path: Path, service: str, namespace: str, days: int) -> None:
    with pytest.raises(InvalidInput):
        make_serving_cert(service, namespace, tmp_path, days=days)


def test_without_openssl(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(InvalidInput, match="openssl command is not installed"):
        make_serving_cert("wh", "ns", tmp_path)


# --- a renewal that must never replace a valid pair (issue 12) -------------------------------------


def dated_pair(ca: ServingCert, out: Path, **dates: dt.datetime) -> ServingCert:
    """A serving pair signed by ``ca``'s CA with the given notBefore/notAfter."""
    crt, key = signed_pair(ca, out, names=NAMES, **dates)
    return ServingCert(ca_cert=ca.ca_cert, ca_key=ca.ca_key, cert=crt, key=key, ca_bundle=ca.ca_bundle, names=NAMES)


NOW = dt.datetime.now(dt.UTC)
BAD_DATES = {
    "expired": {"not_before": NOW - dt.timedelta(days=30), "not_after": NOW - dt.timedelta(hours=1)},
    "not-yet-valid": {"not_before": NOW + dt.timedelta(days=1), "not_after": NOW + dt.timedelta(days=30)},
}


@pytest.mark.parametrize("reason", sorted(BAD_DATES))
def test_renewal_outside_its_validity_keeps_the_previous_pair(
    live: tuple[ServerThread, CertReloader], pairs: tuple[ServingCert, ServingCert], tmp_path: Path, reason: str
) -> None:
    srv, tls = live
    a, b = pairs
    bad = dated_pair(b, tmp_path / reason, **BAD_DATES[reason])
    install(bad, tls.cert, tls.key)
    assert served_cert(srv.port, a.ca_cert, "localhost") == der(a.cert)
    assert tls.reloads == 0
    assert tls.last_error is not None
    assert ("expired at" if reason == "expired" else "not valid before") in tls.last_error
    assert tls.failures == {reason: 1}
    registry = CollectorRegistry()
    registry.register(TLSCollector(tls))
    assert registry.get_sample_value("devshare_tls_reload_failures_total", {"reason": reason}) == 1
    not_after = registry.get_sample_value("devshare_tls_certificate_expiry_timestamp_seconds")
    assert not_after is not None and not_after > NOW.timestamp() + 86400  # the old pair's, years away
    # a good pair afterwards is taken
    good = dated_pair(b, tmp_path / "good")
    install(good, tls.cert, tls.key)
    assert served_cert(srv.port, b.ca_cert, "localhost") == der(good.cert)
    assert tls.last_error is None and tls.reloads == 1


def test_mismatched_renewal_is_counted(live: tuple[ServerThread, CertReloader],
                                       pairs: tuple[ServingCert, ServingCert]) -> None:
    srv, tls = live
    a, b = pairs
    shutil.copyfile(b.cert, tls.cert)
    assert served_cert(srv.port, a.ca_cert, "localhost") == der(a.cert)
    assert tls.failures == {"mismatch": 1}


def test_expired_pair_is_refused_at_start(pairs: tuple[ServingCert, ServingCert], tmp_path: Path) -> None:
    bad = dated_pair(pairs[0], tmp_path / "old", **BAD_DATES["expired"])
    with pytest.raises(InvalidInput, match="expired at"):
        CertReloader(bad.cert, bad.key)
    with pytest.raises(InvalidInput, match="expired at"):
        load_server_context(bad.cert, bad.key)
