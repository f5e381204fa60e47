"""A test certificate authority: a self-signed CA that issues server and client certificates (PEM
files), for the TLS and mutual TLS tests of both protocols."""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

SERVER_NAME = "translator.test"


class Authority:
    """A self-signed CA that issues server and client certificates into a directory."""

    def __init__(self, directory: Path, name: str) -> None:
        self.directory, self.key = directory, ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        self.cert = (self._builder(subject, self.key.public_key()).issuer_name(subject)
                     .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                     .sign(self.key, hashes.SHA256()))
        self.path = self._write(f"{name}.pem", self.cert.public_bytes(serialization.Encoding.PEM))

    @staticmethod
    def _builder(subject: x509.Name, public_key) -> x509.CertificateBuilder:
        """A certificate valid from yesterday for a week."""
        now = datetime.datetime.now(datetime.UTC)
        return (x509.CertificateBuilder().subject_name(subject).public_key(public_key)
                .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
                .not_valid_after(now + datetime.timedelta(days=7)))

    def _write(self, name: str, data: bytes) -> Path:
        """Write a PEM file."""
        path = self.directory / name
        path.write_bytes(data)
        return path

    def issue(self, name: str, server: bool) -> tuple[Path, Path]:
        """(certificate, key) files of a server (localhost, 127.0.0.1 and SERVER_NAME) or a client."""
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        builder = self._builder(subject, key.public_key()).issuer_name(self.cert.subject)
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        if server:
            names = [x509.DNSName("localhost"), x509.DNSName(SERVER_NAME),
                     x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption())
        return (self._write(f"{name}.crt", cert.public_bytes(serialization.Encoding.PEM)),
                self._write(f"{name}.key", key_pem))
