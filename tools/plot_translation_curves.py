"""Draws docs/images/translation_curves.png from the learning curves in
benchmarks/results/translation_curves.json.

The JSON holds the per-part losses Keras printed during runs of
examples/translate_de_en.py (copied from their logs, which are not kept);
the picture shows why more training of the same model on the same data does
not reach issue 18's BLEU 10: the validation loss levels off, and stronger
dropout learns more slowly within the hour. Runs that continue the preset
(`--init`, issue 43: with and without back-translated English fortunes)
start at their `first_step` and give their greedy validation BLEU / chrF
in the legend.

    python tools/plot_translation_curves.py
"""

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

ROOT = Path(__file__).parents[1]
CURVES = ROOT / "benchmarks" / "results" / "translation_curves.json"
PICTURE = ROOT / "docs" / "images" / "translation_curves.png"


def main():
    curves = json.loads(CURVES.read_text())
    steps_per_part = curves["steps_per_part"]
    figure, (loss_ax, accuracy_ax) = plt.subplots(1, 2, figsize=(12, 5.2))
    for i, (name, run) in enumerate(curves["runs"].items()):
        color = f"C{i}"
        per_part = run.get("steps_per_part", steps_per_part)
        steps = run.get("first_step", 0) + per_part * np.arange(
            1, len(run["validation_loss"]) + 1
        )
        if "validation_greedy" in run:
            scores = run["validation_greedy"]
            name = f"{name}\n(validation greedy BLEU {scores['bleu']:.2f}, "
            name += f"chrF {scores['chrf']:.2f})"
        loss_ax.plot(steps, run["train_loss"], "--", color=color)
        loss_ax.plot(steps, run["validation_loss"], "o-", ms=3, color=color)
        accuracy_ax.plot(
            steps, run["validation_token_accuracy"], "o-", ms=3, color=color,
            label=name,
        )  # fmt: skip
    loss_ax.set_ylabel("label-smoothed cross-entropy (dashed: training)")
    loss_ax.set_ylim(3.3, 5.0)
    accuracy_ax.set_ylabel("validation token accuracy")
    accuracy_ax.set_ylim(0.3, 0.48)
    accuracy_ax.legend(fontsize=7, loc="lower right")
    for ax in (loss_ax, accuracy_ax):
        ax.set_xlabel("optimizer step (up to 4,096 tokens each)")
        ax.grid(alpha=0.3)
    figure.suptitle(
        "translator_de_en: training (sentences and word pairs mixed) and "
        f"validation sentences\n{curves['machine']}",
        fontsize=9,
    )
    figure.tight_layout()
    PICTURE.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(PICTURE, dpi=100)
    plt.close(figure)
    print("wrote", PICTURE)


if __name__ == "__main__":
    main()
