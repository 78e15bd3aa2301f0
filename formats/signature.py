"""A bundle's signature: ``model.sig``, in the OpenSSF model-signing format (docs/FORMAT.md, "Signature").

``model.sig`` is a Sigstore bundle (JSON) whose DSSE envelope carries an in-toto statement: the
digest of every file of the bundle (``manifest.json`` and the tensor and source files; the
signature itself excluded) and the serialization used (``files``, BLAKE3 or SHA-256 as the
bundle's own digests, no symlinks). It is made and checked by the ``model-signing`` package
(an optional extra: ``pip install 'panelpack[sign]'``), so the standard tool verifies a
panelpack bundle too (``model_signing verify key --signature B/model.sig --public_key K B``).

Modes: a private elliptic-curve key (``key``: the verifier holds the public key), a key with
its signing certificate and chain (``certificate``: the verifier holds the trust anchors), and
Sigstore's keyless signing (``sigstore``: an OIDC identity, needs the network; untested here).

What panelpack adds to model-signing's verification, so that *every* byte of a signed bundle
counts (model-signing alone ignores ``.git*`` files, skips what the signer chose to ignore,
and parses its JSON leniently):

* the file is exactly the canonical text of its content (compact JSON, the fields of its mode
  and nothing else, canonical base64, the constant fields at their values) - panelpack
  writes it that way;
* the signed statement lists exactly the files the bundle holds, with no ignored paths but
  ``model.sig``;
* a certificate chain is a chain: each certificate issued by the next, the last by a trust
  anchor (a self-signed one must be an anchor, byte for byte).
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

from . import atomic
from .bundle import MANIFEST, SIGNATURE, Bundle
from .errors import BadInputError, UnsupportedError, VerificationError

log = logging.getLogger(__name__)

MEDIA_TYPE = "application/vnd.dev.sigstore.bundle.v0.3+json"
PAYLOAD_TYPE = "application/vnd.in-toto+json"
MAX_BYTES = 4 << 20  # a signature is a few KiB (a certificate chain, a statement of the files)
_INSTALL = "signing needs the 'sign' extra: pip install 'panelpack[sign]' (model-signing and pyopenssl)"


def _model_signing():
    try:
        import model_signing.hashing
        import model_signing.signing
        import model_signing.verifying
    except ImportError:
        raise UnsupportedError(_INSTALL) from None
    return model_signing


@dataclass(frozen=True)
class Signer:
    """Who a signature says signed: ``kind`` (key, certificate, sigstore) and a description."""

    kind: str
    who: str

    def __str__(self) -> str:
        return self.who


@dataclass(frozen=True)
class SignatureStatus:
    """What ``verify`` reports of a bundle's signature. ``verified``: checked against the trust
    given and sound; otherwise ``signer`` is only what the file claims (unchecked)."""

    present: bool
    verified: bool = False
    signer: Optional[Signer] = None
    problem: Optional[str] = None

    @property
    def ok(self) -> bool:
        return self.problem is None

    def render(self) -> str:
        from .text import escape

        if self.problem:
            return f"signature FAILED: {escape(self.problem)}"
        if not self.present:
            return "signature: none (an unsigned bundle; `panelpack sign` signs one)"
        if self.verified:
            return f"signature OK: signed by {escape(self.signer)}; every file is the one signed"
        return (f"signature: present, claims {escape(self.signer)}; not checked (pass --signed-by KEY|CERT to "
                "check it)")

    def to_json(self) -> dict[str, Any]:
        return {"present": self.present, "verified": self.verified, "ok": self.ok,
                "kind": self.signer.kind if self.signer else None,
                "signer": self.signer.who if self.signer else None, "problem": self.problem}


# =============================================================================================
# signing
# =============================================================================================
@dataclass(frozen=True)
class SignResult:
    path: Path
    signer: Signer
    files: int

    def render(self) -> str:
        from .text import escape

        return f"signed {escape(self.path)}: {self.files} files, {SIGNATURE} by {escape(self.signer)}"

    def to_json(self) -> dict[str, Any]:
        return {"path": str(self.path), "signature": str(self.path / SIGNATURE), "kind": self.signer.kind,
                "signer": self.signer.who, "files": self.files}


def sign(bundle: str | os.PathLike | Bundle, key: Optional[str | os.PathLike] = None,
         certificate: Optional[str | os.PathLike] = None, chain: Sequence[str | os.PathLike] = (),
         password: Optional[str] = None, keyless: bool = False, identity_token: Optional[str] = None,
         staging: bool = False, force: bool = False) -> SignResult:
    """Write ``model.sig`` into ``bundle`` (atomically; an existing signature only with ``force``).

    ``key`` alone: key mode; ``key`` + ``certificate`` (+ ``chain``, the issuing certificates):
    certificate mode; ``keyless``: Sigstore (network and an OIDC identity). The caller checks
    the bundle first (``panelpack.verify.gate.sign`` does): a signature vouches for its bytes."""
    b = bundle if isinstance(bundle, Bundle) else Bundle(bundle)
    target = b.path / SIGNATURE
    if target.exists() and not force:
        raise BadInputError(f"already signed ({SIGNATURE} exists); pass --force to replace the signature", path=b.path)
    ms = _model_signing()
    config = ms.signing.Config().set_hashing_config(_hashing(ms, b))
    try:
        if keyless:
            if key or certificate:
                raise BadInputError("keyless signing takes no --key or --cert")
            config.use_sigstore_signer(identity_token=identity_token, use_staging=staging)
        elif key is None:
            raise BadInputError("give --key (and --cert for certificate signing), or --keyless")
        elif certificate is not None:
            if not chain:
                raise BadInputError("certificate signing needs the issuing certificate(s): --chain CA.pem")
            config.use_certificate_signer(private_key=_readable(key, "key"),
                                          signing_certificate=_readable(certificate, "certificate"),
                                          certificate_chain=[_readable(c, "chain certificate") for c in chain])
        else:
            config.use_elliptic_key_signer(private_key=_readable(key, "key"),
                                            password=password.encode() if isinstance(password, str) else password)
        with tempfile.TemporaryDirectory(prefix="panelpack-sign-") as tmp:
            config.sign(b.path, Path(tmp) / SIGNATURE)
            text = (Path(tmp) / SIGNATURE).read_bytes()
    except (ValueError, TypeError, OSError) as e:  # a bad key, password or certificate
        raise BadInputError(f"cannot sign: {_one_line(e)}", path=b.path) from None
    except Exception as e:  # the keyless flow's network and identity errors
        if keyless:
            raise BadInputError(f"keyless signing failed: {type(e).__name__}: {_one_line(e)}", path=b.path) from None
        raise
    doc = json.loads(text)
    atomic.write_bytes(target, _canonical(doc), force=True)
    signer = _claimed(doc)
    log.info("signed %s (%s)", b.path, signer)
    return SignResult(b.path, signer, len(_files(b.path)))


def _hashing(ms, b: Bundle):
    """Every file but the signature, hashed as the bundle's own digests are (BLAKE3 or SHA-256)."""
    algorithm = "blake3" if b.digest.name == "blake3" else "sha256"
    return (ms.hashing.Config().set_ignored_paths(paths=[SIGNATURE], ignore_git_paths=False)
            .use_file_serialization(hashing_algorithm=algorithm, allow_symlinks=False))


def _readable(path: str | os.PathLike, what: str) -> Path:
    p = Path(path)
    if not p.is_file():
        raise BadInputError(f"no such {what} file", path=p)
    return p


def _one_line(e: BaseException) -> str:
    return (str(e).splitlines() or [type(e).__name__])[0][:300]


# =============================================================================================
# checking
# =============================================================================================
def status(path: str | os.PathLike) -> SignatureStatus:
    """Whether a bundle is signed, and whom its signature names (not checked: no trust given)."""
    p = Path(path) / SIGNATURE
    if not p.is_file():
        return SignatureStatus(present=False)
    try:
        doc = _parse(p)
        return SignatureStatus(present=True, signer=_claimed(doc))
    except (VerificationError, BadInputError) as e:
        return SignatureStatus(present=True, signer=Signer("unknown", f"unreadable ({e})"))


def check(path: str | os.PathLike, signed_by: Optional[str | os.PathLike] = None,
          identity: Optional[str] = None, issuer: Optional[str] = None) -> SignatureStatus:
    """Check ``path``'s signature against ``signed_by`` (a PEM public key: key mode; PEM
    certificates: the trust anchors of certificate mode) or a Sigstore ``identity`` and OIDC
    ``issuer`` (keyless). Returns a verified status, or one whose ``problem`` says why it fails
    (no signature, a changed file, another signer, a non-canonical signature file)."""
    root = Path(path)
    p = root / SIGNATURE
    if not p.is_file():
        return SignatureStatus(present=False, problem=f"the bundle is not signed (no {SIGNATURE})")
    try:
        doc = _parse(p)
        kind = _mode(doc)
        ms = _model_signing()
        config = ms.verifying.Config()
        anchors: list = []
        if identity is not None or issuer is not None:
            if kind != "sigstore":
                raise VerificationError(f"signed with a {kind}, not by a Sigstore identity")
            if not (identity and issuer):
                raise BadInputError("keyless verification needs both the identity and the OIDC issuer")
            config.use_sigstore_verifier(identity=identity, oidc_issuer=issuer)
        else:
            if signed_by is None:
                raise BadInputError("give the public key or certificate to check the signature with")
            trust = _readable(signed_by, "public key or certificate")
            pem = trust.read_bytes()
            if b"-----BEGIN CERTIFICATE-----" in pem:
                if kind != "certificate":
                    raise VerificationError(f"signed with a {kind}, not a certificate ({trust} holds certificates)")
                anchors = _load_certificates(pem, trust)
                config.use_certificate_verifier(certificate_chain=[trust])
            elif b"PUBLIC KEY-----" in pem:
                if kind != "key":
                    raise VerificationError(f"signed with a {kind}, not a bare key ({trust} holds a public key)")
                config.use_elliptic_key_verifier(public_key=trust)
            else:
                raise BadInputError("not a PEM public key or certificate", path=trust)
        if kind == "certificate":
            _check_chain(doc, anchors)
        try:
            config.verify(root, p)
        except Exception as e:  # model-signing's ValueError, OpenSSL's store errors, a wrong key ...
            raise VerificationError(_explain(e)) from None
        _check_statement(doc, root)
        return SignatureStatus(present=True, verified=True, signer=_claimed(doc))
    except VerificationError as e:
        return SignatureStatus(present=True, problem=str(e))


def _explain(e: Exception) -> str:
    import re

    text = _one_line(e)
    if text.startswith("Signature mismatch"):  # model-signing lists the files; name them plainly
        msg = str(e).replace("\\'", "'")  # (a list's repr inside the message escapes the quotes)
        changed = re.findall(r"Hash mismatch for '([^']+)'", msg)
        added = re.findall(r"Extra files found in model '[^']*': ([^\]\"']+)", msg)
        gone = re.findall(r"Missing files in model '[^']*': ([^\]\"']+)", msg)
        parts = ([f"changed since signing: {', '.join(changed[:5])}"] if changed else []) + \
            [f"not signed: {a.strip()}" for a in added] + [f"missing: {g.strip()}" for g in gone]
        return "; ".join(parts) or "a file differs from the one signed"
    if "Key mismatch" in text:
        return "signed with another key"
    if type(e).__name__ == "InvalidSignature":
        return "the signature does not match the signed statement (another key, or the signature was edited)"
    return f"{type(e).__name__}: {text}"


def _parse(p: Path) -> dict[str, Any]:
    """The signature's JSON, held to its canonical text (VerificationError otherwise)."""
    raw = p.read_bytes() if p.stat().st_size <= MAX_BYTES else None
    if raw is None:
        raise VerificationError(f"{SIGNATURE} is larger than {MAX_BYTES >> 20} MiB")
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise VerificationError(f"{SIGNATURE} is not JSON ({_one_line(e)})") from None
    if not isinstance(doc, dict):
        raise VerificationError(f"{SIGNATURE} is not a JSON object")
    if _canonical(doc) != raw:
        raise VerificationError(f"{SIGNATURE} is not in its canonical form (edited after signing)")
    _check_base64(doc)
    return doc


def _canonical(doc: Any) -> bytes:
    """Compact JSON in the document's own key order: how panelpack writes ``model.sig``."""
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode("utf-8")


def _check_base64(doc: Any) -> None:
    """Padded base64 strings must be canonical (the bits the padding leaves over zero): else
    two spellings decode to the same bytes and an edit would go unnoticed."""
    stack = [doc]
    while stack:
        v = stack.pop()
        if isinstance(v, dict):
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
        elif isinstance(v, str) and v.endswith("="):
            try:
                raw = base64.b64decode(v, validate=True)
            except (binascii.Error, ValueError):
                continue
            if base64.b64encode(raw).decode() != v:
                raise VerificationError(f"{SIGNATURE} holds a non-canonical base64 string (edited after signing)")


#: the exact fields of each offline mode (keyless signatures carry Sigstore's own material)
_FIXED = {"mediaType": MEDIA_TYPE}


def _mode(doc: dict[str, Any]) -> str:
    """``key``, ``certificate`` or ``sigstore``, with the document's shape checked for the
    offline modes: exactly the fields model-signing writes, the constants at their values."""
    try:
        vm, env = doc["verificationMaterial"], doc["dsseEnvelope"]
        if set(doc) != {"mediaType", "verificationMaterial", "dsseEnvelope"} or doc["mediaType"] != MEDIA_TYPE:
            raise KeyError("mediaType")
        if set(env) != {"payload", "payloadType", "signatures"} or env["payloadType"] != PAYLOAD_TYPE:
            raise KeyError("dsseEnvelope")
        sigs = env["signatures"]
        if not (isinstance(sigs, list) and len(sigs) == 1 and isinstance(sigs[0], dict)
                and isinstance(sigs[0].get("sig"), str) and isinstance(env["payload"], str)):
            raise KeyError("signatures")
        if "publicKey" in vm:
            if (set(vm) != {"publicKey", "tlogEntries"} or vm["tlogEntries"] != [] or set(vm["publicKey"]) != {"hint"}
                    or set(sigs[0]) != {"sig", "keyid"} or sigs[0]["keyid"] != ""):
                raise KeyError("publicKey")
            return "key"
        if "x509CertificateChain" in vm:
            certs = vm["x509CertificateChain"]["certificates"]
            if (set(vm) != {"x509CertificateChain", "tlogEntries"} or vm["tlogEntries"] != []
                    or set(vm["x509CertificateChain"]) != {"certificates"} or not isinstance(certs, list) or not certs
                    or any(not isinstance(c, dict) or set(c) != {"rawBytes"} for c in certs)
                    or set(sigs[0]) != {"sig", "keyid"} or sigs[0]["keyid"] != ""):
                raise KeyError("x509CertificateChain")
            return "certificate"
        if "certificate" in vm:
            return "sigstore"
    except (KeyError, TypeError, AttributeError) as e:
        raise VerificationError(f"{SIGNATURE} is not a model-signing signature (field {e.args[0] if e.args else '?'})") from None
    raise VerificationError(f"{SIGNATURE} names no key or certificate")


def _statement(doc: dict[str, Any]) -> dict[str, Any]:
    try:
        return json.loads(base64.b64decode(doc["dsseEnvelope"]["payload"], validate=True))
    except (KeyError, TypeError, ValueError, binascii.Error) as e:
        raise VerificationError(f"{SIGNATURE}: unreadable statement ({_one_line(e)})") from None


def _files(root: Path) -> list[str]:
    out = []
    for dirpath, _, filenames in os.walk(root):
        for f in filenames:
            rel = (Path(dirpath) / f).relative_to(root).as_posix()
            if rel != SIGNATURE:
                out.append(rel)
    return sorted(out)


def _check_statement(doc: dict[str, Any], root: Path) -> None:
    """The (now authenticated) statement covers every file of the bundle, ignoring nothing but
    the signature: model-signing's own check skips ``.git*`` files and what the signer ignored."""
    st = _statement(doc)
    try:
        pred = st["predicate"]
        ser = pred["serialization"]
        names = sorted(r["name"] for r in pred["resources"])
    except (KeyError, TypeError) as e:
        raise VerificationError(f"{SIGNATURE}: the signed statement lacks {e}") from None
    if ser.get("method") != "files" or ser.get("allow_symlinks") or set(ser.get("ignore_paths", [])) - {SIGNATURE}:
        raise VerificationError(f"{SIGNATURE}: signed with a serialization panelpack does not accept ({ser})")
    have = _files(root)
    if names != have or MANIFEST not in names:
        extra, missing = sorted(set(have) - set(names)), sorted(set(names) - set(have))
        raise VerificationError(f"the files differ from those signed (not signed: {extra[:5]}; missing: {missing[:5]})")


def _load_certificates(pem: bytes, where: Path) -> list:
    from cryptography import x509

    try:
        return x509.load_pem_x509_certificates(pem)
    except ValueError as e:
        raise BadInputError(f"unreadable certificate(s): {_one_line(e)}", path=where) from None


def _chain(doc: dict[str, Any]) -> list:
    from cryptography import x509

    try:
        return [x509.load_der_x509_certificate(base64.b64decode(c["rawBytes"], validate=True))
                for c in doc["verificationMaterial"]["x509CertificateChain"]["certificates"]]
    except (ValueError, binascii.Error) as e:
        raise VerificationError(f"{SIGNATURE}: unreadable certificate ({_one_line(e)})") from None


def _check_chain(doc: dict[str, Any], anchors: list) -> None:
    """Each certificate of the signature's chain is issued by the next, the last by an anchor; a
    self-signed one must be an anchor itself: no certificate in it goes unchecked."""
    from cryptography.hazmat.primitives.serialization import Encoding

    chain = _chain(doc)
    trusted = {a.public_bytes(Encoding.DER) for a in anchors}

    def issued_by(c, issuer) -> bool:
        try:
            c.verify_directly_issued_by(issuer)
            return True
        except Exception:  # cryptography's InvalidSignature, ValueError (another issuer), TypeError (key type)
            return False

    for i, c in enumerate(chain):
        if c.public_bytes(Encoding.DER) in trusted:
            if i == 0:
                raise VerificationError("the signing certificate is itself a trust anchor; give its issuer")
            return
        nxt = chain[i + 1] if i + 1 < len(chain) else None
        if nxt is not None and issued_by(c, nxt):
            continue
        if any(issued_by(c, a) for a in anchors):
            if nxt is not None:
                raise VerificationError(f"certificate {i + 2} of the signature's chain is not used")
            return
        raise VerificationError("the signing certificate does not chain to the trust anchors given")


def _claimed(doc: dict[str, Any]) -> Signer:
    """Whom the signature names: the public key's fingerprint, or the signing certificate's
    subject and e-mail/URI names (keyless: the Sigstore identity)."""
    vm = doc.get("verificationMaterial", {})
    if "publicKey" in vm:
        return Signer("key", f"key sha256:{str(vm['publicKey'].get('hint', '?'))[:16]} (the sha256 of its PEM public key)")
    try:
        if "x509CertificateChain" in vm:
            cert, kind = _chain(doc)[0], "certificate"
        elif "certificate" in vm:
            from cryptography import x509

            cert = x509.load_der_x509_certificate(base64.b64decode(vm["certificate"]["rawBytes"]))
            kind = "sigstore"
        else:
            return Signer("unknown", "no key or certificate named")
    except (VerificationError, KeyError, TypeError, ValueError, binascii.Error):
        return Signer("unknown", "an unreadable certificate")
    return Signer(kind, _describe_certificate(cert))


def _describe_certificate(cert) -> str:
    from cryptography import x509

    names: list[str] = []
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        names = san.get_values_for_type(x509.RFC822Name) + san.get_values_for_type(x509.UniformResourceIdentifier)
    except x509.ExtensionNotFound:
        pass
    return f"{cert.subject.rfc4514_string()}" + (f" <{', '.join(names)}>" if names else "") + \
        f", issued by {cert.issuer.rfc4514_string()}"
