"""Chat messages -> prompt text, with the model's own chat template when it has one.

The template comes from `chat_template.jinja` or `tokenizer_config.json` ("chat_template") in
the model directory and is rendered the way transformers renders it (sandboxed jinja2, trimmed
blocks), without importing transformers (the gateway needs no torch). Without a template, or
without jinja2, the prompt is ChatML — the format of the Qwen models widebeam serves:

    <|im_start|>{role}\\n{content}<|im_end|>\\n ... <|im_start|>assistant\\n
"""

from __future__ import annotations

import json
import logging
from datetime import datetime
from pathlib import Path
from typing import Any

from widebeam.services.http.errors import bad_request

log = logging.getLogger(__name__)


def load_chat_template(model_dir: Path) -> str | None:
    jinja_file = model_dir / "chat_template.jinja"
    if jinja_file.is_file():
        return jinja_file.read_text()
    config_file = model_dir / "tokenizer_config.json"
    if not config_file.is_file():
        return None
    template = json.loads(config_file.read_text()).get("chat_template")
    if isinstance(template, list):  # named templates: [{"name": ..., "template": ...}]
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        template = named.get("default")
    return template if isinstance(template, str) and template else None


def chatml(messages: list[dict[str, str]]) -> str:
    turns = [f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages]
    return "".join(turns) + "<|im_start|>assistant\n"


class ChatRenderer:
    def __init__(self, template: str | None, special_tokens: dict[str, str]) -> None:
        self.special_tokens = special_tokens
        self._compiled: Any = None
        self.source = "chatml (fallback)"
        if template is None:
            return
        try:
            self._compiled = _compile(template)
            self.source = "model chat template"
        except ImportError:
            log.warning("jinja2 is not installed: using ChatML instead of the model's template")
        except Exception as exc:  # a broken template is the model's fault, not the request's
            log.warning("the model's chat template does not compile (%s): using ChatML", exc)

    def render(self, messages: list[dict[str, str]]) -> str:
        if self._compiled is None:
            return chatml(messages)
        try:
            return str(
                self._compiled.render(
                    messages=messages, add_generation_prompt=True, **self.special_tokens
                )
            )
        except _TemplateError as exc:
            raise bad_request(f"messages: {exc}", param="messages") from None
        except Exception as exc:  # e.g. a field the template expects is missing
            message = f"messages: the model's chat template cannot render them: {exc}"
            raise bad_request(message, param="messages") from None


class _TemplateError(Exception):
    """raise_exception() inside a template: the messages break the template's rules."""


def _raise(message: str) -> None:
    raise _TemplateError(message)


def _compile(template: str) -> Any:
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols]
    )
    env.filters["tojson"] = lambda x, indent=None, **_: json.dumps(
        x, indent=indent, ensure_ascii=False
    )
    env.globals["raise_exception"] = _raise
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env.from_string(template)
