"""The model's tokenizer on the gateway side: prompt text -> ids, beams -> text, chat -> prompt.

Uses the `tokenizers` library on `tokenizer.json` (no transformers, no torch). The directory is
`WIDEBEAM_GATEWAY_MODEL_DIR`, else the model path the decoder reports in GetInfo when this
machine can read it; without either, only token-id prompts work and choices carry no text."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

from widebeam.services.gateway.chat_template import ChatRenderer, load_chat_template

log = logging.getLogger(__name__)


class TextCodec:
    def __init__(self, tokenizer: Tokenizer, chat: ChatRenderer, source: str) -> None:
        self.tokenizer = tokenizer
        self.chat = chat
        self.source = source

    @classmethod
    def load(cls, model_dir: str | Path) -> TextCodec | None:
        root = Path(model_dir)
        file = root / "tokenizer.json"
        if not file.is_file():
            return None
        try:
            tokenizer = Tokenizer.from_file(str(file))
        except Exception as exc:
            log.warning("cannot read %s (%s): prompts must be token ids", file, exc)
            return None
        chat = ChatRenderer(load_chat_template(root), _special_tokens(root))
        log.info("tokenizer from %s; chat prompts: %s", root, chat.source)
        return cls(tokenizer, chat, str(root))

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        # encode_batch, not encode: the same ids, but it releases the GIL while it works, so
        # a long prompt tokenized on a worker thread leaves the event loop running.
        (encoding,) = self.tokenizer.encode_batch([text], add_special_tokens=add_special_tokens)
        return list(encoding.ids)

    def decode(self, ids: list[int]) -> str:
        return str(self.tokenizer.decode(ids, skip_special_tokens=True))

    def tokens(self, ids: list[int]) -> list[str]:
        return [self.tokenizer.id_to_token(i) or "" for i in ids]

    def chat_prompt(
        self, messages: list[dict[str, str]], template_kwargs: Mapping[str, Any] | None = None
    ) -> list[int]:
        # The template already writes the special tokens; the post-processor must not add more.
        text = self.chat.render(messages, template_kwargs)
        return self.encode(text, add_special_tokens=False)


# transformers' named special tokens: the chat template sees those the tokenizer has.
SPECIAL_TOKEN_NAMES = (
    "bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token",
)  # fmt: skip


def _special_tokens(root: Path) -> dict[str, str]:
    """The special token strings the chat template sees, as transformers passes them: only
    those the tokenizer config sets (HF stores a str or {"content": ...})."""
    config_file = root / "tokenizer_config.json"
    try:
        config = json.loads(config_file.read_text()) if config_file.is_file() else {}
    except (OSError, ValueError):
        config = {}
    out: dict[str, str] = {}
    for key in SPECIAL_TOKEN_NAMES:
        value = config.get(key)
        if isinstance(value, dict):
            value = value.get("content")
        if isinstance(value, str):
            out[key] = value
    return out
