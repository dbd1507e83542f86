"""Checkpoints' own chat templates against transformers' renderings.

The fixture (tools/make_chat_template_fixtures.py) holds SmolLM2's, Qwen2.5's,
Qwen3's, Gemma 2's, Phi-3.5's and Llama 3.1's templates and transformers'
`apply_chat_template` text for four conversations each (or the error the
template raised: Gemma refuses a system message).
"""

import doctest
import json
from pathlib import Path

import pytest

from keras_tfm.lite import chat_template
from keras_tfm.lite.chat_template import render_chat_template, single_turn_frame

FIXTURES = json.loads(
    (Path(__file__).resolve().parents[1] / "fixtures/chat_templates.json").read_text(
        encoding="utf-8"
    )
)
CASES = [
    (name, i) for name, entry in FIXTURES.items() for i in range(len(entry["cases"]))
]


@pytest.mark.parametrize(("name", "index"), CASES)
def test_rendering_equals_transformers(name, index):
    entry = FIXTURES[name]
    case = entry["cases"][index]
    render = lambda: render_chat_template(  # noqa: E731
        entry["template"],
        case["messages"],
        case["add_generation_prompt"],
        **entry["tokens"],
    )
    if "error" in case:
        with pytest.raises(ValueError, match=case["error"]):
            render()
    else:
        assert render() == case["text"]


@pytest.mark.parametrize("name", list(FIXTURES))
def test_single_turn_frame_surrounds_the_message(name):
    entry = FIXTURES[name]
    head, tail = single_turn_frame(entry["template"], **entry["tokens"])
    # Transformers' text for the one-message conversation "Hi!".
    first = entry["cases"][0]
    assert first["messages"] == "Hi!" and first["add_generation_prompt"]
    assert head + "Hi!" + tail == first["text"]


def test_a_template_that_rewrites_the_message_has_no_frame():
    with pytest.raises(ValueError, match="once and unchanged"):
        single_turn_frame("{{ messages[0]['content'] | upper }}")
    with pytest.raises(ValueError, match="once and unchanged"):
        single_turn_frame("{{ messages[0]['content'] * 2 }}")


@pytest.mark.parametrize(
    "hostile",
    [
        "{{ ''.__class__.__mro__[1].__subclasses__() }}",
        "{{ messages.__class__.__init__.__globals__ }}",
        "{% set _ = messages.append({'role': 'user', 'content': 'x'}) %}",
        "{{ raise_exception.__globals__['__builtins__'] }}",
    ],
)
def test_the_sandbox_refuses_what_a_hostile_template_tries(hostile):
    with pytest.raises(ValueError, match="refused|failed"):
        render_chat_template(hostile, "hi")


def test_bad_templates_and_messages_are_refused_by_name():
    with pytest.raises(ValueError, match=r"not valid Jinja2 \(line 1"):
        render_chat_template("{% for m in messages %}", "hi")
    with pytest.raises(ValueError, match="non-empty string"):
        render_chat_template(None, "hi")
    template = FIXTURES["qwen2.5"]["template"]
    for bad in ([], [{"role": "robot", "content": "x"}], [{"role": "user"}], 5):
        with pytest.raises(ValueError, match="messages|Each message"):
            render_chat_template(template, bad)


def test_the_callers_messages_are_not_changed():
    messages = [{"role": "system", "content": " S "}, {"role": "user", "content": "U"}]
    kept = json.dumps(messages)
    render_chat_template(FIXTURES["llama3.1"]["template"], messages)
    assert json.dumps(messages) == kept


def test_docstring_examples():
    assert doctest.testmod(chat_template).failed == 0
