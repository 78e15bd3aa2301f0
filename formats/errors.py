"""The exceptions every part of panelpack raises, and the exit code each maps to.

Library code raises these; only the CLI turns them into a message and an exit code.
A message names the file, the tensor or field, and the problem, so a user can act on it.
"""

from __future__ import annotations

import os

EXIT_OK = 0
EXIT_VERIFY_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_INTERNAL = 3  # an unexpected exception: a panelpack bug, not a verdict on the input


class PanelpackError(Exception):
    """Base class. ``exit_code`` is what the CLI returns for it."""

    exit_code = EXIT_BAD_INPUT


class BadInputError(PanelpackError, ValueError):
    """The input (a file, a folder, an option) is malformed or unsupported.

    ``path`` and ``where`` (a tensor or field name) are optional and, when given, are put in
    front of the message: ``model.gguf: tensor 'blk.0.attn_q.weight': offset ... past end``.
    """

    def __init__(self, message: str, path: str | os.PathLike | None = None, where: str | None = None):
        self.path = os.fspath(path) if path is not None else None
        self.where = where
        self.detail = message
        parts = []
        if self.path:
            parts.append(self.path)
        if where:
            parts.append(where)
        parts.append(message)
        super().__init__(": ".join(parts))


class FormatError(BadInputError):
    """A file does not follow its format (truncated, wrong magic, lying header, ...)."""


class UnsupportedError(BadInputError):
    """Valid input that panelpack does not handle (an unknown type id, a layout a type cannot take)."""


class OutputError(PanelpackError, OSError):
    """The output cannot be written (exists without --force, read-only folder, full disk)."""


class VerificationError(PanelpackError):
    """Verification ran and found a mismatch, a missing file or a bad checksum."""

    exit_code = EXIT_VERIFY_FAILED
