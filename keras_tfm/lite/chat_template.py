"""Chat templates: a checkpoint's own Jinja2 template, rendered in a sandbox.

A checkpoint's `chat_template` (HF's tokenizer_config.json, GGUF's
`tokenizer.chat_template`) is a Jinja2 program. It is rendered as
transformers renders it (`apply_chat_template`): Jinja2's
`ImmutableSandboxedEnvironment` with `trim_blocks` and `lstrip_blocks`, the
loop controls, `raise_exception`, `strftime_now` and a `tojson` that keeps
non-ASCII text; the variables are `messages`, `add_generation_prompt` and
the tokenizer's special tokens (`bos_token`, `eos_token`, ...). The sandbox
is what makes a downloaded template safe to run: it refuses attribute
access to Python's internals and any change to the values passed in.

`single_turn_frame` splits a template's rendering of one user message into
the text before and after it, for the exported `chat` signature that
formats messages inside the graph.
"""

import datetime
import functools
import json

ROLES = ("system", "user", "assistant")
_CONTENT = "\x00keras_tfm-content\x00"  # cannot occur in a template's own text


def compile_chat_template(source):
    """`source` compiled in the sandbox (cached per source string).

    Raises:
        ValueError: `source` is not a string or not valid Jinja2.
    """
    if not isinstance(source, str) or not source:
        raise ValueError(
            f"A chat template must be a non-empty string. Received: {source!r:.200}"
        )
    return _compiled(source)


@functools.lru_cache(maxsize=16)
def _compiled(source):
    import jinja2
    import jinja2.ext
    import jinja2.sandbox

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        # Jinja2's own tojson escapes HTML characters, which templates do not want.
        return json.dumps(
            x,
            ensure_ascii=ensure_ascii,
            indent=indent,
            separators=separators,
            sort_keys=sort_keys,
        )

    def strftime_now(format):
        return datetime.datetime.now().strftime(format)

    environment = jinja2.sandbox.ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols]
    )
    environment.filters["tojson"] = tojson
    environment.globals["raise_exception"] = raise_exception
    environment.globals["strftime_now"] = strftime_now
    try:
        return environment.from_string(source)
    except jinja2.exceptions.TemplateSyntaxError as error:
        raise ValueError(
            f"The chat template is not valid Jinja2 (line {error.lineno}: "
            f"{error.message}). Received: chat_template={source!r:.200}"
        ) from None


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
    return [dict(message) for message in messages]


def render_chat_template(
    template, messages, add_generation_prompt=True, **special_tokens
):
    """Formats a conversation with a checkpoint's chat template.

    Args:
        template: the template's Jinja2 source.
        messages: a string (one user message) or a list of {"role",
            "content"} dicts, roles "system", "user" or "assistant".
        add_generation_prompt: end with the opening of an assistant turn, so
            that the model's continuation is its answer.
        **special_tokens: the tokenizer's special tokens the template may
            use (`bos_token="<s>"`, `eos_token=...`; None ones are left out).

    Returns:
        The text to tokenize.

    Raises:
        ValueError: the template refused the conversation (its
            `raise_exception` message, e.g. a role it does not take) or
            failed while rendering.

    Example:
    >>> template = (
    ...     "{% for m in messages %}<|im_start|>{{ m['role'] }}\\n"
    ...     "{{ m['content'] }}<|im_end|>\\n{% endfor %}"
    ...     "{% if add_generation_prompt %}<|im_start|>assistant\\n{% endif %}")
    >>> print(render_chat_template(template, "Hi!"))
    <|im_start|>user
    Hi!<|im_end|>
    <|im_start|>assistant
    <BLANKLINE>
    """
    import jinja2

    compiled = compile_chat_template(template)
    tokens = {name: value for name, value in special_tokens.items() if value}
    try:
        return compiled.render(
            messages=check_messages(messages),
            add_generation_prompt=bool(add_generation_prompt),
            tools=None,
            documents=None,
            **tokens,
        )
    except jinja2.exceptions.TemplateError as error:
        raise ValueError(
            f"The chat template refused the conversation: {error}. Received: "
            f"messages={str(messages)[:200]}"
        ) from None
    except (TypeError, KeyError, IndexError, AttributeError) as error:
        raise ValueError(
            f"The chat template failed on the conversation ({type(error).__name__}:"
            f" {error}). Received: messages={str(messages)[:200]}"
        ) from None


def single_turn_frame(template, **special_tokens):
    """The text before and after one user message in `template`'s rendering
    of that message with the generation prompt: `head + message + tail` is
    what `render_chat_template(template, message, **special_tokens)` gives.

    Raises:
        ValueError: the rendering does not hold the message once, as
            written (a template that changes or repeats the content).

    Example:
    >>> single_turn_frame("{{ bos_token }}[{{ messages[0]['content'] }}]",
    ...                   bos_token="<s>")
    ('<s>[', ']')
    """
    text = render_chat_template(template, _CONTENT, True, **special_tokens)
    if text.count(_CONTENT) != 1:
        raise ValueError(
            "The chat template does not place a user message in its output once "
            "and unchanged, so it cannot be applied inside a graph. Received: "
            f"chat_template={template!r:.200}"
        )
    head, tail = text.split(_CONTENT)
    return head, tail
