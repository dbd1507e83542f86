"""Train a German -> English Transformer on Debian's `trans-de-en` dictionary.

Data: the sentence-like pairs of the dictionary (both sides end in . ! ? and
have >= 3 words; about 23,000 pairs), split 90/5/5 into train/validation/test
so that no sentence is in two splits, plus the dictionary's word and phrase
pairs (about 870,000) as extra training data: they teach the words the
sentences do not. A word or phrase pair that shares a side with a
validation or test sentence (case and punctuation ignored) is dropped, so
nothing held out leaks into training. A shared German+English WordPiece
vocabulary is learned on the training sentences with keras-hub and attached to
the model, so the saved preset is self-contained. The whole test split is
translated (sources and targets up to 128 tokens) with greedy decoding and
with beam search, scored with sacrebleu (BLEU and chrF) beside the
word-by-word dictionary baseline on the same sentences.

    apt-get install -y trans-de-en && pip install sacrebleu
    python examples/translate_de_en.py            # full run, writes the preset
    python examples/translate_de_en.py --quick    # a small slice, < 1 minute
    python examples/translate_de_en.py --evaluate zoo/translator_de_en
                                                  # the preset on each split

Continuing the preset, with back-translation (issue 43): the preset is
fine-tuned English -> German (`reverse_steps`), translates the English
fortunes' sentences of 3-10 words (none equal to a validation or test
sentence) into German, and the pairs (synthetic German, real English) join
the training data, each as often as a real sentence pair. A recipe is
chosen on the validation split (`--validation-only`), and only the chosen
run is tested and saved (`--from-run`):

    apt-get install -y fortunes
    python examples/translate_de_en.py --init zoo/translator_de_en \
        --back-translate --synthetic runs/bt.tsv --dropout 0.25 --steps 800 \
        --epochs 8 --learning-rate 5e-4 --warmup-steps 80 \
        --validation-only --run-dir runs/de_en_bt
    python examples/translate_de_en.py --from-run runs/de_en_bt --save DIR
"""

import argparse
import json
import os
import sys
import time

# --- Configuration ------------------------------------------------------------
FULL = dict(
    vocabulary_size=8000,  # requested WordPiece size (the learner may stop short)
    train_pairs=None,  # all training sentence pairs
    lexicon_pairs=None,  # all word and phrase pairs (None), or the first n
    sentence_repeats=20,  # each training sentence pair appears this often an epoch
    test_pairs=None,  # the whole test split
    max_length=128,  # tokens per side, with [START]/[END]
    model=dict(
        num_encoder_layers=3,
        num_decoder_layers=3,
        num_heads=4,
        hidden_dim=256,
        intermediate_dim=1024,
        dropout=0.1,
        activation="gelu",
        normalize_first=True,
    ),
    batch_size=128,  # with tokens_per_batch: at most 8x this many pairs a batch
    tokens_per_batch=4096,  # shorter buckets take more pairs (about equal steps)
    bucket_boundaries=(4, 6, 8, 12, 16, 24, 32, 48, 64),
    device_defaults=True,  # the dtype policy and XLA setting fastest here
    steps=4000,  # optimizer steps, in `epochs` equal parts (validated after each)
    epochs=20,
    learning_rate=1e-3,  # peak, after a linear warm-up, then cosine decay to 0
    warmup_steps=800,
    label_smoothing=0.1,
    num_beams=4,
    length_penalty=1.5,  # chosen on validation: 0.6, 1.0, 1.5, 2.0 (examples/README.md)
    # --back-translate: English fortunes translated into German by the
    # model fine-tuned English -> German, added to training as pairs.
    reverse_steps=300,  # English -> German fine-tune of the --init preset
    monolingual_max_words=10,  # English fortune sentences of 3 to 10 words
    monolingual_sentences=None,  # all of them (None), or the first n
    synthetic_repeats=20,  # as often an epoch as each real sentence pair
)
QUICK = dict(
    FULL,
    vocabulary_size=600,
    train_pairs=600,  # also the vocabulary's text: the learner is slow
    lexicon_pairs=600,
    sentence_repeats=1,
    test_pairs=16,
    max_length=32,
    bucket_boundaries=(),  # one shape: one traced step
    batch_size=32,
    tokens_per_batch=None,
    model=dict(
        num_encoder_layers=1,
        num_decoder_layers=1,
        num_heads=2,
        hidden_dim=32,
        intermediate_dim=64,
        dropout=0.1,
    ),
    device_defaults=False,
    reverse_steps=4,
    monolingual_sentences=32,
    synthetic_repeats=1,
    steps=40,
    epochs=2,
    warmup_steps=10,
)
# Shown translated on the preset's card (marked where one is a training sentence).
EVERYDAY = [
    "Wie spät ist es?",
    "Ich habe heute keine Zeit.",
    "Wo ist der Bahnhof?",
    "Das Wetter ist heute sehr schön.",
    "Kannst du mir bitte helfen?",
    "Wir fahren morgen mit dem Zug nach Berlin.",
]
SEED = 0
PRESET = "zoo/translator_de_en"
BASELINE = "dictionary"  # word by word, keras_tfm.baselines.DictionaryTranslator
# ------------------------------------------------------------------------------


def translate(model, sentences, batch_size=128, **generate_args):
    """Detokenized translations of German `sentences`."""
    tokenizer = model.tokenizer
    end = tokenizer.token_to_id("[END]")
    outputs = []
    for i in range(0, len(sentences), batch_size):
        ids = translation._token_lists(tokenizer(sentences[i : i + batch_size]))
        ids = [row[: model.max_sequence_length] or [1] for row in ids]
        generated = model.generate(
            ids,
            max_new_tokens=model.max_sequence_length - 1,
            stop_token_ids=[end],
            **generate_args,
        )
        for row in generated:
            row = [t for t in row if t not in (end, model.padding_id)]
            text = tokenizer.detokenize([row])[0]
            text = text.numpy() if hasattr(text, "numpy") else text
            outputs.append(translation.detokenize_text(text))
    return outputs


def score(hypotheses, references):
    """sacrebleu BLEU and chrF of `hypotheses` against one reference each."""
    bleu = sacrebleu.corpus_bleu(hypotheses, [references])
    chrf = sacrebleu.corpus_chrf(hypotheses, [references])
    return {"bleu": round(bleu.score, 2), "chrf": round(chrf.score, 2)}


def results_table(results, num_pairs):
    """Model vs baseline: BLEU and chrF of each decoding on the test split."""
    lines = [f"{f'test split, {num_pairs} pairs':<34} {'BLEU':>6} {'chrF':>6}"]
    for name, r in results.items():
        label = f"baseline: {BASELINE}" if name == BASELINE else f"model, {name}"
        lines.append(f"{label:<34} {r['bleu']:>6.2f} {r['chrf']:>6.2f}")
    return "\n".join(lines)


def build_model(config, tokenizer, schedule=None):
    """A new Seq2SeqLM, compiled (see `compile_model`)."""
    backbone = Seq2SeqBackbone(
        vocabulary_size=tokenizer.vocabulary_size(),
        max_sequence_length=config["max_length"],
        **config["model"],
    )
    model = Seq2SeqLM(backbone, Seq2SeqLM.preprocessor_for(tokenizer, backbone))
    return compile_model(model, config, schedule)


def warm_start(directory, config):
    """The preset in `directory` (weights and tokenizer) with the config's
    dropout, compiled (see `compile_model`): training continues from it."""
    from keras_tfm.zoo.catalogue import build_from_directory

    model = build_from_directory(directory, dropout=config["model"]["dropout"])
    return compile_model(model, config)


def compile_model(model, config, schedule=None):
    """`model` compiled with AdamW on a warm-up + cosine schedule over
    `config["steps"]` (or on `schedule`, a learning rate schedule)."""
    if schedule is None:
        warmup_steps = min(config["warmup_steps"], config["steps"] // 5)
        schedule = keras.optimizers.schedules.CosineDecay(
            0.0,
            decay_steps=config["steps"] - warmup_steps,
            warmup_target=config["learning_rate"],
            warmup_steps=warmup_steps,
        )
    model.compile(
        optimizer=keras.optimizers.AdamW(schedule, beta_2=0.98, weight_decay=0.01),
        loss=training.TokenCrossEntropy(label_smoothing=config["label_smoothing"]),
        metrics=[training.TokenAccuracy()],
        jit_compile=bool(config["device_defaults"])
        and training.device_defaults().jit_compile,
        run_eagerly=config.get("run_eagerly", False),
    )
    return model


def training_pairs(config, train, held_out, path=None):
    """The training sentence pairs, repeated, and the word and phrase pairs.

    The dictionary's other pairs go in without any that shares a side with
    a `held_out` (validation or test) sentence.
    """
    sentences = set(trans_de_en.load_translation_pairs(path))
    lexicon = [
        pair
        for pair in trans_de_en.load_translation_pairs(path, sentence_like=False)
        if pair not in sentences
    ]
    lexicon = trans_de_en.without_held_out(lexicon, held_out)
    lexicon = lexicon[: config["lexicon_pairs"]]
    return list(train) * config["sentence_repeats"] + lexicon, len(lexicon)


def back_translated_pairs(config, training_set, validation, held_out, init, cache):
    """(synthetic German, English fortune sentence) pairs, repeated.

    The preset in `init` is fine-tuned English -> German for
    `config["reverse_steps"]` steps on the reversed `training_set` and
    translates the English fortunes' sentences (greedy) into German. A
    sentence whose words equal a held-out English sentence's is dropped.
    With a `cache` path, the pairs are read from it if it exists, else
    written to it (tab-separated, German first).
    """
    if cache and os.path.exists(cache):
        with open(cache, encoding="utf-8") as f:
            pairs = [tuple(line.rstrip("\n").split("\t")) for line in f]
        print(f"{len(pairs)} back-translated pairs read from {cache}")
        return pairs * config["synthetic_repeats"]
    sentences = fortunes.fortune_sentences(
        max_words=config["monolingual_max_words"]
    )
    kept = trans_de_en.without_sentences(sentences, [en for _, en in held_out])
    print(
        f"English fortunes: {len(sentences)} sentences of 3-"
        f"{config['monolingual_max_words']} words, {len(sentences) - len(kept)} "
        "dropped as validation or test sentences"
    )
    kept = kept[: config["monolingual_sentences"]]
    reverse = warm_start(init, dict(config, steps=config["reverse_steps"]))
    reversed_set = [(en, de) for de, en in training_set]
    tick = time.time()
    reverse.fit(
        make_dataset(config, reversed_set, reverse.tokenizer, shuffle=True).repeat(),
        steps_per_epoch=config["reverse_steps"],
        validation_data=make_dataset(
            config, [(en, de) for de, en in validation[:500]], reverse.tokenizer
        ),
        shuffle=False,
        verbose=2,
    )
    print(f"English -> German fine-tune: {time.time() - tick:.0f} s")
    tick = time.time()
    order = sorted(range(len(kept)), key=lambda i: len(kept[i]))
    german = translate(reverse, [kept[i] for i in order], batch_size=256)
    synthetic = sorted(zip(order, german, strict=True))
    pairs = [(" ".join(de.split()), kept[i]) for i, de in synthetic if de.strip()]
    print(f"Back-translated {len(pairs)} sentences ({time.time() - tick:.0f} s)")
    for de, en in pairs[:: max(1, len(pairs) // 5)]:
        print(f"  {en}  ->  {de}")
    if cache:
        with open(cache, "w", encoding="utf-8") as f:
            f.writelines(f"{de}\t{en}\n" for de, en in pairs)
    return pairs * config["synthetic_repeats"]


def make_dataset(config, pairs, tokenizer, shuffle=False):
    """`pairs` as batches of the config's shapes (bucketed by length)."""
    return translation.translation_dataset(
        pairs,
        tokenizer,
        config["batch_size"],
        config["max_length"],
        shuffle,
        SEED,
        config["bucket_boundaries"],
        config["tokens_per_batch"],
    )


def positive_int(text):
    """argparse type of a count: 0 steps or epochs would train nothing."""
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer: {value}")
    return value


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a small slice, < 1 min")
    parser.add_argument(
        "--steps", type=positive_int, help="override the configured steps"
    )
    parser.add_argument(
        "--epochs", type=positive_int, help="override the configured epochs"
    )
    parser.add_argument(
        "--sentence-repeats",
        type=positive_int,
        help="override how often each training sentence pair appears an epoch",
    )
    parser.add_argument(
        "--dropout", type=float, help="override the model's dropout rate"
    )
    parser.add_argument(
        "--learning-rate", type=float, help="override the schedule's peak"
    )
    parser.add_argument(
        "--warmup-steps", type=positive_int, help="override the warm-up steps"
    )
    parser.add_argument(
        "--init",
        metavar="PRESET_DIR",
        help="continue training from a saved preset folder (its weights and "
        f"tokenizer, e.g. {PRESET}) instead of a new model and vocabulary",
    )
    parser.add_argument(
        "--back-translate",
        action="store_true",
        help="with --init: add English fortunes back-translated into German "
        "(by the --init preset fine-tuned English -> German) to training",
    )
    parser.add_argument(
        "--synthetic",
        metavar="TSV",
        help="with --back-translate: read the back-translated pairs from this "
        "file if it exists, else write them to it",
    )
    parser.add_argument(
        "--validation-only",
        action="store_true",
        help="after training, score the validation split only (choosing a "
        "recipe: the test split is kept for the chosen one)",
    )
    parser.add_argument(
        "--run-dir",
        help="write the trained model and its history to this folder (for "
        "--from-run)",
    )
    parser.add_argument(
        "--from-run",
        metavar="RUN_DIR",
        help="train nothing: test (and --save) the model a --run-dir holds",
    )
    parser.add_argument(
        "--length-penalty",
        type=float,
        help="override beam search's length penalty (GNMT alpha)",
    )
    parser.add_argument(
        "--max-minutes",
        type=float,
        help="stop training after the first epoch that ends past this budget",
    )
    parser.add_argument(
        "--data", help="the dictionary (default /usr/share/trans/de-en)"
    )
    parser.add_argument(
        "--save", help=f"write the trained model as a preset folder (e.g. {PRESET})"
    )
    parser.add_argument(
        "--evaluate",
        metavar="PRESET_DIR",
        help="train nothing: score a saved preset folder (e.g. "
        f"{PRESET}) on training, validation and test sentences",
    )
    return parser.parse_args(argv)


if __name__ == "__main__":
    parse_args(sys.argv[1:])  # --help, a bad flag: answered before TensorFlow loads

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import sacrebleu  # noqa: E402

from keras_tfm import baselines, training  # noqa: E402
from keras_tfm.data import translation  # noqa: E402
from keras_tfm.datasets import fortunes, trans_de_en  # noqa: E402
from keras_tfm.models import Seq2SeqBackbone, Seq2SeqLM  # noqa: E402

# What only training reads: refused with --from-run.
TRAINING_FLAGS = (
    "init",
    "back_translate",
    "synthetic",
    "steps",
    "epochs",
    "sentence_repeats",
    "dropout",
    "learning_rate",
    "warmup_steps",
)


def check_flags(args):
    """Refuse flags that would be ignored, and a run folder already written."""
    if args.back_translate and not args.init:
        raise ValueError(
            "--back-translate continues a trained preset: pass --init "
            f"(e.g. --init {PRESET}). Received: --init={args.init!r}"
        )
    if args.synthetic and not args.back_translate:
        raise ValueError(
            "--synthetic names the back-translated pairs' file: it needs "
            f"--back-translate. Received: --synthetic={args.synthetic!r}"
        )
    if args.from_run:
        unused = [f"--{name.replace('_', '-')}" for name in TRAINING_FLAGS
                  if getattr(args, name) not in (None, False)]  # fmt: skip
        if unused:
            raise ValueError(
                f"--from-run trains nothing, so {', '.join(unused)} would be "
                f"ignored. Received: --from-run={args.from_run!r}"
            )
    if args.run_dir and os.path.exists(os.path.join(args.run_dir, "model.keras")):
        raise ValueError(
            "--run-dir already holds a trained model (model.keras); choose a "
            f"new folder or remove it. Received: --run-dir={args.run_dir!r}"
        )


def main(argv=None):
    args = parse_args(argv)
    check_flags(args)
    config = dict(QUICK if args.quick else FULL)
    for name in (
        "steps",
        "epochs",
        "sentence_repeats",
        "length_penalty",
        "learning_rate",
        "warmup_steps",
    ):
        if getattr(args, name) is not None:
            config[name] = getattr(args, name)
    if args.dropout is not None:
        config["model"] = dict(config["model"], dropout=args.dropout)
    keras.utils.set_random_seed(SEED)
    began = time.time()

    pairs = trans_de_en.load_translation_pairs(args.data)
    train, validation, test = trans_de_en.split_translation_pairs(
        pairs, validation_fraction=0.05, test_fraction=0.05, seed=SEED
    )
    held_out = validation + test
    train = train[: config["train_pairs"]]
    test = test[: config["test_pairs"]]
    if args.quick:
        validation = validation[:200]
    if args.evaluate:
        return evaluate(args.evaluate, config, train, validation, test)
    training_set, num_lexicon = training_pairs(config, train, held_out, args.data)
    print(
        f"{len(pairs)} sentence pairs: {len(train)} train, {len(validation)} "
        f"validation, {len(test)} test; {num_lexicon} word and phrase pairs "
        f"added to training (sentences x{config['sentence_repeats']})"
    )

    if args.from_run:
        model, history = load_run(args.from_run)
        if args.run_dir:
            save_run(model, history, args.run_dir)
    else:
        model, history = train_model(
            config, args, train, validation, held_out, training_set
        )
    if args.validation_only:
        validation_greedy = score(
            translate(model, [de for de, _ in validation]),
            [en for _, en in validation],
        )
        print(f"validation greedy ({len(validation)} pairs): {validation_greedy}")
        dictionary = baselines.DictionaryTranslator.from_trans_de_en(args.data)
        floor = score(
            dictionary([de for de, _ in validation]), [en for _, en in validation]
        )
        print(f"validation {BASELINE}: {floor}")
        if args.run_dir:
            with open(os.path.join(args.run_dir, "validation.json"), "w") as f:
                json.dump(dict(greedy=validation_greedy, baseline=floor), f)
        return validation_greedy

    sources = [de for de, _ in test]
    references = [en for _, en in test]
    results = {}
    samples = {}
    for name, generate_args in (
        ("greedy", {}),
        (
            f"beam{config['num_beams']}",
            dict(
                num_beams=config["num_beams"], length_penalty=config["length_penalty"]
            ),
        ),
    ):
        tick = time.time()
        hypotheses = translate(model, sources, **generate_args)
        results[name] = score(hypotheses, references)
        samples[name] = hypotheses
        print(
            f"test {name}: BLEU {results[name]['bleu']:.2f}, chrF "
            f"{results[name]['chrf']:.2f} ({time.time() - tick:.0f} s)"
        )
    # The floor: word-by-word lookup in the same dictionary's single-word
    # entries (no sentence pair used), on the same sources and references.
    tick = time.time()
    dictionary = baselines.DictionaryTranslator.from_trans_de_en(args.data)
    samples[BASELINE] = dictionary(sources)
    results[BASELINE] = score(samples[BASELINE], references)
    print(f"test {BASELINE}: {results[BASELINE]} ({time.time() - tick:.0f} s)")
    for i in range(min(8, len(test))):
        print(f"\n  DE:     {sources[i]}\n  REF:    {references[i]}")
        for name, hypotheses in samples.items():
            print(f"  {name + ':':12}{hypotheses[i]}")

    print(f"\n{results_table(results, len(test))}")
    if args.save:
        splits = (pairs, train, validation, test)
        save(model, config, args, splits, num_lexicon, results, history)
    print(f"\nTotal wall time: {time.time() - began:.0f} s")
    return results


def train_model(config, args, train, validation, held_out, training_set):
    """The trained model (best validation checkpoint) and its history."""
    if config["device_defaults"]:
        keras.config.set_dtype_policy(training.device_defaults().dtype_policy)
    if args.init:
        model = warm_start(args.init, config)
        tokenizer = model.tokenizer
        print(f"Continuing from {args.init} (its vocabulary)")
    else:
        # The vocabulary is learned on the training sentences only: the word
        # and phrase pairs are split into its pieces. (Learning it on them too
        # took over ten minutes: keras-hub's WordPiece learner is pure Python.)
        tick = time.time()
        tokenizer = translation.train_translation_tokenizer(
            [s for pair in train for s in pair], config["vocabulary_size"]
        )
        print(
            f"WordPiece vocabulary: {tokenizer.vocabulary_size()} tokens "
            f"({time.time() - tick:.0f} s)"
        )
        model = build_model(config, tokenizer)
    if args.back_translate:
        synthetic = back_translated_pairs(
            config, training_set, validation, held_out, args.init, args.synthetic
        )
        training_set = training_set + synthetic
        print(f"{len(synthetic)} synthetic pairs added to training")
    datasets = [
        make_dataset(config, training_set, tokenizer, shuffle=True),
        make_dataset(config, validation, tokenizer),
    ]
    print(
        f"Seq2SeqLM: {model.count_params():,} parameters, "
        f"{keras.config.dtype_policy().name}; {len(datasets[0])} batches an epoch "
        f"of the data, trained for {config['steps']} steps"
    )
    tick = time.time()
    history = model.fit(
        datasets[0].repeat(),
        steps_per_epoch=config["steps"] // config["epochs"],
        validation_data=datasets[1],
        epochs=config["epochs"],
        callbacks=[
            training.TimeBudget(args.max_minutes),
            # The best validation checkpoint, not the last, is the result.
            keras.callbacks.EarlyStopping(
                patience=config["epochs"], restore_best_weights=True
            ),
        ],
        shuffle=False,  # the training dataset shuffles itself
        verbose=2,
    )
    print(f"Training: {time.time() - tick:.0f} s")
    if args.run_dir:
        history.history["steps"] = config["steps"]  # for the learning curves
        save_run(model, history.history, args.run_dir)
    return model, history.history


def save_run(model, history, run_dir):
    """The trained model (`model.keras`, no optimizer) and its history."""
    from keras_tfm.saving import uncompiled_copy

    os.makedirs(run_dir, exist_ok=True)
    uncompiled_copy(model).save(os.path.join(run_dir, "model.keras"))
    with open(os.path.join(run_dir, "history.json"), "w") as f:
        json.dump(history, f, indent=1)
    with open(os.path.join(run_dir, "command.txt"), "w") as f:
        f.write(" ".join(["python", "examples/translate_de_en.py", *sys.argv[1:]]))


def load_run(run_dir):
    """The model and history `save_run` wrote (float32 compute), or a
    preset folder's model and history (empty if it has none)."""
    from keras_tfm.saving import load_model
    from keras_tfm.zoo.catalogue import build_from_directory

    keras.config.set_dtype_policy("float32")
    path = os.path.join(run_dir, "model.keras")
    if os.path.exists(path):
        model = load_model(path, compile=False)
    else:
        model = build_from_directory(run_dir)
    path = os.path.join(run_dir, "history.json")
    if not os.path.exists(path):
        return model, {}
    with open(path) as f:
        return model, json.load(f)


def evaluate(directory, config, train, validation, test):
    """Scores of a saved preset on as many sentences of each split.

    Greedy on training, validation and test sentences: the gap between the
    training sentences and the held-out ones is how much of what the model
    learned does not carry over to new sentences. Beam search (the config's
    `num_beams` and `length_penalty`) on validation, where the length
    penalty is chosen, and test.
    """
    from keras_tfm.zoo.catalogue import build_from_directory

    model = build_from_directory(directory)
    beam = dict(num_beams=config["num_beams"], length_penalty=config["length_penalty"])
    splits = dict(train=train[: len(test)], validation=validation[: len(test)])
    splits["test"] = test
    results = {}
    lines = [f"{str(directory):<44} {'BLEU':>6} {'chrF':>6}"]
    for name, split in splits.items():
        results[name] = {}
        decodings = {"greedy": {}}
        if name != "train":
            decodings[f"beam{beam['num_beams']}, lp {beam['length_penalty']}"] = beam
        for decoding, generate_args in decodings.items():
            hypotheses = translate(model, [de for de, _ in split], **generate_args)
            scores = score(hypotheses, [en for _, en in split])
            results[name][decoding] = scores
            label = f"{name} split, {len(split)} pairs, {decoding}"
            lines.append(f"{label:<44} {scores['bleu']:>6.2f} {scores['chrf']:>6.2f}")
    print("\n".join(lines))
    return results


def save(model, config, args, splits, num_lexicon, results, history):
    """Saves the model as a preset with float16 weights if they score as well."""
    from keras_tfm.saving import uncompiled_copy
    from keras_tfm.zoo import save_preset

    pairs, train, validation, test = splits
    # save_weights of a compiled model also writes the optimizer's state
    # (twice the weights again with Adam) into the preset.
    model = uncompiled_copy(model)

    # Round the weights through float16 (half the file); keep it only if the
    # greedy test scores do not drop by more than 0.3 BLEU.
    originals = [v.numpy() for v in model.weights]
    for variable, value in zip(model.weights, originals, strict=True):
        variable.assign(value.astype("float16").astype(value.dtype))
    sources = [de for de, _ in test]
    rounded = score(translate(model, sources), [en for _, en in test])
    print(f"test greedy with float16-rounded weights: {rounded}")
    storage = "float16"
    if rounded["bleu"] < results["greedy"]["bleu"] - 0.3:
        storage = "float32"
        for variable, value in zip(model.weights, originals, strict=True):
            variable.assign(value)
    curve = ", ".join(f"{loss:.3f}" for loss in history["val_loss"])
    metrics = "\n".join(
        f"| {'baseline: word-by-word ' if name == BASELINE else ''}{name} "
        f"| {r['bleu']:.2f} | {r['chrf']:.2f} |"
        for name, r in results.items()
    )
    seen = {de for de, _ in train}
    samples = "\n".join(
        f"| {de}{' (a training sentence)' if de in seen else ''} | {en} |"
        for de, en in zip(EVERYDAY, translate(model, EVERYDAY), strict=True)
    )
    shape = config["model"]
    commands = [" ".join(["python", "examples/translate_de_en.py", *sys.argv[1:]])]
    continued, part = "", ""
    if args.from_run:  # a run that continued an earlier preset (--init)
        with open(os.path.join(args.from_run, "command.txt")) as f:
            command = f.read().strip()
        first = f"python examples/translate_de_en.py --save {PRESET}"
        commands = [first, command, *commands]
        continued = (
            f", then {history['steps']} more steps from that preset with dropout "
            f"{model.backbone.dropout}"
        )
        if "--back-translate" in command:
            continued += (
                " on the same data and the English fortunes' sentences of 3-"
                f"{config['monolingual_max_words']} words back-translated into "
                "German (by the preset fine-tuned English -> German for "
                f"{config['reverse_steps']} steps), each as often as a real "
                "sentence pair"
            )
        part = "the continued "
    save_preset(
        model,
        args.save,
        description=(
            "A German -> English Transformer (encoder-decoder, "
            f"{shape['num_encoder_layers']}+{shape['num_decoder_layers']} "
            f"layers, d={shape['hidden_dim']}, sources and targets up to "
            f"{config['max_length']} tokens) trained for {config['steps']} steps "
            "on the sentence pairs and the word and phrase pairs of the "
            f"trans-de-en dictionary{continued}, with its shared WordPiece tokenizer "
            f"({model.vocabulary_size} tokens, [PAD]=0, [UNK]=1, [START]=2, "
            f"[END]=3) attached. Weights stored as {storage} values.\n\n"
            "| test decoding | BLEU | chrF |\n|---|---|---|\n"
            f"{metrics}\n\n"
            f"Test split: all {len(test)} pairs, every source translated "
            f"(sacrebleu {sacrebleu.__version__}, default 13a tokenization, one "
            "reference). Validation loss (label-smoothed 0.1) after each of "
            f"the {len(history['val_loss'])} parts of {part}training: "
            f"{curve}.\n\nEveryday sentences, greedy:\n\n"
            f"| German | this model |\n|---|---|\n{samples}"
        ),
        intended_use=(
            "Demonstrations and tests of keras-tfm's encoder-decoder model, "
            "beam search and presets. Trained on a dictionary's short example "
            "sentences and its word and phrase entries: it translates short "
            "everyday sentences roughly, word choice often literal. Not for "
            "real translation."
        ),
        training_data=(
            f"Debian package `trans-de-en` (TU Chemnitz dictionary, "
            "GPL-2.0-or-later), read from /usr/share/trans/de-en: the "
            f"{len(pairs)} sentence-like pairs (both sides end in . ! ? and "
            "have >= 3 words, labels in {} [] () <> removed, synonyms paired "
            f"with each other), split by `split_translation_pairs(seed=0)` into "
            f"{len(train)} train / {len(validation)} validation / {len(test)} "
            "test pairs with no sentence in two splits; in training each "
            f"sentence pair {config['sentence_repeats']} times an epoch beside "
            f"the dictionary's {num_lexicon} other (word and phrase) pairs, "
            "without any that shares a side with a validation or test "
            "sentence (case and punctuation ignored)."
        ),
        training_command="\n".join(commands),
        overwrite=True,
        usage='model.generate("Ich habe einen Hund.", max_new_tokens=16)',
        weights_dtype=storage,
    )
    # The training curves (loss and token accuracy after each part).
    history_path = os.path.join(args.save, "history.json")
    with open(history_path, "w") as f:
        json.dump(history, f, indent=1)
    print(f"Saved the preset to {args.save} ({storage} weights)")


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
