"""Chat examples for supervised fine-tuning: token ids and which are answers.

`CausalLM.fit` takes, besides plain strings, a list of chat examples, in
the two forms TRL's `SFTTrainer` reads:

- `{"messages": [{"role": ..., "content": ...}, ...]}`: a conversation,
  formatted by the tokenizer's chat template; every assistant message is an
  answer.
- `(prompt, answer)`: one question and its answer, as a one-turn chat when
  the tokenizer has a chat template, else the two texts joined as written
  followed by the end token.

The loss is on the answers only (with the token that ends each one, so the
model learns to stop), as TRL's `assistant_only_loss` and
`completion_only_loss`. Each piece of text is tokenized on its own, so an
example's ids are the prompt's ids as `chat` and `generate` tokenize it,
followed by the answer's: what the model is trained on is what it reads
and writes when answering.
"""

import dataclasses

import numpy as np

from keras_tfm.lite.chat_template import check_messages


@dataclasses.dataclass(frozen=True)
class ChatExample:
    """One conversation (`messages`) or one `(prompt, answer)` pair."""

    messages: tuple = ()
    prompt: str | None = None
    answer: str | None = None


def _as_example(example, index):
    if isinstance(example, ChatExample):
        return example
    if isinstance(example, dict) and set(example) == {"messages"}:
        messages = check_messages(example["messages"])
        if messages[0]["role"] == "assistant":
            raise ValueError(
                f"Chat example {index} starts with an assistant message; a "
                "conversation starts with a system or user message. Received: "
                f"{str(example)[:120]}"
            )
        if not any(m["role"] == "assistant" for m in messages):
            raise ValueError(
                f"Chat example {index} has no assistant message, so nothing to "
                "learn: the loss is on the answers only. Received: "
                f"{str(example)[:120]}"
            )
        return ChatExample(messages=tuple(messages))
    if (
        isinstance(example, list | tuple)
        and len(example) == 2
        and all(isinstance(text, str) for text in example)
    ):
        return ChatExample(prompt=example[0], answer=example[1])
    raise ValueError(
        f'Chat example {index} must be {{"messages": [{{"role", "content"}}, '
        "...]} or a (prompt, answer) pair of strings, like the others. "
        f"Received: {str(example)[:120]}"
    )


def is_chat_examples(x):
    """Whether `x` is a non-empty list (or tuple, or object array) whose first
    entry is a chat example: a `{"messages": ...}` dict or a pair of strings.

    Example:
    >>> is_chat_examples([("Hi?", "Hello.")]), is_chat_examples(["Hi?"])
    (True, False)
    """
    if isinstance(x, np.ndarray) and x.dtype == object and x.ndim == 1:
        x = list(x)
    if not isinstance(x, list | tuple) or not x:
        return False
    first = x[0]
    return (
        isinstance(first, ChatExample)
        or (isinstance(first, dict) and "messages" in first)
        or (
            isinstance(first, list | tuple)
            and len(first) == 2
            and all(isinstance(text, str) for text in first)
        )
    )


def as_chat_examples(x):
    """`x` as a list of `ChatExample`s, each checked (the error names the
    first bad one by its index)."""
    return [_as_example(example, i) for i, example in enumerate(list(x))]


def _pieces(example, template):
    """The example's text as (text, is_answer) pieces in order."""
    if template is None:
        return [(example.prompt, False), (example.answer, True)]
    messages = list(example.messages) or [
        {"role": "user", "content": example.prompt},
        {"role": "assistant", "content": example.answer},
    ]
    pieces, done = [], ""
    for i, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        before = template(messages[:i], add_generation_prompt=True)
        through = template(messages[: i + 1], add_generation_prompt=False)
        if not (before.startswith(done) and through.startswith(before)):
            raise ValueError(  # the answers could not be told from the rest
                "The chat template does not format a conversation as its "
                "first turns followed by the next, so the answers cannot be "
                f"located. Received: messages={str(messages)[:120]}"
            )
        pieces += [(before[len(done) :], False), (through[len(before) :], True)]
        done = through
    rest = template(messages, add_generation_prompt=False)[len(done) :]
    return pieces + [(rest, False)]


def chat_example_ids(preprocessor, example):
    """The token ids of one chat example and a 0/1 array marking the answers'
    tokens (each answer up to and including the end token, which ends it).

    Example:
    >>> import keras_hub
    >>> tokenizer = keras_hub.tokenizers.ByteTokenizer()
    >>> preprocessor = keras_tfm.models.CausalLMPreprocessor(tokenizer, 8)
    >>> ids, answer = chat_example_ids(preprocessor, ChatExample(
    ...     prompt="q", answer="a"))
    >>> ids.tolist(), answer.tolist()
    ([113, 97], [0, 1])
    """
    end = preprocessor.end_token_id if preprocessor.add_end_token else None
    template = getattr(preprocessor.tokenizer, "apply_chat_template", None)
    if (
        not callable(template)
        or getattr(preprocessor.tokenizer, "chat_template", 0) is None
    ):
        if example.messages:
            raise ValueError(
                'A {"messages": ...} chat example needs a tokenizer with a '
                "chat template (e.g. the preset smollm2_135m_instruct's); pass "
                "(prompt, answer) pairs to this one. Received: a "
                f"{type(preprocessor.tokenizer).__name__} without one"
            )
        template = None
    pieces = [(t, a) for t, a in _pieces(example, template) if t]
    rows = preprocessor.token_lists([text for text, _ in pieces])
    if template is None and end is not None:  # the end token ends the answer
        pieces.append(("", True))
        rows.append(np.asarray([end], "int64"))
    ids, answer = [], []
    for (_, is_answer), row in zip(pieces, rows, strict=True):
        marks = np.zeros(len(row), "int32")
        if is_answer:
            ends = np.flatnonzero(row == end) if end is not None else []
            marks[: ends[0] + 1 if len(ends) else len(row)] = 1
        ids.append(row)
        answer.append(marks)
    return np.concatenate(ids).astype("int32"), np.concatenate(answer)
