"""The bad-input catalogue: each bad input, what it gets, one test per row.

docs/bad_input.md is rendered from CATALOGUE below (a test checks that it
is up to date), so the document and the tests cannot drift apart:

    python -m tests.test_bad_input_catalogue > docs/bad_input.md

A row whose `fixed` is False records a bad error that is reported but not
yet fixed; its test is a strict xfail that starts failing once it is fixed.
A row's `before` says what the input got before it was fixed; a row whose
`error` is None is an input once refused or mishandled that now works.
"""

import dataclasses
import functools
import os
from pathlib import Path

import keras
import keras_hub
import numpy as np
import pytest

from keras_tfm import cli, convert, layers, models, saving, training, zoo
from keras_tfm.data import language_model_datasets
from tests.builders import causal_lm
from tests.convert.tiny_gguf import Q, write_tiny_llama

DOC = Path(__file__).resolve().parent.parent / "docs" / "bad_input.md"
FIXTURES = Path(__file__).resolve().parent / "fixtures"


@dataclasses.dataclass(frozen=True)
class Row:
    area: str
    bad_input: str
    error: str  # the exception type
    message: str  # a substring of its message
    run: object  # a callable taking a tmp folder
    fixed: bool = True
    before: str = ""  # what it got before the fix, if it was fixed


def fit_causal_lm_with_label(label):
    """A causal LM fitted, under XLA, on labels holding `label`."""
    model = lm()
    model.compile("adam", training.TokenCrossEntropy(), jit_compile=True)
    labels = np.ones((2, 8), "int32")
    labels[1, 3] = label
    model.fit(np.ones((2, 8), "int32"), labels, verbose=0)


def seq2seq_top_k_is_used():
    """top_k=1 must equal greedy; the old code sampled with k=5 instead."""
    model = zoo.from_preset("transformer_tiny")
    model = models.Seq2SeqLM(model.backbone, start_token_id=1)
    greedy = model.generate([[3, 4, 5]], max_new_tokens=6)
    assert model.generate([[3, 4, 5]], 6, sampler="top_k", top_k=1) == greedy


def lm(**overrides):
    config = dict(
        vocabulary_size=50, num_layers=1, num_heads=2, hidden_dim=16,
        intermediate_dim=32, max_sequence_length=16,
    )  # fmt: skip
    return causal_lm(**{**config, **overrides})


def byte_data(text, sequence_length=8, batch_size=2):
    tokenizer = keras_hub.tokenizers.ByteTokenizer()
    return language_model_datasets(text, tokenizer, sequence_length, batch_size)


def write(folder, name, content):
    path = folder / name
    path.write_bytes(content)
    return str(path)


def tiny_gguf(folder, **options):
    path = folder / "tiny.gguf"
    write_tiny_llama(path, **options)
    return path


def cut_gguf(folder):
    data = tiny_gguf(folder).read_bytes()
    return write(folder, "cut.gguf", data[: len(data) // 2])


def hf_copy(folder, name, **config_changes):
    """A copy of a tiny HuggingFace fixture with config.json keys changed."""
    import json
    import shutil

    target = folder / name
    shutil.copytree(FIXTURES / f"tiny_{name}_hf", target)
    config = json.loads((target / "config.json").read_text())
    (target / "config.json").write_text(json.dumps({**config, **config_changes}))
    return target


def sentencepiece_copy(folder):
    """The Llama fixture with a Llama 2-style (SentencePiece BPE) tokenizer."""
    import json

    target = hf_copy(folder, "llama_gqa")
    spec = json.loads((target / "tokenizer.json").read_text())
    spec["model"]["byte_fallback"] = True
    spec["pre_tokenizer"] = {"type": "Metaspace", "replacement": "\u2581"}
    (target / "tokenizer.json").write_text(json.dumps(spec))
    return target


def x(*shape, dtype="float32", fill=0):
    return np.full(shape, fill, dtype)


def fit_classifier_with_label(label):
    model = models.EncoderClassifier(
        backbone=zoo.from_preset("bert_tiny_test"), num_classes=3
    )
    model.compile("adam", "sparse_categorical_crossentropy", jit_compile=True)
    model.fit(x(2, 4, dtype="int32", fill=1), np.array([0, label]), verbose=0)


@functools.cache
def strings_lm():
    """A causal LM that reads strings: its byte tokenizer adds no start token."""
    return models.CausalLM(
        lm(vocabulary_size=256).backbone,
        preprocessor=models.CausalLMPreprocessor(
            keras_hub.tokenizers.ByteTokenizer(), sequence_length=16
        ),
    )


@functools.cache
def fortunes():
    return models.EncoderClassifier.from_preset("fortunes_classifier")


def truncated(folder, name, save):
    """A whole file saved by `save(path)`, then cut to half its length."""
    path = folder / name
    save(path)  # (a no-op for a file that is there already)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return path


def truncated_model(folder):
    return truncated(folder, "m.keras", lm().save)


def keras_hub_backbone_file(folder):
    """A `.keras` file of a keras-hub GPT2Backbone: no tokenizer, no generate."""
    path = folder / "gpt2_backbone.keras"
    keras_hub.models.GPT2Backbone(
        vocabulary_size=10, num_layers=1, num_heads=2, hidden_dim=8,
        intermediate_dim=16, max_sequence_length=8,
    ).save(path)  # fmt: skip
    return str(path)


def sequential_file(folder):
    path = folder / "sequential.keras"
    keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)]).save(path)
    return str(path)


def preset_with_truncated_weights(folder):
    (folder / "p").mkdir()
    (folder / "p" / "config.json").write_text(
        (zoo.preset_dir("gpt_nano") / "config.json").read_text()
    )
    model = zoo.from_preset("gpt_nano")
    truncated(folder / "p", "model.weights.h5", model.save_weights)
    return zoo.from_preset("p", root=folder)


def folder_with_files(folder):
    """A user's folder that already holds their own config.json."""
    (folder / "mine").mkdir()
    (folder / "mine" / "config.json").write_text('{"mine": true}')
    return folder / "mine"


def save_gpt2_over(folder):
    model = convert.load_hf_gpt2(FIXTURES / "tiny_gpt2_hf")
    convert.save_hf_gpt2(model, folder_with_files(folder))


def save_gpt2_to_a_full_disk(folder):
    """Writing the weights fails; the folder must be left byte-identical."""
    import errno

    from keras_tfm.convert import gpt2

    target = folder_with_files(folder)
    before = {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()}

    def full_disk(*args):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    model = convert.load_hf_gpt2(FIXTURES / "tiny_gpt2_hf")
    write, gpt2.write_safetensors = gpt2.write_safetensors, full_disk
    try:
        convert.save_hf_gpt2(model, target, overwrite=True)
    finally:
        gpt2.write_safetensors = write
        after = {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()}
        assert after == before, "the failed save changed the folder"


def llama_with_attention_biases(folder):
    """The Llama fixture with query, key, value and output biases only."""
    from safetensors.numpy import load_file, save_file

    target = hf_copy(folder, "llama_gqa", attention_bias=True, mlp_bias=False)
    tensors = load_file(str(target / "model.safetensors"))
    for name in list(tensors):
        if name.endswith("_proj.weight") and ".self_attn." in name:
            size = tensors[name].shape[0]
            tensors[name.replace(".weight", ".bias")] = np.full(size, 0.1, "float32")
    save_file(tensors, str(target / "model.safetensors"))
    return target


def cut_safetensors(folder):
    target = hf_copy(folder, "gpt2")
    truncated(target, "model.safetensors", lambda path: None)
    return target


def config_not_json(folder):
    target = hf_copy(folder, "llama_gqa")
    (target / "config.json").write_text('{"model_type": "llama",,}')
    return target


def lm_file(folder):
    """A .keras language model with a byte tokenizer, for the CLI."""
    model = lm(vocabulary_size=256, tokenizer=keras_hub.tokenizers.ByteTokenizer())
    model(x(1, 2, dtype="int32", fill=1))
    model.save(folder / "lm.keras")
    return str(folder / "lm.keras")


def enable_lora_nan(folder):
    model = lm()
    model(x(1, 2, dtype="int32", fill=1))
    training.enable_lora(model, rank=2, lora_alpha=float("nan"))


MHSA = layers.MultiHeadSelfAttention
CATALOGUE = [
    # Layers.
    Row("layer", "`MultiHeadSelfAttention(num_heads=0)`", "ValueError",
        "Received: num_heads=0", lambda d: MHSA(num_heads=0)),
    Row("layer", "`MultiHeadSelfAttention(dropout=1.5)`", "ValueError",
        "Received: dropout=1.5", lambda d: MHSA(num_heads=2, dropout=1.5)),
    Row("layer", "`dropout=nan`", "ValueError", "dropout=nan",
        lambda d: MHSA(num_heads=2, dropout=float("nan"))),
    Row("layer", "attention inputs of rank 2 (batch, hidden)", "ValueError",
        "(batch, seq, hidden_dim)", lambda d: MHSA(num_heads=2)(x(2, 8))),
    Row("layer", "`padding_mask` of the wrong length", "ValueError",
        "padding_mask", lambda d: MHSA(num_heads=2)(
            x(2, 5, 8), padding_mask=np.ones((2, 4), bool))),
    Row("layer", "`TransformerEncoderBlock(intermediate_dim=-1)`", "ValueError",
        "Received: intermediate_dim=-1", lambda d: layers.TransformerEncoderBlock(
            num_heads=2, intermediate_dim=-1)),
    Row("layer", "`TokenEmbedding(vocabulary_size=0)`", "ValueError",
        "Received: vocabulary_size=0", lambda d: layers.TokenEmbedding(
            vocabulary_size=0, hidden_dim=8)),
    Row("layer", "`PositionalEncoding(max_wavelength=-1)`", "ValueError",
        "Received: max_wavelength=-1",
        lambda d: layers.PositionalEncoding(max_wavelength=-1)),
    Row("layer", "unknown `FeedForward` activation", "ValueError",
        "Received: activation='sigmoidx'", lambda d: layers.FeedForward(
            intermediate_dim=8, activation="sigmoidx")),
    # Models.
    Row("model", "`hidden_dim=10, num_heads=3` (not divisible)", "ValueError",
        "must be divisible by `num_heads`", lambda d: lm(hidden_dim=10, num_heads=3)),
    Row("model", "float token ids", "ValueError", "must hold integer token ids",
        lambda d: lm()(x(1, 4))),
    Row("model", "a sequence longer than `max_sequence_length`", "ValueError",
        "longer than max_sequence_length=16",
        lambda d: lm()(x(1, 20, dtype="int32", fill=1))),
    Row("model", "a token id >= `vocabulary_size` (eager calls)", "ValueError",
        "Received: token id 60",
        lambda d: lm()(x(1, 4, dtype="int32", fill=60))),
    Row("model", "a negative token id (eager calls)", "ValueError",
        "Received: token id -1",
        lambda d: lm()(x(1, 4, dtype="int32", fill=-1))),
    Row("model", "`generate(max_new_tokens=0)`", "ValueError",
        "Received: max_new_tokens=0",
        lambda d: lm().generate([[1, 2]], max_new_tokens=0)),
    Row("model", "prompt + `max_new_tokens` > learned positions' length",
        "ValueError", "at most 14 new tokens can be generated",
        lambda d: lm().generate([[1, 2]], max_new_tokens=100)),
    Row("model", "an empty prompt (`generate(\"\")`, `--prompt \"\"`)", "ValueError",
        "holds an empty prompt: '' is no tokens",
        lambda d: strings_lm().generate(["In", ""], max_new_tokens=2),
        before="\"an empty sequence ... inputs[0]=[]\""),
    Row("model", "a classifier asked to `.generate`", "AttributeError",
        "`generate` is a method of CausalLM, Seq2SeqLM; this EncoderClassifier "
        "answers with `classify`", lambda d: fortunes().generate("Moses"),
        before="a bare \"no attribute 'generate'\""),
    Row("model", "unknown sampler", "ValueError", "Received: sampler='bogus'",
        lambda d: lm().generate([[1, 2]], max_new_tokens=2, sampler="bogus")),
    Row("model", "`generate(sampler=\"random\", temperature=nan)`", "ValueError",
        "Received: temperature=nan", lambda d: lm().generate(
            [[1, 2]], max_new_tokens=2, sampler="random", temperature=float("nan")),
        before="accepted: the same token every step (\"And nat nat nat nat\")"),
    Row("model", "`generate(sampler=\"random\", temperature=inf)`", "ValueError",
        "Received: temperature=inf", lambda d: lm().generate(
            [[1, 2]], max_new_tokens=2, sampler="random", temperature=float("inf")),
        before="accepted: sampled uniformly"),
    Row("model", "`CausalLM(layer_norm_epsilon=inf)`", "ValueError",
        "Received: layer_norm_epsilon=inf",
        lambda d: lm(layer_norm_epsilon=float("inf")),
        before="accepted: the norms output zeros, every position the same logits"),
    Row("model", "`generate(..., top_p=0.5)` without `sampler=`", "ValueError",
        "so it would be ignored. Choose a sampler that reads it (top_p)",
        lambda d: lm().generate([[1, 2]], max_new_tokens=2, top_p=0.5),
        before="accepted: ran greedy, ignoring top_p"),
    Row("model", "`generate(..., temperature=0.01)` without `sampler=`",
        "ValueError", "is not read by sampler='greedy', so it would be ignored",
        lambda d: lm().generate([[1, 2]], max_new_tokens=2, temperature=0.01),
        before="accepted: ran greedy, ignoring the temperature"),
    Row("model", "`Seq2SeqLM.generate(sampler=\"top_k\")` with `top_k`", None,
        "",
        lambda d: seq2seq_top_k_is_used(),
        before="ignored: sampled with hidden k=5, temperature 1"),
    Row("model", "`generate(b\"In the beginning\")` (bytes)", "ValueError",
        "must be a string or a list of strings (with a preprocessor), a list of "
        "token ids", lambda d: lm().generate(b"In the beginning", 2),
        before="\"must be a (batch, seq) array of token ids\""),
    Row("model", "`generate(42)`", "ValueError", "Received: inputs=42 of type int",
        lambda d: lm().generate(42, 2),
        before="\"must be a (batch, seq) array of token ids\""),
    Row("model", "`CausalLM.fit` with a label id >= `vocabulary_size` "
        "(also under XLA)", "ValueError", "must hold token ids in [0, 50)",
        lambda d: fit_causal_lm_with_label(50),
        before="InvalidArgumentError: Graph execution error (a NaN loss on a GPU)"),
    Row("model", "`Seq2SeqLM` without `target_ids`", "ValueError",
        '"source_ids" and "target_ids"', lambda d: zoo.from_preset(
            "transformer_tiny")({"source_ids": x(1, 4, dtype="int32", fill=1)})),
    Row("model", "`EncoderClassifier(num_classes=0)`", "ValueError",
        "Received: num_classes=0", lambda d: models.EncoderClassifier(
            backbone=zoo.from_preset("bert_tiny_test"), num_classes=0)),
    Row("model", "`EncoderClassifier.fit` with a label id >= `num_classes` "
        "(also under XLA)", "ValueError", "must hold class ids in [0, 3)",
        lambda d: fit_classifier_with_label(3)),
    Row("model", "`EncoderClassifier.fit` with a negative label id", "ValueError",
        "Received: labels from -1 to 0", lambda d: fit_classifier_with_label(-1)),
    Row("model", "`classifier.classify([12, 54, 99])` (token ids, not text)",
        "ValueError", "must be a string or a list of strings. Received: "
        "texts=[12, 54, 99]", lambda d: fortunes().classify([12, 54, 99])),
    Row("model", "`classifier.classify(None)`", "ValueError",
        "must be a string or a list of strings. Received: texts=None",
        lambda d: fortunes().classify(None)),
    Row("model", "`EncoderClassifier(..., tokenizer=...)` (the argument before "
        "preprocessors)", "ValueError",
        "pass preprocessor=TextClassifierPreprocessor(tokenizer, ",
        lambda d: models.EncoderClassifier(
            fortunes().backbone, 3, tokenizer=fortunes().tokenizer)),
    Row("model", "a preprocessor packing longer rows than the backbone reads",
        "ValueError", "Received: sequence_length=129",
        lambda d: models.EncoderClassifier(
            fortunes().backbone, 3, preprocessor=models.TextClassifierPreprocessor(
                fortunes().tokenizer, sequence_length=129))),
    Row("zoo", "a preset whose `model.weights.h5` is truncated", "ValueError",
        "is truncated or corrupt", preset_with_truncated_weights),
    Row("zoo", "a path that is no preset folder (`../etc`)", "ValueError",
        "No preset folder at '../etc'", lambda d: zoo.from_preset("../etc"),
        before="\"not a path\": a saved preset folder did not load by its path"),
    Row("zoo", "unknown preset", "ValueError", "Unknown preset",
        lambda d: zoo.from_preset("nope")),
    Row("zoo", "`from_preset(\"kjv-gpt\")` (a near miss)", "ValueError",
        "Did you mean 'kjv_gpt'?", lambda d: zoo.from_preset("kjv-gpt"),
        before="the list of presets, no guess"),
    Row("zoo", "`from_preset(\"runs/lm.keras\")` (a file path)", "ValueError",
        "keras_tfm.saving.load_model(path)",
        lambda d: zoo.from_preset("runs/lm.keras"),
        before="\"not a path\", with no word of how to load one"),
    Row("zoo", "unknown override", "ValueError", "Unknown override(s) ['bogus']",
        lambda d: zoo.from_preset("gpt_nano", bogus=1)),
    # Data loaders.
    Row("data", "empty corpus", "ValueError", "non-empty string",
        lambda d: byte_data("")),
    Row("data", "a corpus shorter than two windows", "ValueError", "too few",
        lambda d: byte_data("abc")),
    Row("data", "`sequence_length=0`", "ValueError", "Received: sequence_length=0",
        lambda d: byte_data("abc" * 100, sequence_length=0)),
    Row("data", "`batch_size=0`", "ValueError", "Received: batch_size=0",
        lambda d: byte_data("abc" * 100, batch_size=0)),
    Row("saving", "`atomic_save` to a path that is not .keras/.weights.h5",
        "ValueError", "must end in", lambda d: saving.atomic_save(lm(), d / "m.txt")),
    Row("saving", "`saving.load_model` of a truncated `.keras` file", "ValueError",
        "is truncated or corrupt (not a zip archive",
        lambda d: saving.load_model(truncated_model(d))),
    Row("saving", "`saving.load_model` of a missing file", "FileNotFoundError",
        "No such model file", lambda d: saving.load_model(d / "missing.keras")),
    Row("training", "`TokenCrossEntropy(label_smoothing=2.0)`", "ValueError",
        "Received: label_smoothing=2.0",
        lambda d: training.TokenCrossEntropy(label_smoothing=2.0)),
    Row("training", "`enable_lora(model, rank=2, lora_alpha=nan)`", "ValueError",
        "Received: lora_alpha=nan", enable_lora_nan,
        before="accepted: every output NaN"),
    Row("convert", "`load_gguf_llama` of a file that is not GGUF", "ValueError",
        "Not a GGUF file", lambda d: convert.load_gguf_llama(
            write(d, "m.gguf", b"PK\x03\x04 a zip archive"))),
    Row("convert", "`load_gguf_llama` of a truncated GGUF file", "ValueError",
        "truncated", lambda d: convert.load_gguf_llama(cut_gguf(d))),
    Row("convert", "a GGUF file quantised as MXFP4", "ValueError",
        "quantised as MXFP4, which is not supported", lambda d:
        convert.load_gguf_llama(tiny_gguf(d, linear_type=Q.MXFP4))),
    Row("convert", "a GGUF file of another architecture", "ValueError",
        "general.architecture='gpt2'", lambda d:
        convert.load_gguf_llama(tiny_gguf(d, architecture="gpt2"))),
    Row("convert", "`load_hf_llama` of another architecture", "ValueError",
        "model_type='gemma'", lambda d:
        convert.load_hf_llama(hf_copy(d, "llama_gqa", model_type="gemma"))),
    Row("convert", "`load_hf_llama` with RoPE scaling", "ValueError",
        "rope_parameters.rope_type='llama3'", lambda d: convert.load_hf_llama(
            hf_copy(d, "llama_gqa", rope_parameters={"rope_type": "llama3"}))),
    Row("convert", "`load_hf_llama` of a SentencePiece-style (Llama 2) tokenizer",
        "ValueError", "SentencePiece-style BPE tokenizers", lambda d:
        convert.load_hf_llama(sentencepiece_copy(d))),
    Row("convert", "a GGUF file with a WordPiece (BERT) tokenizer", "ValueError",
        "tokenizer.ggml.model='bert'", lambda d:
        convert.load_gguf_llama(tiny_gguf(d, tokenizer_model="bert"))),
    Row("convert", "`load_hf_gpt2` of a config that disagrees with the weights",
        "ValueError", "shape", lambda d:
        convert.load_hf_gpt2(hf_copy(d, "gpt2", n_inner=64))),
    Row("convert", "`load_hf_marian` of a pre-LN Marian config", "ValueError",
        "normalize_before=True", lambda d:
        convert.load_hf_marian(hf_copy(d, "marian", normalize_before=True))),
    Row("convert", "`save_hf_gpt2` (or any `save_hf_*`) into a folder holding "
        "the user's files", "ValueError", "not empty; pass overwrite=True",
        save_gpt2_over, before="overwrote them silently (their config.json)"),
    Row("convert", "a `model.safetensors` cut in half", "ValueError",
        "model.safetensors is truncated or corrupt", lambda d:
        convert.load_hf_gpt2(cut_safetensors(d)),
        before="`SafetensorError: ... incomplete metadata, file not fully "
        "covered`, naming no file"),
    Row("convert", "a `config.json` that is not JSON", "ValueError",
        "config.json is not valid JSON", lambda d:
        convert.load_hf_llama(config_not_json(d)),
        before="`JSONDecodeError` without the file name"),
    Row("convert", "`save_hf_gpt2(..., overwrite=True)` failing midway (a full "
        "disk)", "OSError", "No space left on device", save_gpt2_to_a_full_disk,
        before="the folder was left half-written; now it is left byte-identical "
        "(any `save_hf_*`, `save_preset`)"),
    Row("convert", "a Llama config with `attention_bias: true, mlp_bias: false`",
        None, "", lambda d: convert.load_hf_llama(llama_with_attention_biases(d)),
        before="refused: one `use_bias` covered all projections"),
    # The command line (SystemExit: a one-line message, no traceback).
    Row("cli", "`train --data` a missing file", "SystemExit", "no such file",
        lambda d: cli.main(["train", "--data", str(d / "missing.txt")])),
    Row("cli", "`train --data` an empty file", "SystemExit", "is empty",
        lambda d: cli.main(["train", "--data", write(d, "e.txt", b"")])),
    Row("cli", "`train --data` bytes that are not UTF-8", "SystemExit", "not UTF-8",
        lambda d: cli.main(["train", "--data", write(d, "b.txt", b"\xff\xfe\xfa")])),
    Row("cli", "`train --data` too short to hold out a tenth", "SystemExit",
        "too short to split", lambda d: cli.main(
            ["train", "--data", write(d, "s.txt", b"hello " * 10)])),
    Row("cli", "`train --epochs 0`", "SystemExit", "2",
        lambda d: cli.main(["train", "--epochs", "0"])),
    Row("cli", "`train --learning-rate -1` (or nan)", "SystemExit", "2",
        lambda d: cli.main(["train", "--learning-rate", "-1"])),
    Row("cli", "`train --save-freq 0`", "SystemExit", "2",
        lambda d: cli.main(["train", "--save-freq", "0"])),
    Row("cli", "`train --dropout 1.5`", "SystemExit", "Received: --dropout 1.5",
        lambda d: cli.main(["train", "--dropout", "1.5"])),
    Row("cli", "`generate --temperature nan` (or `inf`)", "SystemExit",
        "Received: --temperature nan", lambda d: cli.main(
            ["generate", lm_file(d), "--prompt", "a", "--max-new-tokens", "2",
             "--temperature", "nan"]),
        before="accepted: the same token every step"),
    Row("cli", "`generate --sampler greedy --min-p 0.1` (a flag the sampler does "
        "not read; `chat --temperature 0.7` alike)", "SystemExit",
        "--min-p with the greedy sampler", lambda d: cli.main(
            ["generate", lm_file(d), "--prompt", "a", "--max-new-tokens", "2",
             "--sampler", "greedy", "--min-p", "0.1"]),
        before="ignored: decoded greedily"),
    Row("cli", "`train --strategy multi_worker` without TF_CONFIG", "SystemExit",
        "needs the TF_CONFIG", lambda d: cli.main(
            ["train", "--strategy", "multi_worker"])),
    Row("cli", "`TF_CONFIG` that is not JSON", "SystemExit", "must be JSON",
        lambda d: with_env({"TF_CONFIG": "{oops"}, cli.main, ["train"])),
    Row("cli", "`generate` a missing model file", "SystemExit",
        "no such model file", lambda d: cli.main(
            ["generate", str(d / "missing.keras"), "--prompt", "a"])),
    Row("cli", "`generate` / `evaluate` a truncated model file", "SystemExit",
        "is truncated or corrupt", lambda d: cli.main(
            ["evaluate", str(truncated_model(d))])),
    Row("cli", "`generate kjv-gpt` (neither a file nor a preset)", "SystemExit",
        "neither a model file", lambda d: cli.main(
            ["generate", "kjv-gpt", "--prompt", "a"])),
    Row("cli", "`generate` a keras-hub `GPT2Backbone` file", "SystemExit",
        "is a keras_hub GPT2Backbone; ", lambda d:
        cli.main(["generate", keras_hub_backbone_file(d), "--prompt", "a"])),
    Row("cli", "`evaluate` a `keras.Sequential` file", "SystemExit",
        "is a keras Sequential; ", lambda d:
        cli.main(["evaluate", sequential_file(d)])),
    Row("cli", "`chat --model` a keras-hub `GPT2Backbone` file", "SystemExit",
        "chat template", lambda d:
        cli.main(["chat", "hi", "--model", keras_hub_backbone_file(d)])),
    Row("cli", "`evaluate` a translator (not a causal LM)", "SystemExit",
        "takes a keras-tfm CausalLM with a tokenizer (", lambda d:
        cli.main(["evaluate", "transformer_tiny"])),
]  # fmt: skip


def with_env(env, function, *args):
    saved = {key: os.environ.get(key) for key in env}
    os.environ.update(env)
    try:
        return function(*args)
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def render():
    lines = [
        "# Bad input: what each gets",
        "",
        "Every row is a test in `tests/test_bad_input_catalogue.py`; this page",
        "is rendered from that table (`python -m tests.test_bad_input_catalogue",
        "> docs/bad_input.md`), so the two cannot drift. Library errors are",
        "`ValueError`s naming the argument and quoting the value received; the",
        "command line turns them into a one-line `keras-tfm: ...` message",
        "(`SystemExit`), and argparse rejects malformed flags with exit code 2.",
        "Rows marked **open** still get a poor error (a TensorFlow error, or",
        "nothing); they are reported and tested as strict xfails. A status",
        "\"(before: ...)\" says what the input got before it was fixed; an",
        "error \"none: works\" marks an input once refused that now works.",
        "",
        "Plain `keras.models.load_model` reports a truncated or corrupt `.keras`",
        "file as `File not found` (Keras treats any file that does not open as",
        "a zip as missing), and may load a file with damaged bytes inside;",
        "`keras_tfm.saving.load_model` checks the archive first (every",
        "member's CRC) and names the problem. The CLI and the zoo check their",
        "files the same way (`keras_tfm.saving.check_model_file`).",
        "",
        "An empty list is not bad input: `classifier.classify([])` returns",
        "`[]` and `encoder.encode([])` a (0, hidden_dim) array, as `predict`",
        "on zero rows gives zero rows.",
        "",
        "| Area | Bad input | Error | Message contains | Status |",
        "|---|---|---|---|---|",
    ]
    for row in CATALOGUE:
        status = "ok" if row.fixed else "**open**"
        if row.before:
            status += f" (before: {row.before})"
        status = status.replace("|", "\\|")
        error = "none: works" if row.error is None else f"`{row.error}`"
        message = f"`{row.message}`".replace("|", "\\|") if row.message else ""
        lines.append(
            f"| {row.area} | {row.bad_input} | {error} | {message} | {status} |"
        )
    return "\n".join(lines) + "\n"


def _id(row):
    return f"{row.area}: {row.bad_input}"


@pytest.mark.parametrize("row", CATALOGUE, ids=_id)
def test_bad_input_gets_its_error(row, tmp_path, request):
    if not row.fixed:
        request.applymarker(pytest.mark.xfail(strict=True, reason="reported, open"))
        with pytest.raises(ValueError, match=r"\w"):
            row.run(tmp_path)
        return
    if row.error is None:
        row.run(tmp_path)  # once refused or mishandled, now it works
        return
    with pytest.raises(BaseException) as info:
        row.run(tmp_path)
    assert type(info.value).__name__ == row.error, info.value
    text = str(info.value.code if row.error == "SystemExit" else info.value)
    assert row.message in text


def test_no_texts_get_an_empty_answer():
    assert fortunes().classify([]) == []
    assert fortunes().classify([], top_k=3) == []


def test_the_document_is_rendered_from_the_table():
    assert DOC.read_text(encoding="utf-8") == render(), (
        "docs/bad_input.md is stale: python -m tests.test_bad_input_catalogue "
        "> docs/bad_input.md"
    )


if __name__ == "__main__":
    print(render(), end="")
