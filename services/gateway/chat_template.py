"""Chat messages -> prompt text, with the model's own chat template when it has one.

The template comes from `chat_template.jinja` or `tokenizer_config.json` ("chat_template") in
the model directory and is rendered the way transformers' `apply_chat_template(messages,
add_generation_prompt=True, **kwargs)` renders it — the same sandboxed jinja2 environment, the
same globals (`raise_exception`, `strftime_now`, `namespace`, `dict`, the `tojson` filter),
`tools` and `documents` as None unless given, and the tokenizer's special tokens as variables —
without importing transformers (the gateway needs no torch). Without a template, or without
jinja2, the prompt is ChatML — the format of the Qwen models widebeam serves:

    <|im_start|>{role}\\n{content}<|im_end|>\\n ... <|im_start|>assistant\\n

`template_kwargs` (a chat request's `chat_template_kwargs`) are variables for the template, as
transformers' `**kwargs` are: `enable_thinking=False` reaches a Qwen3 template's
`enable_thinking` branch; a key the template never reads changes nothing; a key named like a
special token replaces it. Keys naming what the gateway itself decides (`messages`,
`add_generation_prompt`, and transformers' other `apply_chat_template` options) are a 400."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any, ClassVar

from widebeam.services.http.errors import bad_request

log = logging.getLogger(__name__)

TEMPLATE_KWARGS_PARAM = "chat_template_kwargs"
# apply_chat_template's own parameters: given as kwargs they would not reach the template as
# variables but change what transformers does, so they are refused rather than misread.
RESERVED_TEMPLATE_KWARGS = frozenset(
    {
        "messages",
        "conversation",
        "add_generation_prompt",
        "continue_final_message",
        "chat_template",
        "tokenize",
        "sanitize_control_tokens",
        "padding",
        "truncation",
        "max_length",
        "return_tensors",
        "return_dict",
        "return_assistant_tokens_mask",
        "tokenizer_kwargs",
    }
)


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


def check_template_kwargs(template_kwargs: Mapping[str, Any]) -> None:
    """400 naming the first key the gateway decides itself (see `RESERVED_TEMPLATE_KWARGS`)."""
    for key in template_kwargs:
        if key in RESERVED_TEMPLATE_KWARGS:
            raise bad_request(
                f"{TEMPLATE_KWARGS_PARAM}.{key}: not a template variable (the gateway sets it: "
                "the messages come from `messages`, and a chat prompt always ends with the "
                "assistant's turn)",
                param=TEMPLATE_KWARGS_PARAM,
            )
    for key in ("tools", "documents"):
        value = template_kwargs.get(key)
        if value is not None and not (
            isinstance(value, list) and all(isinstance(v, dict) for v in value)
        ):
            raise bad_request(
                f"{TEMPLATE_KWARGS_PARAM}.{key} must be a list of JSON objects",
                param=TEMPLATE_KWARGS_PARAM,
            )


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

    def render(
        self, messages: list[dict[str, str]], template_kwargs: Mapping[str, Any] | None = None
    ) -> str:
        """The prompt of `messages`; `template_kwargs` are the template's extra variables
        (ChatML, the fallback, has none to read)."""
        template_kwargs = template_kwargs or {}
        check_template_kwargs(template_kwargs)
        if self._compiled is None:
            return chatml(messages)
        variables: dict[str, Any] = {"tools": None, "documents": None}
        variables |= self.special_tokens  # what transformers does: kwargs win over these
        variables |= template_kwargs
        try:
            return str(
                self._compiled.render(messages=messages, add_generation_prompt=True, **variables)
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


def _tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    # Not jinja's own filter, which escapes HTML characters: templates write JSON for the model.
    return json.dumps(
        value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


def _compile(template: str) -> Any:
    from jinja2 import nodes
    from jinja2.exceptions import SecurityError
    from jinja2.ext import Extension, loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment
    from jinja2.utils import Namespace

    class TemplateNamespace(Namespace):
        """`namespace(...)` that stores no underscore names (a way out of the sandbox)."""

        def __init__(*args: Any, **kwargs: Any) -> None:
            self, rest = args[0], args[1:]
            attrs = dict(*rest, **kwargs)
            for name in attrs:
                TemplateNamespace.check_name(name)
            Namespace.__init__(self, attrs)

        def __setitem__(self, name: str, value: Any) -> None:
            TemplateNamespace.check_name(name)
            Namespace.__setitem__(self, name, value)

        @staticmethod
        def check_name(name: object) -> None:
            if isinstance(name, str) and name.startswith("_"):
                raise SecurityError(f"a namespace cannot hold {name!r} (underscore names)")

    class TemplateDict:
        """`dict(...)` and `dict.fromkeys(...)` without the type itself (no attribute tricks)."""

        def __call__(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
            return dict(*args, **kwargs)

        def fromkeys(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
            return dict.fromkeys(*args, **kwargs)

    class GenerationBlock(Extension):
        """`{% generation %}...{% endgeneration %}` renders its body (transformers marks the
        assistant's tokens with it; a prompt needs no mask)."""

        tags: ClassVar[set[str]] = {"generation"}

        def parse(self, parser: Any) -> Any:
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            call = self.call_method("_body")
            return nodes.CallBlock(call, [], [], body).set_lineno(lineno)

        def _body(self, caller: Any) -> str:
            return str(caller())

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[GenerationBlock, loopcontrols]
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    env.globals["namespace"] = TemplateNamespace
    env.globals["dict"] = TemplateDict()
    return env.from_string(template)
