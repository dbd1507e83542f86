"""Checks of the OpenAI request fields: each wrong one is a named 400.

Every function takes the parsed JSON body and returns plain Python values,
or raises `ApiError` naming the field and quoting what was received. A
field this server does not implement is refused by name rather than
silently ignored (a client that asks for `tools` or `logit_bias` would
otherwise trust an answer that does not honour them).
"""

import random

from keras_tfm.generation.continuous_batching.scheduler import MAX_TOP_LOGPROBS
from keras_tfm.generation.grammar import response_format_regex
from keras_tfm.serving.api_errors import ApiError

# OpenAI's limit on completions' `logprobs` (the alternatives per token).
MAX_COMPLETION_LOGPROBS = 5

SAMPLING = {"model", "max_tokens", "temperature", "top_p", "seed", "stop", "stream"}
SAMPLING |= {"stream_options", "n", "user", "presence_penalty", "frequency_penalty"}
SAMPLING |= {"logprobs", "response_format"}
CHAT_FIELDS = SAMPLING | {"messages", "max_completion_tokens", "top_logprobs"}
COMPLETION_FIELDS = SAMPLING | {"prompt", "echo"}
# The most prompts one completions request may hold (each its own answer).
MAX_PROMPTS = 64
EMBEDDING_FIELDS = {"model", "input", "encoding_format", "user"}
ROLES = ("system", "user", "assistant")


def bad(param, wanted, value):
    """The 400 of a field with a wrong type or value."""
    shown = repr(value)
    shown = shown if len(shown) <= 80 else shown[:77] + "..."
    return ApiError(
        400, f"`{param}` must be {wanted}. Received: {param}={shown}", param=param
    )


def check_fields(body, allowed, model_id, require_model=True):
    """The body is an object of the fields `allowed` naming the served model.

    With `require_model=False` (vLLM's tokenizer routes) `model` may be absent.
    """
    if not isinstance(body, dict):
        raise ApiError(
            400,
            f"The request body must be a JSON object. Received: {type(body).__name__}",
        )
    unsupported = sorted(set(body) - allowed)
    if unsupported:
        raise ApiError(
            400,
            f"Unsupported field(s): {', '.join(unsupported)}. This route "
            f"takes: {', '.join(sorted(allowed))}.",
            param=unsupported[0],
            code="unsupported_field",
        )
    model = body.get("model")
    if model is None and not require_model:
        return
    if not isinstance(model, str):
        raise bad("model", "a string (GET /v1/models lists it)", model)
    if model != model_id:
        raise ApiError(
            404,
            f"The model {model!r} does not exist here; this server serves "
            f"{model_id!r}.",
            param="model",
            code="model_not_found",
        )


def number(body, name, default, low, high):
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise bad(name, f"a number from {low} to {high}", value)
    if not low <= value <= high:
        raise bad(name, f"a number from {low} to {high}", value)
    return float(value)


def integer(body, name, low=None, high=None):
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise bad(name, "an integer", value)
    if (low is not None and value < low) or (high is not None and value > high):
        span = f"from {low} to {high}" if high is not None else f"of at least {low}"
        raise bad(name, f"an integer {span}", value)
    return value


def sampling_settings(body, chat=True):
    """`dict(temperature, top_p, seed, presence_penalty, frequency_penalty,
    logprobs, top_logprobs, stop, stream, include_usage)`."""
    if body.get("n", 1) != 1:
        raise bad(
            "n", "1: this server returns one answer per request (send n "
            "requests, each with its own seed, for n samples)", body.get("n"),
        )  # fmt: skip
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise bad("stream", "true or false", stream)
    options = body.get("stream_options") or {}
    if not isinstance(options, dict) or set(options) - {"include_usage"}:
        raise bad("stream_options", 'an object like {"include_usage": true}', options)
    include_usage = options.get("include_usage", False)
    if not isinstance(include_usage, bool):
        raise bad("stream_options", 'an object like {"include_usage": true}', options)
    stop = body.get("stop")
    stop = [stop] if isinstance(stop, str) else stop
    if stop is not None and not (
        isinstance(stop, list)
        and len(stop) <= 4
        and all(isinstance(s, str) and s for s in stop)
    ):
        raise bad("stop", "a string or a list of up to 4 non-empty strings", stop)
    seed = integer(body, "seed", -(2**63), 2**63 - 1)
    user = body.get("user")
    if user is not None and not isinstance(user, str):
        raise bad("user", "a string", user)
    logprobs, top_logprobs = chat_logprobs(body) if chat else completion_logprobs(
        body
    )
    return dict(
        temperature=number(body, "temperature", 1.0, 0, 2),
        top_p=number(body, "top_p", 1.0, 0, 1),
        seed=random.getrandbits(31) if seed is None else seed,
        presence_penalty=number(body, "presence_penalty", 0.0, -2, 2),
        frequency_penalty=number(body, "frequency_penalty", 0.0, -2, 2),
        logprobs=logprobs,
        top_logprobs=top_logprobs,
        stop=stop or [],
        stream=stream,
        include_usage=include_usage,
    )


def chat_logprobs(body):
    """`(logprobs, top_logprobs)` of a chat request: whether to return the
    chosen tokens' log-probabilities, and how many of each step's most
    likely tokens with them (0 to 20, only with `logprobs: true`)."""
    logprobs = body.get("logprobs")
    if logprobs is not None and not isinstance(logprobs, bool):
        raise bad("logprobs", "true or false", logprobs)
    top = integer(body, "top_logprobs", 0, MAX_TOP_LOGPROBS)
    if top and not logprobs:
        raise bad("top_logprobs", "used with logprobs=true", top)
    return bool(logprobs), top or 0


def completion_logprobs(body):
    """`(logprobs, top_logprobs)` of a completions request, whose `logprobs`
    is the number of alternatives (0 to 5; 0: the chosen tokens' only)."""
    top = integer(body, "logprobs", 0, MAX_COMPLETION_LOGPROBS)
    return top is not None, top or 0


def max_tokens(body, prompt_length, max_length, names=("max_tokens",)):
    """The new-token budget: at most what is left of a slot after the prompt."""
    room = max_length - prompt_length
    if room < 1:
        raise ApiError(
            400,
            f"This model's context is {max_length} tokens and the prompt has "
            f"{prompt_length}: no room for an answer (the server does not slide "
            "the window; shorten the prompt).",
            param="messages" if "max_completion_tokens" in names else "prompt",
            code="context_length_exceeded",
        )
    for name in names:
        value = integer(body, name, low=1)
        if value is None:
            continue
        if value > room:
            raise ApiError(
                400,
                f"`{name}` is too large: this model's context is {max_length} "
                f"tokens and the prompt has {prompt_length}, so at most {room} "
                f"new tokens fit. Received: {name}={value}",
                param=name,
                code="context_length_exceeded",
            )
        return value
    return room


def chat_messages(body):
    """The conversation, as [{"role", "content"}] with string contents."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise bad("messages", "a non-empty list of messages", messages)
    checked = []
    for i, message in enumerate(messages):
        name = f"messages[{i}]"
        if not isinstance(message, dict) or set(message) - {"role", "content", "name"}:
            raise bad(name, 'an object {"role": ..., "content": ...}', message)
        if message.get("role") not in ROLES:
            raise bad(
                f"{name}.role", " or ".join(map(repr, ROLES)), message.get("role")
            )
        content = message.get("content")
        if isinstance(content, list) and all(
            isinstance(p, dict) and p.get("type") == "text" and isinstance(
                p.get("text"), str) for p in content
        ):  # fmt: skip
            content = "".join(p["text"] for p in content)
        if not isinstance(content, str):
            raise bad(f"{name}.content", "a string (or text parts)", content)
        checked.append({"role": message["role"], "content": content})
    return checked


def completion_prompts(body, vocabulary_size):
    """The prompts of a completions request, each a string or a list of
    token ids: `prompt` is a string, a list of strings, a list of token
    ids, or a list of such lists (OpenAI's four forms; lm-eval sends token
    ids), with at most `MAX_PROMPTS` prompts."""
    prompt = body.get("prompt")
    wanted = (
        "a non-empty string, a list of them, a list of token ids from 0 to "
        f"{vocabulary_size - 1}, or a list of such lists (at most {MAX_PROMPTS} "
        "prompts)"
    )
    if isinstance(prompt, str) or (
        isinstance(prompt, list) and prompt and all(is_id(i) for i in prompt)
    ):
        prompts = [prompt]
    elif isinstance(prompt, list) and 0 < len(prompt) <= MAX_PROMPTS:
        prompts = prompt
    else:
        raise bad("prompt", wanted, prompt)
    for one in prompts:
        if isinstance(one, str) and one:
            continue
        if not (isinstance(one, list) and one and all(is_id(i) for i in one)):
            raise bad("prompt", wanted, prompt)
        outside = [i for i in one if not 0 <= i < vocabulary_size]
        if outside:
            raise ApiError(
                400,
                "`prompt` holds token ids outside the vocabulary (0 to "
                f"{vocabulary_size - 1}). Received: {outside[:8]}",
                param="prompt",
            )
    return prompts


def is_id(value):
    """A JSON integer (not a boolean)."""
    return isinstance(value, int) and not isinstance(value, bool)


def echo(body):
    """Whether to return the prompt (and its tokens' logprobs) before the
    answer."""
    value = body.get("echo", False)
    if not isinstance(value, bool):
        raise bad("echo", "true or false", value)
    return value


def embedding_inputs(body):
    """`(texts, encoding_format)`; token-id inputs are not supported."""
    texts = body.get("input")
    texts = [texts] if isinstance(texts, str) else texts
    if not (
        isinstance(texts, list)
        and 0 < len(texts) <= 2048
        and all(isinstance(t, str) and t for t in texts)
    ):
        raise bad("input", "a non-empty string or a list of 1 to 2048 of them", texts)
    encoding = body.get("encoding_format", "float")
    if encoding not in ("float", "base64"):
        raise bad("encoding_format", '"float" or "base64"', encoding)
    return texts, encoding


def response_format(body, settings, echo=False):
    """The request's `response_format`, or None (absent, or `{"type":
    "text"}`): `json_object`, `json_schema` (OpenAI's) or `regex`, checked
    here (a malformed schema, or a keyword the automaton would not honour,
    is a 400 naming it). Not with `logprobs` or `echo`."""
    value = body.get("response_format")
    try:
        if response_format_regex(value) is None:
            return None
    except (ValueError, ImportError) as error:
        raise ApiError(
            400, str(error), param="response_format", code="invalid_response_format"
        ) from None
    if settings["logprobs"] or echo:
        name = "logprobs" if settings["logprobs"] else "echo"
        raise bad(
            name, "off with response_format (structured answers come without "
            "scores)", body.get(name),
        )  # fmt: skip
    return value
