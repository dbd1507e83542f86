"""Where does a trained encoder look? Attention heatmaps and training curves.

Loads a trained `EncoderClassifier` that holds its tokenizer (by default the
zoo preset "fortunes_classifier", or a `.keras` file from
classify_fortunes.py), runs a sentence through it with
`return_attention_scores=True`, and saves with matplotlib:

- attention.png: one heatmap per layer (rows) and head (columns), query
  tokens down, key tokens across, with the WordPiece tokens as labels;
- training_curves.png: loss and accuracy per epoch, training and validation,
  from the history.json that classify_fortunes.py writes (the preset ships
  one);
- alignment.png: where the translation model "translator_de_en" looks while
  it writes: the decoder's cross-attention over the German source words
  (across) for each English word it produces (down), averaged over the heads,
  one panel per decoder layer (`Seq2SeqLM(...,
  return_attention_scores=True)`). docs/images/translation_alignment.png is
  this picture.

    python examples/attention_maps.py
    python examples/attention_maps.py --sentence "..." \
        --model outputs/classify_fortunes/fortunes_classifier.keras
"""

import argparse
import json
import os
import sys
from pathlib import Path

# --- Configuration ---------------------------------------------------------
PRESET = "fortunes_classifier"
SENTENCE = "Real programmers don't comment their code; it was hard to write."
MAX_TOKENS = 24  # longer sentences are cut, so the labels stay readable
TRANSLATOR = "translator_de_en"
GERMAN = "Wir haben keine Zeit."  # -> "We don't have any time."
# ---------------------------------------------------------------------------


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="a .keras file (default: preset)")
    parser.add_argument("--history", default=None, help="a history.json")
    parser.add_argument("--sentence", default=SENTENCE)
    parser.add_argument("--german", default=GERMAN, help="a sentence to translate")
    parser.add_argument("--output", default="outputs/attention_maps")
    parser.add_argument("--quick", action="store_true", help="same plots, low dpi")
    return parser.parse_args(argv)


if __name__ == "__main__":
    parse_args(sys.argv[1:])  # --help, a bad flag: answered before TensorFlow loads

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import matplotlib  # noqa: E402

matplotlib.use("Agg")  # files only, no display

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

import keras_tfm  # noqa: E402
from keras_tfm import saving  # noqa: E402
from keras_tfm.data.tokenizers import encode_for_classification  # noqa: E402


def load(args):
    if args.model:
        model = saving.load_model(args.model)
        history = args.history or Path(args.model).with_name("history.json")
        labels = None
    else:
        model = keras_tfm.zoo.from_preset(PRESET)
        directory = keras_tfm.zoo.preset_dir(PRESET)
        history = args.history or directory / "history.json"
        labels = model.class_names
    if getattr(model, "tokenizer", None) is None:
        raise ValueError(
            "The model must hold its tokenizer (EncoderClassifier(..., "
            "preprocessor=TextClassifierPreprocessor(tokenizer, ...))). "
            f"Received: a {type(model).__name__} without one, from {args.model}"
        )
    return model, Path(history), labels


def attention(model, sentence):
    """Token strings and a (layers, heads, seq, seq) array of attention weights."""
    ids = encode_for_classification(model.tokenizer, [sentence], MAX_TOKENS)
    ids = ids[:, : int((ids != 0).sum())]  # no padding columns
    _, scores = model.backbone(ids, return_attention_scores=True)
    scores = np.stack([np.asarray(s, dtype="float32")[0] for s in scores])
    tokens = [model.tokenizer.id_to_token(int(i)) for i in ids[0]]
    logits = np.asarray(model(ids))[0]
    return tokens, scores, logits


def plot_attention(tokens, scores, title, path, dpi):
    num_layers, num_heads = scores.shape[:2]
    size = 0.28 * len(tokens) + 1.2
    figure, axes = plt.subplots(
        num_layers,
        num_heads,
        figsize=(size * num_heads, size * num_layers + 0.6),
        squeeze=False,
    )
    for layer in range(num_layers):
        for h in range(num_heads):
            ax = axes[layer, h]
            ax.imshow(scores[layer, h], cmap="viridis", vmin=0.0, vmax=1.0)
            ax.set_xticks(range(len(tokens)), tokens, rotation=90, fontsize=8)
            ax.set_yticks(range(len(tokens)), tokens, fontsize=8)
            ax.set_title(f"layer {layer + 1}, head {h + 1}", fontsize=10)
            if layer == num_layers - 1:
                ax.set_xlabel("key (attended to)", fontsize=8)
            if h == 0:
                ax.set_ylabel("query", fontsize=8)
    figure.suptitle(title, fontsize=11)
    figure.tight_layout(rect=(0, 0, 1, 0.97))  # room for the title
    figure.savefig(path, dpi=dpi)
    plt.close(figure)


def alignment(model, sentence, max_new_tokens=MAX_TOKENS):
    """Source tokens, output tokens and (layers, out, src) cross-attention.

    The model translates `sentence` greedily; the translation (with its
    [END]) is fed back with teacher forcing, so row i holds the weights
    while the decoder wrote output token i, averaged over the heads.
    """
    tokenizer = model.tokenizer
    start, end = tokenizer.token_to_id("[START]"), tokenizer.token_to_id("[END]")
    source = np.asarray(tokenizer([sentence]), "int32")[:, :MAX_TOKENS]
    (output,) = model.generate(source, max_new_tokens, stop_token_ids=[end])
    target = np.array([[start, *output[:-1]]], "int32")
    _, scores = model(
        {"source_ids": source, "target_ids": target}, return_attention_scores=True
    )
    cross = np.stack([np.asarray(s)[0].mean(axis=0) for s in scores["cross_attention"]])
    source_tokens = [tokenizer.id_to_token(int(i)) for i in source[0]]
    output_tokens = [tokenizer.id_to_token(int(i)) for i in output]
    return source_tokens, output_tokens, cross


def plot_alignment(source_tokens, output_tokens, cross, title, path, dpi):
    num_layers = cross.shape[0]
    width = 0.45 * len(source_tokens) + 1.6
    height = 0.4 * len(output_tokens) + 1.4
    figure, axes = plt.subplots(
        1, num_layers, figsize=(width * num_layers, height), squeeze=False
    )
    for layer, ax in enumerate(axes[0]):
        ax.imshow(cross[layer], cmap="Greys", vmin=0.0, vmax=1.0)
        ax.set_xticks(range(len(source_tokens)), source_tokens, rotation=45)
        ax.set_yticks(range(len(output_tokens)), output_tokens)
        ax.set_title(f"decoder layer {layer + 1}", fontsize=10)
        ax.set_xlabel("German source")
        if layer == 0:
            ax.set_ylabel("English output")
    figure.suptitle(title, fontsize=10)
    figure.tight_layout()
    figure.savefig(path, dpi=dpi)
    plt.close(figure)


def plot_history(history, path, dpi):
    figure, (loss_ax, accuracy_ax) = plt.subplots(1, 2, figsize=(10, 4))
    epochs = np.arange(1, len(history["loss"]) + 1)
    for key, ax in (("loss", loss_ax), ("accuracy", accuracy_ax)):
        ax.plot(epochs, history[key], "o-", label="training")
        if f"val_{key}" in history:
            ax.plot(epochs, history[f"val_{key}"], "s-", label="validation")
        ax.set_xlabel("epoch")
        ax.set_ylabel(key)
        ax.grid(alpha=0.3)
        ax.legend()
    loss_ax.set_title("cross-entropy")
    accuracy_ax.set_title("accuracy")
    figure.suptitle("EncoderClassifier on fortune categories")
    figure.tight_layout()
    figure.savefig(path, dpi=dpi)
    plt.close(figure)


def main(argv=None):
    args = parse_args(argv)
    output = Path(args.output)
    output.mkdir(parents=True, exist_ok=True)
    dpi = 60 if args.quick else 110
    model, history_path, labels = load(args)

    tokens, scores, logits = attention(model, args.sentence)
    guess = int(np.argmax(logits))
    guess = labels[guess] if labels else f"class {guess}"
    title = f'"{args.sentence}"  predicted: {guess}'
    plot_attention(tokens, scores, title, output / "attention.png", dpi)
    written = [output / "attention.png"]
    if history_path.is_file():
        history = json.loads(history_path.read_text())
        plot_history(history, output / "training_curves.png", dpi)
        written.append(output / "training_curves.png")
    else:
        print(f"No training history at {history_path}: curves skipped.")
    translator = keras_tfm.zoo.from_preset(TRANSLATOR)
    source_tokens, output_tokens, cross = alignment(translator, args.german)
    title = f'translator_de_en on "{args.german}": cross-attention, mean of heads'
    path = output / "alignment.png"
    plot_alignment(source_tokens, output_tokens, cross, title, path, dpi)
    written.append(path)
    print("wrote", ", ".join(str(p) for p in written))
    return written


if __name__ == "__main__":
    main()
