"""ChatML chat formatting, for checkpoints whose template is ChatML.

A checkpoint's `tokenizer.chat_template` is a Jinja2 program. Jinja2 is not
a dependency (and running a template from a downloaded file is running its
code), so the template is recognised instead: a ChatML template wraps each
message as `<|im_start|>{role}\\n{content}<|im_end|>\\n` and may insert a
default system message when the conversation has none (SmolLM2 does).
`apply_chatml` reproduces exactly that.
"""

import re

IM_START, IM_END = "<|im_start|>", "<|im_end|>"
ROLES = ("system", "user", "assistant")
# SmolLM2-style templates: `{% if loop.first and messages[0]['role'] !=
# 'system' %}{{ '<|im_start|>system\n...<|im_end|>\n' }}{% endif %}`.
_DEFAULT_SYSTEM = re.compile(
    r"messages\[0\]\['role'\]\s*!=\s*'system'\s*%\}\s*\{\{\s*'"
    + re.escape(IM_START)
    + r"system\n(.*?)"
    + re.escape(IM_END),
    re.DOTALL,
)


def parse_chatml_template(template):
    """The default system prompt of a ChatML `template` (None if it has none).

    Raises:
        ValueError: `template` is not a ChatML template.
    """
    if not isinstance(template, str) or not all(
        part in template
        for part in (IM_START, IM_END, "message['role']", "message['content']")
    ):
        shown = template if not isinstance(template, str) else template[:200]
        raise ValueError(
            "Only ChatML chat templates (<|im_start|>role\\ncontent<|im_end|>) "
            f"are supported. Received: chat_template={shown!r}"
        )
    match = _DEFAULT_SYSTEM.search(template)
    return match.group(1) if match else None


def check_messages(messages):
    """A list of {"role", "content"} dicts; a single string is one user turn."""
    if isinstance(messages, str):
        return [{"role": "user", "content": messages}]
    if not isinstance(messages, (list, tuple)) or not messages:
        raise ValueError(
            "`messages` must be a string or a non-empty list of "
            f'{{"role": ..., "content": ...}} dicts. Received: messages={messages!r}'
        )
    for message in messages:
        if (
            not isinstance(message, dict)
            or set(message) != {"role", "content"}
            or message["role"] not in ROLES
            or not isinstance(message["content"], str)
        ):
            raise ValueError(
                'Each message must be {"role": one of '
                f'{list(ROLES)}, "content": a string}}. Received: {message!r}'
            )
    return list(messages)


def apply_chatml(messages, add_generation_prompt=True, default_system_prompt=None):
    """Formats a conversation as ChatML text.

    Args:
        messages: a string (one user message) or a list of {"role",
            "content"} dicts, roles "system", "user" or "assistant".
        add_generation_prompt: end with the opening of an assistant turn, so
            that the model's continuation is its answer.
        default_system_prompt: a system message put first when the
            conversation does not start with one (None: none).

    Returns:
        The text to tokenize.

    Example:
    >>> print(apply_chatml("Hi!", default_system_prompt="Be brief."))
    <|im_start|>system
    Be brief.<|im_end|>
    <|im_start|>user
    Hi!<|im_end|>
    <|im_start|>assistant
    <BLANKLINE>
    """
    messages = check_messages(messages)
    if default_system_prompt is not None and messages[0]["role"] != "system":
        messages = [{"role": "system", "content": default_system_prompt}] + messages
    text = "".join(f"{IM_START}{m['role']}\n{m['content']}{IM_END}\n" for m in messages)
    if add_generation_prompt:
        text += f"{IM_START}assistant\n"
    return text
