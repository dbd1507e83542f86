"""examples/translate_es_en.py: the wall-clock learning-rate schedule, its
arguments, and the shipped preset translator_es_en."""

import math
import re
import types
from pathlib import Path

import keras
import pytest
import sacrebleu

from keras_tfm import zoo
from keras_tfm.datasets import sword_parallel
from tests.conftest import requires_debian_package
from tests.examples import load_example_module

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "translate_es_en.py"
PRESET = "translator_es_en"
needs_data = requires_debian_package("sword-text-sparv", "sword-text-web")


def load_example():
    return load_example_module("translate_es_en")


@pytest.fixture(scope="module")
def example():
    return load_example()


@pytest.mark.parametrize(
    "step, spent", [(0, 0.0), (49, 0.0), (99, 0.25), (500, 0.5), (500, 0.9), (7, 1.0)]
)
def test_the_rate_warms_up_by_steps_and_decays_by_the_budget_spent(
    example, step, spent
):
    schedule = example.WallClockCosine(2e-3, warmup_steps=100, minutes=60)
    schedule.spent.assign(spent)
    # Linear warm-up over the first 100 steps, times a cosine in the share
    # of the wall-clock budget spent (float64 reference).
    expected = 2e-3 * min(1.0, (step + 1) / 100) * 0.5 * (1 + math.cos(math.pi * spent))
    assert float(schedule(step)) == pytest.approx(expected, rel=1e-5, abs=1e-9)


def test_training_stops_after_the_step_that_spends_the_budget(example, monkeypatch):
    now = [1000.0]
    monkeypatch.setattr(example.time, "time", lambda: now[0])
    schedule = example.WallClockCosine(1e-2, warmup_steps=1, minutes=1)
    budget = example.SpendBudget(schedule)
    optimizer = types.SimpleNamespace(iterations=keras.Variable(0))
    model = types.SimpleNamespace(stop_training=False, optimizer=optimizer)
    budget.set_model(model)
    budget.on_train_begin()
    seen = []
    while not model.stop_training:  # Keras's loop: each step takes 15 s here
        budget.on_train_batch_begin(len(seen))
        seen.append(float(schedule.spent.numpy()))
        now[0] += 15.0
        model.optimizer.iterations.assign_add(1)
        budget.on_train_batch_end(len(seen) - 1)
    # The budget of 60 s is spent by the 4th step, which ends training; the
    # schedule saw the fractions 0, 1/4, 2/4, 3/4.
    assert seen == [0.0, 0.25, 0.5, 0.75]


@pytest.mark.parametrize("rate", ["1", "-0.1", "nan"])
def test_a_dropout_outside_0_1_is_refused_before_any_work(example, rate, capsys):
    with pytest.raises(SystemExit):
        example.main(["--dropout", rate])
    assert "must be in [0, 1)" in capsys.readouterr().err


def test_the_card_says_by_how_much_each_decoding_is_behind_the_baseline(example):
    results = {
        "greedy": {"bleu": 16.40, "chrf": 38.21},
        "beam4": {"bleu": 18.76, "chrf": 39.18},
        example.BASELINE: {"bleu": 17.29, "chrf": 42.24},
    }
    text = example.versus_baseline(results)
    # 16.40 - 17.29 = -0.89 and 38.21 - 42.24 = -4.03; 18.76 - 17.29 = 1.47.
    assert "greedy BLEU -0.89, chrF -4.03; beam4 BLEU +1.47, chrF -3.06" in text
    assert text.endswith("is not reached.")
    results["beam4"] = {"bleu": 28.0, "chrf": 55.0}
    assert example.versus_baseline(results).endswith("is reached.")


def card_scores(card):
    """{decoding: (BLEU, chrF)} of the test-book table of a model card."""
    rows = re.findall(r"^\| (model, \w+|baseline: [^|]+) \| ([\d.]+) \| ([\d.]+) \|$",
                      card, re.MULTILINE)  # fmt: skip
    return {name: (float(bleu), float(chrf)) for name, bleu, chrf in rows}


def test_the_shipped_preset_is_small_and_its_card_gives_scores_beside_ibm1():
    folder = ROOT / "zoo" / PRESET
    assert (folder / "model.weights.h5").stat().st_size <= 8 * 2**20
    assert (folder / "assets" / "tokenizer" / "vocabulary.txt").is_file()
    card = zoo.preset_card(PRESET)
    scores = card_scores(card)
    assert {"model, greedy", "model, beam4", "baseline: IBM Model 1"} <= set(scores)
    # The card's differences are its table's (what docs/results.md quotes).
    base = scores.pop("baseline: IBM Model 1")
    for name, (bleu, chrf) in scores.items():
        decoding = name.removeprefix("model, ")
        assert (f"{decoding} BLEU {bleu - base[0]:+.2f}, "
                f"chrF {chrf - base[1]:+.2f}") in card  # fmt: skip
    # Every command that made it, from the first run to the saving one.
    trained = card.split("## How it was trained")[1]
    commands = re.findall(r"^python examples/translate_es_en\.py .*$", trained, re.M)
    assert "--init" not in commands[0] and "--init" in commands[-2]
    assert commands[-1].endswith(f"--save zoo/{PRESET}")


@pytest.fixture(scope="module")
def shipped():
    return zoo.from_preset(PRESET)


@needs_data
def test_the_shipped_preset_translates_held_out_verses_as_its_card_says(shipped):
    # Colossians is a validation book: no verse of it was trained on.
    verses = sword_parallel.load_parallel_verses(books=["Col"])[:16]
    sources, references = [v.spanish for v in verses], [[v.english for v in verses]]
    hypotheses = shipped.generate(sources, max_new_tokens=64)
    assert all(isinstance(h, str) and h for h in hypotheses)
    bleu = sacrebleu.corpus_bleu(hypotheses, references)
    chrf = sacrebleu.corpus_chrf(hypotheses, references).score
    # At least half the card's test-book greedy BLEU and 3/4 of its chrF (an
    # untrained or broken model: BLEU near 0, chrF near echoing the Spanish,
    # 18), at about the references' length (a model stuck repeating itself
    # runs to max_new_tokens).
    card_bleu, card_chrf = card_scores(zoo.preset_card(PRESET))["model, greedy"]
    assert bleu.score >= card_bleu / 2, hypotheses[:3]
    assert chrf >= 0.75 * card_chrf > sacrebleu.corpus_chrf(sources, references).score
    assert 0.8 <= bleu.sys_len / bleu.ref_len <= 1.25


@pytest.mark.slow  # a training from the shipped preset
def test_init_trains_on_with_the_vocabulary_of_the_model_it_starts_from(
    example, tmp_path
):
    # Two eager steps: tracing the training and validation steps cost more
    # than the steps (the vocabulary is what is tested).
    config = dict(example.QUICK, steps=2, epochs=1, curve_verses=2, max_length=16,
                  run_eagerly=True)  # fmt: skip
    tiny = dict(num_heads=1, hidden_dim=8, intermediate_dim=8)
    config["model"] = dict(config["model"], **tiny)
    spanish = ["el perro come pan", "la casa es grande", "el hombre ve la luz"]
    english = ["the dog eats bread", "the house is big", "the man sees the light"]

    def run(name, pairs, init=None):
        args = types.SimpleNamespace(
            run_dir=str(tmp_path / name), init=init, max_minutes=None, command=name
        )
        return example.train(config, args, pairs, pairs[:2])

    first, _ = run("first", list(zip(spanish, english, strict=True)) * 4)
    learned = first.preprocessor.tokenizer.get_vocabulary()
    # A folder that keeps its vocabulary only inside its model (a run that
    # was itself started with --init, before each run wrote its own file).
    (tmp_path / "first" / "vocabulary.txt").unlink()
    # Other verses: a vocabulary learned on them would differ from the first.
    other = [(s[::-1], e[::-1]) for s, e in zip(spanish, english, strict=True)]
    second, _ = run("second", other * 4, init=str(tmp_path / "first"))
    assert second.preprocessor.tokenizer.get_vocabulary() == learned
    assert (tmp_path / "second" / "vocabulary.txt").read_text().splitlines() == learned
    assert not (tmp_path / "first" / "vocabulary.txt").exists()  # not written into
    assert (tmp_path / "second" / "commands.txt").read_text().splitlines() == [
        "first",
        "second",
    ]
