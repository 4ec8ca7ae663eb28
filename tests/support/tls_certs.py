"""Throwaway certificates for TLS tests, made with the `openssl` command line: a CA, a server
certificate it signs (for `SERVER_NAME`, 127.0.0.1 and localhost), a client certificate it
signs, and a client certificate of another CA (one the server must refuse). EC P-256 keys:
quick to make."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

SERVER_NAME = "decoder.test"  # a name no resolver knows: clients must override the target name


@dataclass(frozen=True)
class TlsFiles:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    stranger_cert: Path  # signed by another CA
    stranger_key: Path


def _openssl(directory: Path, *args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=directory, timeout=60)


def _ca(directory: Path, name: str) -> None:
    _openssl(directory, "req", "-x509", "-newkey", "ec", "-pkeyopt",
             "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2", "-subj", f"/CN={name}",
             "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign",
             "-keyout", f"{name}.key", "-out", f"{name}.crt")  # fmt: skip


def _leaf(directory: Path, ca: str, name: str, extensions: str) -> None:
    _openssl(directory, "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
             "-nodes", "-subj", f"/CN={name}", "-keyout", f"{name}.key",
             "-out", f"{name}.csr")  # fmt: skip
    (directory / f"{name}.ext").write_text(extensions)
    _openssl(directory, "x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.crt",
             "-CAkey", f"{ca}.key", "-CAcreateserial", "-days", "2",
             "-extfile", f"{name}.ext", "-out", f"{name}.crt")  # fmt: skip


def make_test_certs(directory: Path) -> TlsFiles:
    directory.mkdir(parents=True, exist_ok=True)
    _ca(directory, "ca")
    _ca(directory, "other-ca")
    server_ext = (
        f"subjectAltName=DNS:{SERVER_NAME},DNS:localhost,IP:127.0.0.1\n"
        "extendedKeyUsage=serverAuth\n"
    )
    _leaf(directory, "ca", "server", server_ext)
    _leaf(directory, "ca", "client", "extendedKeyUsage=clientAuth\n")
    _leaf(directory, "other-ca", "stranger", "extendedKeyUsage=clientAuth\n")
    d = directory
    return TlsFiles(
        d / "ca.crt", d / "server.crt", d / "server.key", d / "client.crt", d / "client.key",
        d / "stranger.crt", d / "stranger.key",
    )  # fmt: skip
