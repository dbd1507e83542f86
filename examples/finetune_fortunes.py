"""Does masked-LM pretraining help? Pretrain, fine-tune, compare with scratch.

1. Pretrain an `EncoderBackbone` as a `MaskedLanguageModel` (BERT's dynamic
   masking by `MaskedLMMasker`) on all the unlabelled text at hand: every
   fortune outside the validation and test splits (the labelled training
   split plus the entries the classification data drops: small categories,
   long entries, cross-category repeats) and, with `--kjv`, the King James
   Bible (Debian's `bible-kjv`) cut into passages of about 40 words.
2. Fine-tune it on fortune classification with few labels
   (`labelled_examples` of the training split); train the same architecture
   from scratch beside it with the same budget. Every run starts from a
   linear-probe head (`keras_tfm.training.probe_head`: logistic regression
   on the frozen backbone's pooled features of the labelled examples, copied
   into the head; LP-FT), picks its learning rate from
   `finetune_learning_rates` and keeps its best epoch (up to
   `finetune_epochs`) by accuracy on `validation_examples` held-out labels.
3. Optionally fine-tune with LoRA (Keras `enable_lora(rank)` on every Dense
   layer of the backbone, whose biases stay trainable; embeddings and norms
   frozen; the classification head trained in full) at 10x the learning
   rate chosen for full fine-tuning, the usual LoRA setting.

Prints one table (test accuracy, macro-F1, chosen learning rate and epoch,
trainable parameters, seconds) with TF-IDF + logistic regression on the same
labels beside it, and writes results.json and the pretrained masked LM
(masked_lm.keras, its WordPiece tokenizer attached; `.backbone` is the encoder
to fine-tune on labels of your own) to --output.

    python examples/finetune_fortunes.py            # 1-1.5 hours on 2 cores
    python examples/finetune_fortunes.py --quick    # seconds, a slice
    # fine-tuning only, from the masked LM an earlier run saved:
    python examples/finetune_fortunes.py --masked-lm outputs/masked_lm.keras
"""

import argparse
import json
import os
import sys
import time
from pathlib import Path

# --- Configuration ---------------------------------------------------------
CONFIG = dict(
    vocabulary_size=8000,  # requested WordPiece size (the learner returns <=)
    vocabulary_texts=12000,  # texts the vocabulary is learned from (its cost)
    max_sequence_length=64,  # fortunes' median is ~30 tokens; pretraining cost
    num_layers=4,
    num_heads=4,
    hidden_dim=256,
    intermediate_dim=1024,
    dropout=0.1,
    batch_size=64,  # rows per batch of the longest bucket
    bucket_lengths=None,  # padded lengths; None: 16, 32, 64
    kjv=False,  # add the King James Bible (--kjv): no better here (README)
    passage_words=40,  # KJV passages of about this many words
    pretrain_epochs=24,  # masked-LM passes over the unlabelled text
    pretrain_learning_rate=1e-3,
    mask_selection_rate=0.15,
    mask_selection_length=12,  # prediction slots per sequence (15% of 64, +)
    labelled_examples=2000,  # labels used for fine-tuning (few-label regime)
    validation_examples=500,  # held-out labels that choose epoch and rate
    finetune_batch_size=32,
    finetune_epochs=20,  # at most; the best validation epoch is kept
    finetune_patience=4,  # epochs without a better validation accuracy
    finetune_learning_rates=(3e-5, 1e-4, 1e-3),
    lora_rank=8,  # 0 skips the LoRA run
    lora_learning_rate_factor=10.0,  # x the rate chosen for full fine-tuning
    probe_head=True,  # start fine-tuning from a linear-probe head (LP-FT)
    head_probe_c=1.0,  # inverse L2 strength of that probe
    seed=0,  # the splits, the tokenizer's sample, pretraining
    finetune_seed=1,  # each fine-tuning run's head, dropout and batch order
    run_eagerly=False,
)
QUICK = dict(
    vocabulary_size=300,
    vocabulary_texts=300,
    max_sequence_length=32,
    num_layers=1,
    num_heads=2,
    hidden_dim=32,
    intermediate_dim=64,
    batch_size=32,
    bucket_lengths=[32],  # one padded shape: one trace per fit
    kjv=False,
    pretrain_epochs=1,
    mask_selection_length=6,
    labelled_examples=200,
    validation_examples=100,
    finetune_epochs=2,
    finetune_learning_rates=(1e-3,),
    lora_rank=2,
    unlabelled_examples=300,
    evaluation_examples=150,
    run_eagerly=True,  # a few steps a fit: tracing them would cost more
)
# ---------------------------------------------------------------------------


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small, fast run")
    parser.add_argument("--output", default="outputs/finetune_fortunes")
    parser.add_argument("--root", default=None, help="folder of fortune files")
    parser.add_argument("--lora-rank", type=int, default=None, help="0: no LoRA run")
    parser.add_argument(
        "--pretrain-epochs", type=int, default=None, help="masked-LM passes"
    )
    parser.add_argument(
        "--kjv",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="add the King James Bible to the pretraining text (default: no)",
    )
    parser.add_argument(
        "--masked-lm",
        help="a masked_lm.keras of an earlier run to fine-tune (skips pretraining)",
    )
    parser.add_argument(
        "--probe-head",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="start from a linear-probe head (default: yes)",
    )
    parser.add_argument(
        "--finetune-seed",
        type=int,
        default=None,
        help="seed of the fine-tuning runs (head, scratch weights, dropout, "
        "order); the splits and pretraining keep theirs (default: 1)",
    )
    parser.add_argument(
        "--learning-rates",
        type=float,
        nargs="+",
        default=None,
        help="fine-tuning rates to choose from on validation",
    )
    return parser.parse_args(argv)


if __name__ == "__main__":
    parse_args(sys.argv[1:])  # --help, a bad flag: answered before TensorFlow loads

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
from sklearn.metrics import accuracy_score, f1_score  # noqa: E402

import keras_tfm  # noqa: E402
from keras_tfm import baselines  # noqa: E402
from keras_tfm.data.classification import classification_dataset  # noqa: E402
from keras_tfm.data.tokenizers import train_word_piece_tokenizer  # noqa: E402
from keras_tfm.datasets.bible import load_bible  # noqa: E402
from keras_tfm.datasets.fortunes import fortune_splits, load_fortunes  # noqa: E402
from keras_tfm.saving import atomic_save  # noqa: E402
from keras_tfm.training import device_defaults  # noqa: E402
from keras_tfm.training.text_classification import predict_with_labels  # noqa: E402


def head(split, count, seed):
    texts, labels = split
    if count is None or count >= len(labels):
        return texts, labels
    order = np.random.default_rng(seed).permutation(len(labels))[:count]
    return [texts[i] for i in order], labels[order]


def passages(text, words):
    """Consecutive lines joined into passages of at least `words` words."""
    result, current = [], []
    for line in text.splitlines():
        current.extend(line.split())
        if len(current) >= words:
            result.append(" ".join(current))
            current = []
    if current:
        result.append(" ".join(current))
    return result


def unlabelled_texts(splits, root, config):
    """Every fortune outside validation and test, and optionally the KJV.

    `load_fortunes` with no category or length limit reads the entries the
    classification data leaves out as well; a text equal to a validation or
    test entry is dropped, so nothing held out is seen in pretraining.
    """
    held_out = set(splits["validation"][0]) | set(splits["test"][0])
    fortunes = load_fortunes(root, min_entries=1, max_chars=100_000)[0]
    texts = [t for t in fortunes if t not in held_out]
    if config["kjv"]:
        texts += passages(load_bible(), config["passage_words"])
    return texts


def make_backbone(config, tokenizer):
    return keras_tfm.models.EncoderBackbone(
        vocabulary_size=tokenizer.vocabulary_size(),
        num_layers=config["num_layers"],
        num_heads=config["num_heads"],
        hidden_dim=config["hidden_dim"],
        intermediate_dim=config["intermediate_dim"],
        max_sequence_length=config["max_sequence_length"],
        num_segments=0,
        dropout=config["dropout"],
        padding_id=tokenizer.token_to_id("[PAD]"),
    )


def optimizer(learning_rate, steps):
    schedule = keras.optimizers.schedules.CosineDecay(
        0.0,
        decay_steps=max(1, steps - steps // 10),
        warmup_target=learning_rate,
        warmup_steps=max(1, steps // 10),
    )
    return keras.optimizers.AdamW(schedule, weight_decay=0.01)


def pretrain(config, tokenizer, texts):
    """Masked-LM pretraining; returns the masked LM and its history."""
    masker = keras_tfm.models.MaskedLMMasker(
        vocabulary_size=tokenizer.vocabulary_size(),
        mask_token_id=tokenizer.token_to_id("[MASK]"),
        mask_selection_length=config["mask_selection_length"],
        mask_selection_rate=config["mask_selection_rate"],
        unselectable_token_ids=[
            tokenizer.token_to_id("[CLS]"),
            tokenizer.token_to_id("[SEP]"),
        ],
        padding_id=tokenizer.token_to_id("[PAD]"),
    )
    unlabelled = classification_dataset(
        texts,
        np.zeros(len(texts), "int32"),  # the labels are not used
        tokenizer,
        config["batch_size"],
        config["max_sequence_length"],
        config["bucket_lengths"],
        shuffle=True,
        seed=config["seed"],
    )
    batches = int(unlabelled.cardinality())
    # Repeated, so that fit iterates it once and every epoch gets new masks
    # (a re-iterated finite dataset replays them under a fixed seed).
    unlabelled = unlabelled.repeat().map(lambda ids, _: masker(ids))
    mlm = keras_tfm.models.MaskedLanguageModel(
        make_backbone(config, tokenizer),
        preprocessor=keras_tfm.models.MaskedLMPreprocessor(
            tokenizer, sequence_length=config["max_sequence_length"]
        ),
    )
    mlm.compile(
        optimizer=optimizer(
            config["pretrain_learning_rate"], batches * config["pretrain_epochs"]
        ),
        loss=keras.losses.SparseCategoricalCrossentropy(
            from_logits=True, reduction="mean_with_sample_weight"
        ),
        weighted_metrics=["accuracy"],
        jit_compile=config["jit_compile"],
        run_eagerly=config["run_eagerly"],
    )
    history = mlm.fit(
        unlabelled,
        epochs=config["pretrain_epochs"],
        steps_per_epoch=batches,
        shuffle=False,
        verbose=2,
    )
    return mlm, {k: [float(v) for v in vs] for k, vs in history.history.items()}


def enable_lora(backbone, rank):
    """LoRA on every Dense layer; embeddings and norms frozen, biases trained."""
    for layer in backbone._flatten_layers(include_self=False, recursive=True):
        if isinstance(layer, keras.layers.Dense | keras.layers.EinsumDense):
            # Freezes the kernel and adds the low-rank A and B; Keras leaves
            # the bias trainable (a few hundred weights), as here.
            layer.enable_lora(rank)
        elif not list(layer._flatten_layers(include_self=False)):
            layer.trainable = False  # a leaf: embedding, normalization


def scores(labels, predictions):
    return {
        "accuracy": float(accuracy_score(labels, predictions)),
        "macro_f1": float(f1_score(labels, predictions, average="macro")),
    }


def tfidf_baseline(train, test, seed):
    classifier = baselines.tfidf_classifier(*train, seed=seed)
    return scores(test[1], classifier.predict(test[0]))


def finetune(config, tokenizer, new_backbone, datasets, num_classes, rates):
    """Fine-tunes at each learning rate; keeps the best on validation.

    `new_backbone()` returns a fresh backbone for each rate (pretrained
    weights, or new ones from scratch). With `probe_head`, the head first
    becomes a linear probe of the frozen backbone's features (LP-FT), and its
    validation accuracy is recorded. Each run keeps its best validation
    epoch (Keras `EarlyStopping(restore_best_weights=True)`); the run with
    the best validation accuracy is evaluated on the test split.
    """
    train_ds, validation_ds, test_ds = datasets
    start = time.time()
    best = None
    for rate in rates:
        keras.utils.set_random_seed(config["finetune_seed"])  # same head, order
        model = keras_tfm.models.EncoderClassifier(
            new_backbone(),
            num_classes=num_classes,
            pooling="mean",
            dropout=config["dropout"],
            preprocessor=keras_tfm.models.TextClassifierPreprocessor(
                tokenizer, sequence_length=config["max_sequence_length"]
            ),
        )
        if config["probe_head"]:
            features, labels = keras_tfm.training.pooled_features(model, train_ds)
            keras_tfm.training.probe_head(
                model, features, labels, c=config["head_probe_c"]
            )
        steps = int(train_ds.cardinality()) * config["finetune_epochs"]
        model.compile(
            optimizer=optimizer(rate, steps),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=["accuracy"],
            jit_compile=config["jit_compile"],
            run_eagerly=config["run_eagerly"],
        )
        probe_accuracy = None
        if config["probe_head"]:
            probe_accuracy = model.evaluate(validation_ds, verbose=0, return_dict=True)
            probe_accuracy = float(probe_accuracy["accuracy"])
            print(f"  validation accuracy of the probe head: {probe_accuracy:.3f}")
        best_epoch = keras.callbacks.EarlyStopping(
            "val_accuracy",
            mode="max",
            patience=config["finetune_patience"],
            restore_best_weights=True,
        )
        model.fit(
            train_ds,
            validation_data=validation_ds,
            epochs=config["finetune_epochs"],
            callbacks=[best_epoch],
            shuffle=False,
            verbose=2,
        )
        validation = float(best_epoch.best)
        print(f"  learning rate {rate:g}: best validation accuracy {validation:.3f}")
        if best is None or validation > best["validation_accuracy"]:
            logits, labels = predict_with_labels(model, test_ds)
            trainable = sum(int(np.prod(w.shape)) for w in model.trainable_weights)
            best = dict(
                scores(labels, logits.argmax(axis=1)),
                validation_accuracy=validation,
                learning_rate=rate,
                best_epoch=best_epoch.best_epoch + 1,
                trainable_parameters=trainable,
                probe_validation_accuracy=probe_accuracy,
            )
    best["seconds"] = round(time.time() - start, 1)
    return best


def table(rows):
    lines = [
        f"{'fine-tuning':<34} {'accuracy':>9} {'macro-F1':>9} {'rate':>7} "
        f"{'epoch':>5} {'trainable':>10} {'seconds':>8}"
    ]
    for name, r in rows.items():
        lines.append(
            f"{name:<34} {r['accuracy']:>9.3f} {r['macro_f1']:>9.3f} "
            f"{r.get('learning_rate', float('nan')):>7.0e} "
            f"{r.get('best_epoch', ''):>5} {r.get('trainable_parameters', 0):>10,} "
            f"{r.get('seconds', 0):>8.0f}"
        )
    return "\n".join(lines)


def main(argv=None):
    args = parse_args(argv)
    config = dict(CONFIG)
    defaults = device_defaults()
    config.update(dtype_policy=defaults.dtype_policy, jit_compile=defaults.jit_compile)
    if args.quick:
        config.update(QUICK, dtype_policy="float32", jit_compile=False)
    if args.lora_rank is not None:
        config["lora_rank"] = args.lora_rank
    if args.pretrain_epochs is not None:
        config["pretrain_epochs"] = args.pretrain_epochs
    if args.kjv is not None:
        config["kjv"] = args.kjv
    if args.probe_head is not None:
        config["probe_head"] = args.probe_head
    if args.finetune_seed is not None:
        config["finetune_seed"] = args.finetune_seed
    if args.learning_rates:
        config["finetune_learning_rates"] = tuple(args.learning_rates)
    output = Path(args.output)
    output.mkdir(parents=True, exist_ok=True)
    keras.config.set_dtype_policy(config["dtype_policy"])
    keras.utils.set_random_seed(config["seed"])
    start = time.time()

    splits = fortune_splits(args.root, seed=config["seed"])
    class_names = splits["class_names"]
    unlabelled = unlabelled_texts(splits, args.root, config)
    if config.get("unlabelled_examples"):
        unlabelled = unlabelled[: config["unlabelled_examples"]]
    labelled = head(splits["train"], config["labelled_examples"], 2)
    validation = head(splits["validation"], config["validation_examples"], 4)
    test = head(splits["test"], config.get("evaluation_examples"), 3)
    if args.masked_lm:  # an earlier run's pretraining, with its tokenizer
        mlm = keras_tfm.saving.load_model(args.masked_lm)
        tokenizer = mlm.tokenizer
    else:
        vocabulary_texts = head(splits["train"], config["vocabulary_texts"], 5)[0]
        tokenizer = train_word_piece_tokenizer(
            vocabulary_texts, config["vocabulary_size"]
        )
    print(
        f"{len(unlabelled)} unlabelled texts ({sum(map(len, unlabelled)):,} "
        f"characters), {len(labelled[1])} labelled, {len(validation[1])} "
        f"validation, {len(test[1])} test; {len(class_names)} classes; "
        f"vocabulary {tokenizer.vocabulary_size()}; {config['dtype_policy']}, "
        f"jit_compile={config['jit_compile']}"
    )

    def dataset(split, shuffle):
        return classification_dataset(
            *split,
            tokenizer,
            config["finetune_batch_size"],
            config["max_sequence_length"],
            config["bucket_lengths"],
            shuffle=shuffle,
            seed=config["seed"],
        )

    datasets = (
        dataset(labelled, True),
        dataset(validation, False),
        dataset(test, False),
    )
    num_classes = len(class_names)
    results = {
        "TF-IDF + logistic regression": tfidf_baseline(labelled, test, config["seed"])
    }
    pretrain_start = time.time()
    mlm_history = {}
    if not args.masked_lm:
        mlm, mlm_history = pretrain(config, tokenizer, unlabelled)
        # Without the optimizer's state (twice the weights again with AdamW).
        atomic_save(mlm, output / "masked_lm.keras", include_optimizer=False)
    pretrain_seconds = time.time() - pretrain_start
    pretrained_weights = mlm.backbone.get_weights()

    def scratch():  # the pretrained backbone's architecture, new weights
        return keras_tfm.models.EncoderBackbone.from_config(mlm.backbone.get_config())

    def pretrained():
        new = scratch()
        new.set_weights(pretrained_weights)
        return new

    rates = config["finetune_learning_rates"]
    results["from scratch"] = finetune(
        config, tokenizer, scratch, datasets, num_classes, rates
    )
    full = finetune(config, tokenizer, pretrained, datasets, num_classes, rates)
    results["MLM-pretrained, full fine-tuning"] = full
    if config["lora_rank"]:

        def lora():
            new = pretrained()
            enable_lora(new, config["lora_rank"])
            return new

        lora_rate = full["learning_rate"] * config["lora_learning_rate_factor"]
        results[f"MLM-pretrained, LoRA rank {config['lora_rank']}"] = finetune(
            config, tokenizer, lora, datasets, num_classes, [lora_rate]
        )
    print(table(results))
    gain = full["accuracy"] - results["from scratch"]["accuracy"]
    print(f"pretraining gain over scratch: {100 * gain:+.1f} accuracy points")
    summary = {
        "results": results,
        "pretraining": {
            "masked_token_accuracy": mlm_history.get("accuracy", [None])[-1],
            "history": mlm_history,
            "masked_lm": args.masked_lm or str(output / "masked_lm.keras"),
            "seconds": round(pretrain_seconds, 1),
            "texts": len(unlabelled),
            "characters": sum(map(len, unlabelled)),
        },
        "labelled_examples": len(labelled[1]),
        "validation_examples": len(validation[1]),
        "test_examples": len(test[1]),
        "config": config,
        "wall_seconds": round(time.time() - start, 1),
    }
    (output / "results.json").write_text(json.dumps(summary, indent=1))
    print(f"wall time {time.time() - start:.0f} s; outputs in {output}")
    return summary


if __name__ == "__main__":
    main()
