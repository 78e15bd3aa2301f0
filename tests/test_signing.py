"""Signed bundles (issue 24, item 1): ``panelpack sign`` / ``verify --signed-by`` with the OpenSSF
model-signing format, key and certificate modes; any edit of any file of a signed bundle fails.

The exhaustive single-byte sweep is in the slow tier; the fast tier sweeps every 29th byte of
every file (and the first and last), the same code on a tenth of the cases.
"""

from __future__ import annotations

import datetime
import json
import re
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from panelpack.cli import main
from panelpack.formats import bundle as B
from panelpack.formats import bundle_manifest, signature
from panelpack.verify import bundle_check, gate

from builders import smallest_bundle

pytest.importorskip("model_signing", reason="model-signing is not installed (pip install '.[sign]')")
ec = pytest.importorskip("cryptography.hazmat.primitives.asymmetric.ec")
from cryptography import x509  # noqa: E402
from cryptography.hazmat.primitives import hashes, serialization  # noqa: E402
from cryptography.x509.oid import NameOID  # noqa: E402


# -- keys and certificates made here ---------------------------------------------------------------
def _key_pair(d: Path, name: str) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    (d / f"{name}.pem").write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                      serialization.NoEncryption()))
    (d / f"{name}.pub").write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                                  serialization.PublicFormat.SubjectPublicKeyInfo))
    return d / f"{name}.pem", d / f"{name}.pub"


def _cert(subject: str, key, issuer_name, issuer_key, ca: bool, email: str | None = None) -> x509.Certificate:
    now = datetime.datetime(2025, 1, 1, tzinfo=datetime.timezone.utc)
    b = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
         .issuer_name(issuer_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
         .not_valid_before(now).not_valid_after(now + datetime.timedelta(days=3650))
         .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
         .add_extension(x509.KeyUsage(digital_signature=not ca, content_commitment=False, key_encipherment=False,
                                      data_encipherment=False, key_agreement=False, key_cert_sign=ca, crl_sign=ca,
                                      encipher_only=False, decipher_only=False), critical=True))
    if email:
        b = b.add_extension(x509.SubjectAlternativeName([x509.RFC822Name(email)]), critical=False)
    return b.sign(issuer_key, hashes.SHA256())


def _pki(d: Path, tag: str) -> dict[str, Path]:
    """A root CA and a leaf signing certificate it issued (PEM files)."""
    ca_key, leaf_key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{tag} Root CA")])
    ca = _cert(f"{tag} Root CA", ca_key, ca_name, ca_key, ca=True)
    leaf = _cert("release-bot", leaf_key, ca_name, ca_key, ca=False, email="release@example.com")
    out = {"ca": d / f"{tag}-ca.pem", "cert": d / f"{tag}-leaf.pem", "key": d / f"{tag}-leaf.key"}
    out["ca"].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    out["cert"].write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    out["key"].write_bytes(leaf_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                  serialization.NoEncryption()))
    return out


@pytest.fixture(scope="module")
def keys(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("keys")
    k = {}
    k["key"], k["pub"] = _key_pair(d, "signer")
    k["other_key"], k["other_pub"] = _key_pair(d, "other")
    k.update({f"pki_{n}": p for n, p in _pki(d, "Example").items()})
    k.update({f"rogue_{n}": p for n, p in _pki(d, "Rogue").items()})
    return k


@pytest.fixture(scope="module")
def small(tmp_path_factory) -> Path:
    """A small GGUF-sourced bundle (manifest, two tensor files, the GGUF side files)."""
    return smallest_bundle(tmp_path_factory.mktemp("sign"), seed=11)


@pytest.fixture(scope="module")
def signed(small, keys, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("signed") / "s.ppk"
    shutil.copytree(small, out)
    gate.sign(out, key=keys["key"])
    return out


@pytest.fixture
def work(signed, tmp_path) -> Path:
    dst = tmp_path / "w.ppk"
    shutil.copytree(signed, dst)
    return dst


def _run(*args):
    r = CliRunner().invoke(main, [str(a) for a in args])
    return r.exit_code, r.output


# -- the happy paths ----------------------------------------------------------------------------------
def test_key_signed_bundle_verifies_and_names_the_signer(signed, keys):
    code, out = _run("verify", signed, "--level", "structure", "--signed-by", keys["pub"])
    assert code == 0, out
    hint = json.loads((signed / "model.sig").read_text())["verificationMaterial"]["publicKey"]["hint"]
    assert f"signature OK: signed by key sha256:{hint[:16]}" in out
    assert out.strip().splitlines()[-1].startswith("verify OK")


def test_unsigned_bundle_verifies_as_before_and_says_so(small, keys):
    code, out = _run("verify", small, "--level", "structure")
    assert code == 0 and "signature: none (an unsigned bundle" in out
    code, out = _run("verify", small, "--level", "structure", "--signed-by", keys["pub"])
    assert code == 1 and "the bundle is not signed" in out


def test_signed_bundle_without_trust_says_it_is_unchecked(signed):
    code, out = _run("verify", signed, "--level", "structure")
    assert code == 0 and "signature: present, claims key sha256:" in out and "not checked" in out


def test_another_key_fails(signed, keys):
    code, out = _run("verify", signed, "--level", "structure", "--signed-by", keys["other_pub"])
    assert code == 1 and "signature FAILED" in out and "another key" in out


def test_certificate_mode_names_the_subject_and_needs_the_right_anchor(small, keys, tmp_path):
    b = tmp_path / "c.ppk"
    shutil.copytree(small, b)
    code, out = _run("sign", b, "--key", keys["pki_key"], "--cert", keys["pki_cert"], "--chain", keys["pki_ca"])
    assert code == 0, out
    code, out = _run("verify", b, "--level", "structure", "--signed-by", keys["pki_ca"])
    assert code == 0, out
    assert re.search(r"signature OK: signed by CN=release-bot <release@example.com>, issued by CN=Example Root CA", out)
    code, out = _run("verify", b, "--level", "structure", "--signed-by", keys["rogue_ca"])
    assert code == 1 and "signature FAILED" in out
    code, out = _run("verify", b, "--level", "structure", "--signed-by", keys["pub"])  # a key for a certificate signature
    assert code == 1 and "not a bare key" in out


def test_pack_carries_the_signature_and_unpack_keeps_it_valid(signed, keys, tmp_path):
    arc = tmp_path / "s.ppk.tar.zst"
    code, out = _run("pack", signed, "-o", arc)
    assert code == 0, out
    code, out = _run("unpack", arc, "-o", tmp_path / "back.ppk")
    assert code == 0, out
    assert (tmp_path / "back.ppk" / "model.sig").read_bytes() == (signed / "model.sig").read_bytes()
    code, out = _run("verify", tmp_path / "back.ppk", "--level", "structure", "--signed-by", keys["pub"])
    assert code == 0, out
    code, out = _run("verify", arc, "--level", "structure", "--signed-by", keys["pub"])  # the archive itself
    assert code == 0, out


def test_sign_refuses_a_damaged_bundle_and_an_existing_signature(work, keys):
    code, out = _run("sign", work, "--key", keys["key"])
    assert code == 2 and "already signed" in out
    (work / "notes.txt").write_text("x")
    code, out = _run("sign", work, "--key", keys["key"], "--force")
    assert code == 1 and "damaged bundle, not signing it" in out and "notes.txt" in out


def test_sign_errors_are_one_line(small, keys, tmp_path):
    b = tmp_path / "e.ppk"
    shutil.copytree(small, b)
    for args, words in ((["--key", tmp_path / "nope.pem"], "no such key file"),
                        ([], "give --key"),
                        (["--key", keys["pub"]], "cannot sign"),
                        (["--key", keys["pki_key"], "--cert", keys["pki_cert"]], "--chain")):
        code, out = _run("sign", b, *args)
        assert code == 2 and words in out and len(out.strip().splitlines()) == 1, (args, out)


# -- any edit fails with the key ------------------------------------------------------------------------
def _reseal(manifest: Path) -> None:
    """Recompute the manifest's own checksum over its (edited) bytes: only the signature can tell."""
    text = manifest.read_bytes()
    m = bundle_manifest._CHECKSUM_TAIL.search(text)
    if m is None:
        return
    digest = B.sha256_bytes(text[:m.start()]).encode()
    manifest.write_bytes(text[:m.start(1)] + digest + text[m.end(1):])


def _sweep(work: Path, pub: Path, stride: int) -> tuple[int, list[str]]:
    """Edit bytes (xor 0x01) of every file of ``work``, one at a time (every ``stride``-th, plus
    the first and last); the manifest resealed after each edit of its body. Returns the cases
    tried and those whose signature still held."""
    tried, held = 0, []
    for f in sorted(p for p in work.rglob("*") if p.is_file()):
        orig = f.read_bytes()
        tail = bundle_manifest._CHECKSUM_TAIL.search(orig) if f.name == B.MANIFEST else None
        body_end = tail.start() if tail else len(orig)
        for i in sorted(set(range(0, len(orig), stride)) | {0, len(orig) - 1}):
            buf = bytearray(orig)
            buf[i] ^= 0x01
            f.write_bytes(bytes(buf))
            if tail is not None and i < body_end:
                _reseal(f)
            tried += 1
            if signature.check(work, pub).ok:
                held.append(f"{f.relative_to(work)}@{i}")
        f.write_bytes(orig)
    assert signature.check(work, pub).ok  # restored
    return tried, held


def test_sampled_single_byte_edits_of_a_signed_bundle_all_fail(work, keys):
    tried, held = _sweep(work, keys["pub"], stride=29)
    assert tried > 150 and not held, held[:5]


@pytest.mark.slow
def test_every_single_byte_edit_of_a_signed_bundle_fails(work, keys):
    """Exhaustive: every byte of every file, the signature included (~5,000 cases)."""
    tried, held = _sweep(work, keys["pub"], stride=1)
    assert tried > 4000 and not held, held[:5]


def test_a_resealed_forgery_passes_structure_but_not_the_signature(work, keys):
    """The consistent forgeries the structure level cannot see (a tensor deleted with the source
    list fixed, a hyperparameter or a ledger text changed, the manifest resealed) fail with the key."""
    m = json.loads((work / "manifest.json").read_text())
    gone = m["tensors"].pop(0)
    (work / gone["file"]).unlink()
    listed = m["source"]["tensor_list"]
    listed["tensors"] = [t for t in listed["tensors"] if t["name"] != gone["name"]]
    listed["count"] = len(listed["tensors"])
    listed["sha256"] = B.sha256_bytes(B._canonical(listed["tensors"]))
    m["tensors"][0]["ledger"]["reason"] = "hand-checked"
    (work / "manifest.json").write_text(B.manifest_text(m))
    assert bundle_check.verify(work, level="structure").problems == []  # consistent: structure alone passes
    st = signature.check(work, keys["pub"])
    assert not st.ok and "changed since signing: manifest.json" in st.problem


def test_an_added_git_file_is_not_ignored(work, keys):
    """model-signing's own check skips .git* files; panelpack's does not."""
    (work / ".gitattributes").write_text("* binary\n")
    st = signature.check(work, keys["pub"])
    assert not st.ok and ".gitattributes" in st.problem
    code, out = _run("verify", work, "--level", "structure", "--signed-by", keys["pub"], "--allow-extra")
    assert code == 1 and "WARNING .gitattributes" in out and "signature FAILED" in out


def test_the_standard_tool_verifies_a_panelpack_signature(signed, keys):
    from model_signing import verifying

    verifying.Config().use_elliptic_key_verifier(public_key=keys["pub"]).verify(signed, signed / "model.sig")
