"""Does masked-LM pretraining help? Pretrain, fine-tune, compare with scratch.

1. Pretrain an `EncoderBackbone` as a `MaskedLanguageModel` (BERT's dynamic
   masking by `MaskedLMMasker`) on the unlabelled text of the training split.
2. Fine-tune it on fortune classification with few labels
   (`labelled_examples` of the training split), and train the same
   architecture from scratch with the same fine-tuning budget (epochs,
   steps, learning rate).
3. Optionally fine-tune with LoRA (Keras `enable_lora(rank)` on every Dense
   layer of the backbone, whose biases stay trainable; embeddings and norms
   frozen; the classification head trained in full).

Prints one table (test accuracy, macro-F1, trainable parameters, seconds)
and writes results.json to --output.

    python examples/finetune_fortunes.py            # tens of minutes on 2 cores
    python examples/finetune_fortunes.py --quick    # seconds, a slice
"""

import argparse
import json
import os
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
from sklearn.metrics import accuracy_score, f1_score  # noqa: E402

import keras_tfm  # noqa: E402
from keras_tfm.data.classification import classification_dataset  # noqa: E402
from keras_tfm.data.tokenizers import train_word_piece_tokenizer  # noqa: E402
from keras_tfm.datasets.fortunes import fortune_splits  # noqa: E402
from keras_tfm.models.text_classification import predict_with_labels  # noqa: E402

# --- Configuration ---------------------------------------------------------
CONFIG = dict(
    vocabulary_size=8000,  # requested WordPiece size (the learner returns <=)
    max_sequence_length=64,  # shorter than classify_fortunes: pretraining cost
    num_layers=2,
    num_heads=4,
    hidden_dim=128,
    intermediate_dim=256,
    dropout=0.1,
    batch_size=32,  # rows per batch of the longest bucket
    pretrain_epochs=4,  # masked-LM epochs over the training split's text
    pretrain_learning_rate=1e-3,
    mask_selection_rate=0.15,
    mask_selection_length=12,  # prediction slots per sequence (15% of 64, +)
    labelled_examples=2000,  # labels used for fine-tuning (few-label regime)
    finetune_epochs=5,
    finetune_learning_rate=5e-4,
    lora_rank=8,  # 0 skips the LoRA run
    jit_compile=True,  # XLA: pays off over many steps of a few shapes
    seed=0,
)
QUICK = dict(
    vocabulary_size=300,
    max_sequence_length=32,
    num_layers=1,
    num_heads=2,
    hidden_dim=32,
    intermediate_dim=64,
    pretrain_epochs=1,
    mask_selection_length=6,
    labelled_examples=200,
    finetune_epochs=1,
    lora_rank=2,
    unlabelled_examples=300,
    evaluation_examples=150,
    jit_compile=False,  # compiling would cost more than the few steps
)
# ---------------------------------------------------------------------------


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small, fast run")
    parser.add_argument("--output", default="outputs/finetune_fortunes")
    parser.add_argument("--root", default=None, help="folder of fortune files")
    parser.add_argument("--lora-rank", type=int, default=None, help="0: no LoRA run")
    return parser.parse_args(argv)


def head(split, count, seed):
    texts, labels = split
    if count is None or count >= len(labels):
        return texts, labels
    order = np.random.default_rng(seed).permutation(len(labels))[:count]
    return [texts[i] for i in order], labels[order]


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
    """Masked-LM pretraining; returns the backbone and the last MLM accuracy."""
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
        shuffle=True,
        seed=config["seed"],
    )
    batches = int(unlabelled.cardinality())
    # Repeated, so that fit iterates it once and every epoch gets new masks
    # (a re-iterated finite dataset replays them under a fixed seed).
    unlabelled = unlabelled.repeat().map(lambda ids, _: masker(ids))
    mlm = keras_tfm.models.MaskedLanguageModel(make_backbone(config, tokenizer))
    mlm.compile(
        optimizer=optimizer(
            config["pretrain_learning_rate"], batches * config["pretrain_epochs"]
        ),
        loss=keras.losses.SparseCategoricalCrossentropy(
            from_logits=True, reduction="mean_with_sample_weight"
        ),
        weighted_metrics=["accuracy"],
        jit_compile=config["jit_compile"],
    )
    history = mlm.fit(
        unlabelled,
        epochs=config["pretrain_epochs"],
        steps_per_epoch=batches,
        shuffle=False,
        verbose=2,
    )
    return mlm.backbone, float(history.history["accuracy"][-1])


def enable_lora(backbone, rank):
    """LoRA on every Dense layer; embeddings and norms frozen, biases trained."""
    for layer in backbone._flatten_layers(include_self=False, recursive=True):
        if isinstance(layer, keras.layers.Dense | keras.layers.EinsumDense):
            # Freezes the kernel and adds the low-rank A and B; Keras leaves
            # the bias trainable (a few hundred weights), as here.
            layer.enable_lora(rank)
        elif not list(layer._flatten_layers(include_self=False)):
            layer.trainable = False  # a leaf: embedding, normalization


def finetune(config, tokenizer, backbone, datasets, num_classes):
    train_ds, test_ds = datasets
    model = keras_tfm.models.EncoderClassifier(
        backbone,
        num_classes=num_classes,
        pooling="mean",
        dropout=config["dropout"],
        tokenizer=tokenizer,
    )
    steps = int(train_ds.cardinality()) * config["finetune_epochs"]
    model.compile(
        optimizer=optimizer(config["finetune_learning_rate"], steps),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
        jit_compile=config["jit_compile"],
    )
    start = time.time()
    model.fit(train_ds, epochs=config["finetune_epochs"], shuffle=False, verbose=2)
    seconds = time.time() - start
    logits, labels = predict_with_labels(model, test_ds)
    predictions = logits.argmax(axis=1)
    trainable = sum(int(np.prod(w.shape)) for w in model.trainable_weights)
    return {
        "accuracy": float(accuracy_score(labels, predictions)),
        "macro_f1": float(f1_score(labels, predictions, average="macro")),
        "trainable_parameters": trainable,
        "seconds": round(seconds, 1),
    }


def table(rows):
    lines = [
        f"{'fine-tuning':<34} {'accuracy':>9} {'macro-F1':>9} "
        f"{'trainable':>10} {'seconds':>8}"
    ]
    for name, r in rows.items():
        lines.append(
            f"{name:<34} {r['accuracy']:>9.3f} {r['macro_f1']:>9.3f} "
            f"{r['trainable_parameters']:>10,} {r['seconds']:>8.0f}"
        )
    return "\n".join(lines)


def main(argv=None):
    args = parse_args(argv)
    config = dict(CONFIG)
    if args.quick:
        config.update(QUICK)
    if args.lora_rank is not None:
        config["lora_rank"] = args.lora_rank
    output = Path(args.output)
    output.mkdir(parents=True, exist_ok=True)
    keras.utils.set_random_seed(config["seed"])
    start = time.time()

    splits = fortune_splits(args.root, seed=config["seed"])
    class_names = splits["class_names"]
    unlabelled = head(splits["train"], config.get("unlabelled_examples"), 1)[0]
    labelled = head(splits["train"], config["labelled_examples"], 2)
    test = head(splits["test"], config.get("evaluation_examples"), 3)
    tokenizer = train_word_piece_tokenizer(unlabelled, config["vocabulary_size"])
    print(
        f"{len(unlabelled)} unlabelled texts, {len(labelled[1])} labelled, "
        f"{len(test[1])} test; {len(class_names)} classes; "
        f"vocabulary {tokenizer.vocabulary_size()}"
    )

    def dataset(split, shuffle):
        return classification_dataset(
            *split,
            tokenizer,
            config["batch_size"],
            config["max_sequence_length"],
            shuffle=shuffle,
            seed=config["seed"],
        )

    datasets = (dataset(labelled, True), dataset(test, False))
    results = {}
    pretrain_start = time.time()
    backbone, mlm_accuracy = pretrain(config, tokenizer, unlabelled)
    pretrain_seconds = time.time() - pretrain_start
    pretrained_weights = backbone.get_weights()

    keras.utils.set_random_seed(config["seed"] + 1)
    results["from scratch"] = finetune(
        config, tokenizer, make_backbone(config, tokenizer), datasets, len(class_names)
    )
    keras.utils.set_random_seed(config["seed"] + 1)
    results["MLM-pretrained, full fine-tuning"] = finetune(
        config, tokenizer, backbone, datasets, len(class_names)
    )
    if config["lora_rank"]:
        keras.utils.set_random_seed(config["seed"] + 1)
        lora_backbone = make_backbone(config, tokenizer)
        lora_backbone.set_weights(pretrained_weights)
        enable_lora(lora_backbone, config["lora_rank"])
        results[f"MLM-pretrained, LoRA rank {config['lora_rank']}"] = finetune(
            config, tokenizer, lora_backbone, datasets, len(class_names)
        )
    print(table(results))
    summary = {
        "results": results,
        "pretraining": {
            "masked_token_accuracy": mlm_accuracy,
            "seconds": round(pretrain_seconds, 1),
            "texts": len(unlabelled),
        },
        "labelled_examples": len(labelled[1]),
        "test_examples": len(test[1]),
        "config": config,
        "wall_seconds": round(time.time() - start, 1),
    }
    (output / "results.json").write_text(json.dumps(summary, indent=1))
    print(f"wall time {time.time() - start:.0f} s; outputs in {output}")
    return summary


if __name__ == "__main__":
    main()
