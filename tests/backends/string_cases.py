"""The texts and tokenizers that test_strings_without_tensorflow.py checks.

Imported by the test (TensorFlow backend, the TensorFlow path) and by
string_checks.py (JAX, TensorFlow blocked, the Python path), so both read
the same texts with the same tokenizers. One tokenizer per kind a zoo
preset or a converted checkpoint brings.
"""

from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
# ASCII, accents (composed and not), a German sharp s, a dash, emoji, CJK,
# and the empty string.
TEXTS = [
    "Real programmers use vi.",
    "Café naïve, Straße — résumé!",
    "emoji 😀 and ☕ tea 日本",
    "",
]
# Tokenizers that keep every byte: their detokenized ids are the text.
LOSSLESS = ("kjv_gpt", "smollm2")
CLASSIFIED = ("Real programmers use vi.", "computers")  # issue 54's must-show
# Greedy continuations each backend decodes (issue 54's must-show): preset,
# prompt, new tokens.
GENERATED = (
    ("kjv_gpt", "And the LORD said unto Moses", 12),
    ("translator_de_en", "Ich habe einen Hund.", 12),
)


def generated(models):
    """preset -> its greedy text for `GENERATED`'s prompt, on this backend."""
    return {
        name: models[name].generate(prompt, max_new_tokens=new)
        for name, prompt, new in GENERATED
    }


def presets():
    """The zoo presets with a tokenizer checked here: name -> model."""
    from keras_tfm import zoo

    names = ("kjv_gpt", "fortunes_classifier", "translator_de_en", "all_minilm_l6_v2")
    return {name: zoo.from_preset(name) for name in names}


def tokenizers(models):
    """name -> tokenizer: the presets' (byte-level BPE, WordPiece, BERT
    WordPiece with HuggingFace's normalization), SmolLM2's from its GGUF
    file, and the Marian and T5 SentencePiece tokenizers of the fixtures."""
    from keras_tfm.convert import gguf_reader
    from keras_tfm.convert.gguf_llama import convert_gguf_tokenizer
    from keras_tfm.tokenizers import MarianTokenizer, T5Tokenizer, t5_tokenizer
    from keras_tfm.zoo.smollm2 import smollm2_gguf_path

    found = {name: model.preprocessor.tokenizer for name, model in models.items()}
    found["smollm2"] = convert_gguf_tokenizer(
        gguf_reader.open_gguf(smollm2_gguf_path())
    )
    marian = FIXTURES / "tiny_marian_hf"
    found["marian"] = MarianTokenizer(
        marian / "source.spm", marian / "target.spm", marian / "vocab.json"
    )
    spiece = FIXTURES / "tiny_t5_hf" / "spiece.model"
    found["t5"] = T5Tokenizer(t5_tokenizer.spiece_proto(spiece, 4))
    return found
