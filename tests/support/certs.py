"""Certificates with chosen validity dates and usages, signed by a test CA (``openssl ca``, which
can back-date: an expired pair, a pair not valid yet, a client certificate)."""

from __future__ import annotations

import datetime as dt
import subprocess
import tempfile
from pathlib import Path

from devshare.server.tls import ServingCert

EC = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]


def _stamp(t: dt.datetime) -> str:
    return t.astimezone(dt.UTC).strftime("%Y%m%d%H%M%SZ")


def signed_pair(
    ca: ServingCert,
    out: Path,
    *,
    cn: str = "localhost",
    names: tuple[str, ...] = ("localhost", "127.0.0.1"),
    not_before: dt.datetime | None = None,
    not_after: dt.datetime | None = None,
    usage: str = "serverAuth",
) -> tuple[Path, Path]:
    """Write ``out``/tls.crt and tls.key signed by ``ca``, valid from ``not_before`` to ``not_after``
    (default: from an hour ago for a day), for ``usage`` (serverAuth or clientAuth)."""
    now = dt.datetime.now(dt.UTC)
    start = not_before or now - dt.timedelta(hours=1)
    end = not_after or now + dt.timedelta(days=1)
    out.mkdir(parents=True, exist_ok=True)
    crt, key = out / "tls.crt", out / "tls.key"
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        (tmp / "index.txt").write_text("")
        (tmp / "serial").write_text("1000\n")
        (tmp / "ca.cnf").write_text(
            "[ca]\ndefault_ca = test\n"
            "[test]\n"
            f"database = {tmp}/index.txt\nserial = {tmp}/serial\nnew_certs_dir = {tmp}\n"
            "default_md = sha256\npolicy = any\nunique_subject = no\ncopy_extensions = none\n"
            "[any]\ncommonName = supplied\n"
        )
        sans = ",".join(("IP:" if n.replace(".", "").isdigit() else "DNS:") + n for n in names)
        (tmp / "ext.cnf").write_text(
            f"basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage={usage}\n"
            + (f"subjectAltName={sans}\n" if names else "")
        )
        subprocess.run(["openssl", "req", *EC, "-keyout", str(key), "-out", str(tmp / "req.csr"),
                        "-subj", f"/CN={cn}"], check=True, capture_output=True)
        subprocess.run(["openssl", "ca", "-batch", "-config", str(tmp / "ca.cnf"), "-cert", str(ca.ca_cert),
                        "-keyfile", str(ca.ca_key), "-in", str(tmp / "req.csr"), "-out", str(crt), "-notext",
                        "-startdate", _stamp(start), "-enddate", _stamp(end), "-extfile", str(tmp / "ext.cnf")],
                       check=True, capture_output=True)
    return crt, key
