"""A Qwen3-style chat template (written for these tests, after the structure of Qwen3's: an
optional tool preamble in the system turn, ChatML turns, the reasoning of assistant turns after
the last user query kept in `<think>` blocks, tool results folded into user turns, and the
`enable_thinking` switch of the generation prompt), and a tokenizer directory that carries it."""

from __future__ import annotations

import json
from pathlib import Path

from tests.services.decoder.conftest import SidModel
from tests.services.gateway.test_text_codec import copy_tokenizer

QWEN3_STYLE_TEMPLATE = """\
{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {%- if messages[0].role == 'system' %}
        {{- messages[0].content + '\\n\\n' }}
    {%- endif %}
    {{- '# Tools\\n\\n<tools>' }}
    {%- for tool in tools %}
        {{- '\\n' }}{{- tool | tojson }}
    {%- endfor %}
    {{- '\\n</tools><|im_end|>\\n' }}
{%- elif messages[0].role == 'system' %}
    {{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}
{%- endif %}
{%- set state = namespace(searching=true, last_query=messages|length - 1) %}
{%- for message in messages[::-1] %}
    {%- set position = (messages|length - 1) - loop.index0 %}
    {%- if state.searching and message.role == 'user' and message.content is string
          and not message.content.startswith('<tool_response>') %}
        {%- set state.searching = false %}
        {%- set state.last_query = position %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- set text = message.content if message.content is string else '' %}
    {%- if message.role == 'user' or (message.role == 'system' and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\\n' + text + '<|im_end|>\\n' }}
    {%- elif message.role == 'assistant' %}
        {%- set thought = '' %}
        {%- if message.reasoning_content is string %}
            {%- set thought = message.reasoning_content %}
        {%- elif '</think>' in text %}
            {%- set thought = text.split('</think>')[0].rstrip('\\n') %}
            {%- set thought = thought.split('<think>')[-1].lstrip('\\n') %}
            {%- set text = text.split('</think>')[-1].lstrip('\\n') %}
        {%- endif %}
        {%- if loop.index0 > state.last_query and (loop.last or thought) %}
            {{- '<|im_start|>assistant\\n<think>\\n' + thought.strip('\\n') }}
            {{- '\\n</think>\\n\\n' + text.lstrip('\\n') }}
        {%- else %}
            {{- '<|im_start|>assistant\\n' + text }}
        {%- endif %}
        {{- '<|im_end|>\\n' }}
    {%- elif message.role == 'tool' %}
        {%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\\n<tool_response>\\n' + text + '\\n</tool_response>' }}
        {%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}
            {{- '<|im_end|>\\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\\n\\n</think>\\n\\n' }}
    {%- endif %}
{%- endif %}
"""


def qwen3_style_tokenizer(sid_model: SidModel, dest: Path) -> Path:
    """The tiny model's tokenizer with the Qwen3-style template (loadable by transformers)."""
    directory = copy_tokenizer(sid_model, dest, chat_template=QWEN3_STYLE_TEMPLATE)
    config = json.loads((directory / "tokenizer_config.json").read_text())
    assert config["chat_template"] == QWEN3_STYLE_TEMPLATE
    return directory
