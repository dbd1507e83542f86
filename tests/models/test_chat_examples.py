"""`CausalLM.fit` on chat examples: the loss is on the answers only."""

import keras
import keras_hub
import numpy as np
import pytest

from keras_tfm import models
from keras_tfm.models.chat_examples import as_chat_examples, chat_example_ids
from tests.builders import causal_lm
from tests.tiny_chat import tiny_chat_model

CHATS = [
    {
        "messages": [
            {"role": "system", "content": "Answer in one word."},
            {"role": "user", "content": "Colour of the sky?"},
            {"role": "assistant", "content": "Blue."},
            {"role": "user", "content": "And of grass?"},
            {"role": "assistant", "content": "Green, mostly."},
        ]
    },
    ("What is two and two?", "Four."),
]


def answer_positions(ids, opening, end):
    """Independently of the code under test: in the whole conversation's ids,
    the tokens after each opening of an assistant turn up to its end token."""
    marks, i = np.zeros(len(ids), "int32"), 0
    while i < len(ids):
        if list(ids[i : i + len(opening)]) == opening:
            j = i + len(opening)
            while ids[j] != end:
                marks[j], j = 1, j + 1
            marks[j], i = 1, j  # the end token ends the answer
        i += 1
    return marks


def conversation(example):
    if isinstance(example, dict):
        return example["messages"]
    return [
        {"role": "user", "content": example[0]},
        {"role": "assistant", "content": example[1]},
    ]


def test_chat_examples_are_the_templates_ids_with_the_answers_marked(smollm2):
    preprocessor, tokenizer = smollm2.preprocessor, smollm2.tokenizer
    opening = [int(i) for i in tokenizer("<|im_start|>assistant\n")]
    for example, chat in zip(as_chat_examples(CHATS), CHATS, strict=True):
        text = tokenizer.apply_chat_template(conversation(chat), False)
        expected = np.asarray(tokenizer(text), "int32")
        ids, answer = chat_example_ids(preprocessor, example)
        np.testing.assert_array_equal(ids, expected)
        np.testing.assert_array_equal(
            answer, answer_positions(expected, opening, tokenizer.end_token_id)
        )


def test_evaluate_on_chats_is_the_mean_loss_over_answer_tokens(smollm2):
    tokenizer = smollm2.tokenizer
    model = tiny_chat_model(tokenizer)
    model.compile(
        loss=keras.losses.SparseCategoricalCrossentropy(
            from_logits=True, reduction="mean_with_sample_weight"
        )
    )
    opening = [int(i) for i in tokenizer("<|im_start|>assistant\n")]
    losses = []
    for chat in CHATS:
        text = tokenizer.apply_chat_template(conversation(chat), False)
        ids = np.asarray(tokenizer(text), "int32")
        marks = answer_positions(ids, opening, tokenizer.end_token_id)
        logits = np.asarray(model(ids[None, :-1]), "float64")[0]
        shifted = logits - logits.max(-1, keepdims=True)
        logp = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
        nll = -logp[np.arange(len(ids) - 1), ids[1:]]
        losses.extend(nll[marks[1:] == 1])
    got = model.evaluate(CHATS, batch_size=2, verbose=0)
    np.testing.assert_allclose(got, np.mean(losses), rtol=2e-5)


def test_fit_reads_batches_of_different_lengths(smollm2):
    model = tiny_chat_model(smollm2.tokenizer)
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    # Keras fixes a PyDataset's shapes on TensorFlow from its first two
    # batches: here two of one padded length, then a longer one.
    chats = [("Hi", "Yo"), CHATS[1], ("Why? " * 20, "Because.")]
    widths = [smollm2.preprocessor([chat])[0].shape[1] for chat in chats]
    assert widths[0] == widths[1] < widths[2]
    history = model.fit(chats, batch_size=1, epochs=2, shuffle=False, verbose=0)
    assert np.all(np.isfinite(history.history["loss"]))


def test_a_batch_of_short_chats_pads_to_theirs_not_the_context(smollm2):
    preprocessor = smollm2.preprocessor
    assert preprocessor.sequence_length == 8192
    x, y, weight = preprocessor(CHATS)
    longest = max(
        len(chat_example_ids(preprocessor, e)[0]) for e in as_chat_examples(CHATS)
    )
    assert longest < 64
    assert x.shape == (2, 64)  # (longest - 1) rounded up to a power of two
    assert int(np.asarray(weight).sum()) == sum(
        int(chat_example_ids(preprocessor, e)[1][1:].sum())
        for e in as_chat_examples(CHATS)
    )


def byte_lm():
    tokenizer = keras_hub.tokenizers.ByteTokenizer()
    return causal_lm(
        vocabulary_size=256, num_layers=1, num_heads=2, hidden_dim=8,
        intermediate_dim=16, max_sequence_length=32, tokenizer=tokenizer,
    )  # fmt: skip


def test_pairs_without_a_template_are_prompt_then_answer_then_end():
    model = byte_lm()
    preprocessor = model.preprocessor
    end = preprocessor.end_token_id
    x, y, weight = preprocessor([("ab", "c"), ("d", "efg")])
    rows = [[97, 98, 99], [100, 101, 102, 103]]
    rows = [r + ([end] if end is not None else []) for r in rows]
    answers = [[0, 0, 1], [0, 1, 1, 1]]
    answers = [a + ([1] if end is not None else []) for a in answers]
    width = x.shape[1] + 1
    padded = [r + [0] * (width - len(r)) for r in rows]
    marked = [a + [0] * (width - len(a)) for a in answers]
    np.testing.assert_array_equal(x, [r[:-1] for r in padded])
    np.testing.assert_array_equal(y, [r[1:] for r in padded])
    np.testing.assert_array_equal(weight, [a[1:] for a in marked])
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    history = model.fit([("ab", "c"), ("d", "efg")], batch_size=2, verbose=0)
    assert np.isfinite(history.history["loss"][0])


def test_a_weight_per_example_scales_its_answer_tokens(smollm2):
    x, y, weight = smollm2.preprocessor(CHATS, sample_weight=np.array([0.5, 2.0]))
    _, _, plain = smollm2.preprocessor(CHATS)
    np.testing.assert_allclose(weight, np.asarray(plain) * [[0.5], [2.0]])


@pytest.mark.parametrize(
    "examples, message",
    [
        ([{"messages": [{"role": "user", "content": "Hi"}]}], "no assistant message"),
        (
            [{"messages": [{"role": "assistant", "content": "Hi"}]}],
            "starts with an assistant message",
        ),
        ([("a", "b"), "c"], "Chat example 1 must be"),
        ([("a", "b", "c")], None),  # three strings: not chat examples at all
    ],
)
def test_bad_chat_examples_are_named(examples, message, smollm2):
    if message is None:
        assert not models.chat_examples.is_chat_examples(examples)
        return
    with pytest.raises(ValueError, match=message):
        smollm2.preprocessor(examples)


def test_chat_examples_are_refused_where_they_cannot_train(smollm2):
    with pytest.raises(ValueError, match="`y` must be None"):
        smollm2._pipeline(CHATS, np.zeros(2), None, 2)
    without = causal_lm(
        vocabulary_size=256, num_layers=1, num_heads=2, hidden_dim=8,
        intermediate_dim=16, max_sequence_length=32,
    )  # fmt: skip
    with pytest.raises(ValueError, match="reads token ids"):
        without.fit(CHATS, verbose=0)
    plain = byte_lm()
    with pytest.raises(ValueError, match="needs a tokenizer with a chat template"):
        plain.preprocessor(CHATS[:1])
