"""examples/translate_de_en.py: the --quick run, and the shipped preset."""

import ast
import json
import re
from pathlib import Path

import h5py
import numpy as np
import pytest
import sacrebleu

from keras_tfm import zoo
from keras_tfm.baselines import DictionaryTranslator
from keras_tfm.datasets import trans_de_en
from tests.conftest import requires_debian_package
from tests.examples import load_example_module

ROOT = Path(__file__).parents[2]
FROM_TRANS_DE_EN = DictionaryTranslator.from_trans_de_en
needs_data = requires_debian_package("trans-de-en")


def load_example():
    return load_example_module("translate_de_en")


@needs_data
@pytest.mark.slow
def test_quick_run_trains_scores_and_saves_a_float16_preset(
    tmp_path, capsys, monkeypatch
):
    example = load_example()
    built = []  # the example's translator, kept: parsing the dictionary takes 10 s
    monkeypatch.setattr(
        DictionaryTranslator,
        "from_trans_de_en",
        classmethod(
            lambda cls, path=None: built.append(FROM_TRANS_DE_EN(path)) or built[-1]
        ),
    )
    results = example.main(
        ["--quick", "--dropout", "0.2", "--save", str(tmp_path / "translator_de_en")]
    )
    assert set(results) == {"greedy", "beam4", "dictionary"}
    printed = capsys.readouterr().out
    # The table the run prints holds the scores it returns, model and
    # baseline side by side (40 steps of a width-32 model are not meant to
    # beat the lookup: the shipped preset's test below holds that claim).
    table = {
        line[:34].strip(): [float(v) for v in line[34:].split()]
        for line in printed.splitlines()
        if line.startswith(("model, ", "baseline: "))
    }
    assert table["model, greedy"] == [results["greedy"]["bleu"],
                                      results["greedy"]["chrf"]]  # fmt: skip
    assert "test greedy: BLEU" in printed and "DE:" in printed
    # The dictionary baseline on the same 16 test pairs, scored again here.
    pairs = trans_de_en.load_translation_pairs()
    _, _, test = trans_de_en.split_translation_pairs(pairs, 0.05, 0.05, seed=0)
    test = test[:16]
    baseline = [
        line.split(":", 1)[1].strip()
        for line in printed.splitlines()
        if line.startswith("  dictionary:")
    ]
    assert len(built) == 1
    expected = built[0](
        [de for de, _ in test]
    )  # the translator itself: tests/baselines
    assert baseline == expected[:8]  # the 8 printed samples
    references = [[en for _, en in test]]
    chrf = sacrebleu.corpus_chrf(expected, references).score
    bleu = sacrebleu.corpus_bleu(expected, references).score
    assert results["dictionary"] == {"bleu": round(bleu, 2), "chrf": round(chrf, 2)}
    row = next(line for line in printed.splitlines() if "baseline: dictionary" in line)
    assert row.split()[-2:] == [f"{bleu:.2f}", f"{chrf:.2f}"]
    assert "| baseline: word-by-word dictionary |" in zoo.preset_card(
        "translator_de_en", root=tmp_path
    )
    model = zoo.from_preset("translator_de_en", root=tmp_path)
    (saved,) = [
        line.split(": ", 1)[1]
        for line in printed.splitlines()
        if line.startswith("test greedy with float16-rounded weights:")
    ]
    with h5py.File(tmp_path / "translator_de_en" / "model.weights.h5") as f:
        dtypes = set()
        f.visititems(lambda _, item: dtypes.add(getattr(item, "dtype", None)))
    assert np.dtype("float16") in dtypes and np.dtype("float32") not in dtypes
    assert model.tokenizer.token_to_id("[END]") == 3  # the tokenizer came along
    assert model.backbone.dropout == 0.2  # --dropout overrode QUICK's 0.1
    history = json.loads((tmp_path / "translator_de_en" / "history.json").read_text())
    assert len(history["val_loss"]) == example.QUICK["epochs"]

    # --evaluate scores the saved preset on each split, training nothing: its
    # test score is the run's greedy score of the float16-rounded weights,
    # and both are sacrebleu's scores of the saved preset's translations,
    # made again here (one translation of the saved preset, not two: each
    # new model traces its decoding loop again).
    translations = []
    translate = example.translate
    monkeypatch.setattr(
        example,
        "translate",
        lambda model, sentences, **kw: translations.append(
            (sentences, kw, translate(model, sentences, **kw))
        )
        or translations[-1][2],
    )
    scores = example.main(
        ["--quick", "--evaluate", str(tmp_path / "translator_de_en")]
        + ["--length-penalty", "0.6"]
    )
    assert list(scores) == ["train", "validation", "test"]
    assert list(scores["train"]) == ["greedy"]
    assert list(scores["test"]) == ["greedy", "beam4, lp 0.6"]
    assert scores["test"]["greedy"] == ast.literal_eval(saved)
    (hypotheses,) = [
        out for sentences, kw, out in translations
        if sentences == [de for de, _ in test] and not kw
    ]  # fmt: skip
    bleu = sacrebleu.corpus_bleu(hypotheses, references).score
    chrf = sacrebleu.corpus_chrf(hypotheses, references).score
    assert ast.literal_eval(saved) == pytest.approx(
        {"bleu": bleu, "chrf": chrf}, abs=0.006
    )
    assert "Epoch" not in capsys.readouterr().out


def test_shipped_preset_is_small_and_self_contained():
    folder = ROOT / "zoo" / "translator_de_en"
    weights = folder / "model.weights.h5"
    assert weights.stat().st_size <= 20 * 2**20
    card = zoo.preset_card("translator_de_en")
    assert "BLEU" in card and "chrF" in card and "translate_de_en.py" in card
    assert (folder / "assets" / "tokenizer" / "vocabulary.txt").is_file()


@pytest.mark.slow  # the shipped preset on held-out data
@needs_data
def test_shipped_preset_translates_held_out_sentences_beyond_the_baselines():
    example = load_example()
    model = zoo.from_preset("translator_de_en")
    pairs = trans_de_en.load_translation_pairs()
    _, _, test = trans_de_en.split_translation_pairs(pairs, 0.05, 0.05, seed=0)
    test = test[:64]  # held out: never seen in training
    sources, references = [de for de, _ in test], [[en for _, en in test]]
    hypotheses = example.translate(model, sources)
    assert len(hypotheses) == len(sources) and all(hypotheses)
    # Above word-by-word lookup on BLEU (word order). On chrF the whole test
    # split puts it level with the lookup (27.9 against 27.7, issue 18) and
    # these 64 sentences below it, so chrF is held only above echoing the
    # German source (names, numbers).
    dictionary = DictionaryTranslator.from_trans_de_en()(sources)
    bleu = sacrebleu.corpus_bleu(hypotheses, references).score
    assert bleu > sacrebleu.corpus_bleu(dictionary, references).score, hypotheses[:4]
    chrf = sacrebleu.corpus_chrf(hypotheses, references).score
    assert chrf > sacrebleu.corpus_chrf(sources, references).score + 2.0


@pytest.mark.parametrize(
    "flag", ["--steps", "--epochs", "--sentence-repeats", "--warmup-steps"]
)
def test_a_count_of_zero_is_refused_before_any_work(flag, capsys):
    with pytest.raises(SystemExit):
        load_example().main([flag, "0"])
    assert "must be a positive integer: 0" in capsys.readouterr().err


def test_back_translation_needs_a_preset_to_continue():
    with pytest.raises(ValueError, match="pass --init.*Received: --init=None"):
        load_example().main(["--back-translate"])


@pytest.mark.parametrize(
    "argv, named",
    [
        (["--synthetic", "bt.tsv"], "--synthetic='bt.tsv'"),
        (["--from-run", "run", "--steps", "5"], "--steps would be ignored"),
        (["--from-run", "run", "--init", "p", "--back-translate"],
         "--init, --back-translate would be ignored"),
    ],
)  # fmt: skip
def test_flags_that_would_be_ignored_are_refused_before_any_work(argv, named):
    with pytest.raises(ValueError, match=re.escape(named)):
        load_example().main(argv)


def test_a_run_folder_already_written_is_not_overwritten(tmp_path):
    (tmp_path / "model.keras").write_bytes(b"a trained model")
    with pytest.raises(ValueError, match="already holds a trained model"):
        load_example().main(["--quick", "--run-dir", str(tmp_path)])
    assert (tmp_path / "model.keras").read_bytes() == b"a trained model"
