"""The types :mod:`.cactus_tokenizer` and :mod:`.cactus_tokenizer_json` share: the tokenizer as
read from its source (:class:`TokenizerSpec`), as transformers resolves it (:class:`Resolved`), and
an added token's flag names. Their own module, so the JSON writer does not import the module that
calls it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

FLAG_KEYS = ("single_word", "lstrip", "rstrip", "normalized", "special")


@dataclass
class TokenizerSpec:
    """A tokenizer as transformers reads it from an HF folder: ``tokenizer.json``'s model and
    added tokens, ``tokenizer_config.json``, ``special_tokens_map.json``, the chat template file."""

    vocab: dict[str, int]
    merges: list[tuple[str, str]]
    added: list[tuple[int, str]]
    normalizer: Any = None
    decoder: Any = None
    byte_fallback: bool = False
    config: dict = field(default_factory=dict)
    special_map: dict = field(default_factory=dict)
    chat_file: Optional[str] = None
    model_type: str = ""
    has_config_file: bool = False
    spm_extras: Optional[list[str]] = None
    """SentencePiece sources: the control and user-defined pieces (else None)."""
    spm_plain: frozenset = frozenset()
    """Of those, the user-defined ones (added as not special, as the extractor does)."""
    source_json: Optional[dict] = None
    """The source ``tokenizer.json`` as parsed (None: there is none)."""
    added_flags: dict[int, dict] = field(default_factory=dict)
    """``single_word``/``lstrip``/``rstrip``/``normalized``/``special`` of ``added`` tokens, by id."""


@dataclass
class Resolved:
    """The tokenizer object cactus sees, after transformers has loaded and saved it."""

    vocab: dict[str, int]
    merges: list[tuple[str, str]]
    added: dict[int, str]  # the saved tokenizer.json's added tokens
    specials: dict[str, Optional[str]]
    normalizer: Any
    decoder: Any
    byte_fallback: bool
    max_length: Any
    chat_template: Optional[str]
    class_name: str = ""
    flags: dict[int, dict] = field(default_factory=dict)
    """The saved ``tokenizer.json``'s added-token flags, by id."""

    def token_id(self, tok: str) -> Optional[int]:
        for i, t in self.added.items():
            if t == tok:
                return i
        return self.vocab.get(tok)
