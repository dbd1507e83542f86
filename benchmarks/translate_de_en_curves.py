"""The learning curves of translator_de_en's runs, as one picture.

Left: validation loss (label-smoothed 0.1) against optimizer steps: the
first run (4,000 steps from a new model, its 20 values as printed on the
preset's card up to commit 4819019) and each `--run-dir` folder of
examples/translate_de_en.py continuing from it, drawn from step 4,000 on.
Right: greedy BLEU and chrF on the whole validation split of each folder
(its validation.json), beside the word-by-word dictionary baseline.

    python benchmarks/translate_de_en_curves.py runs/de_en_preset \\
        runs/de_en_continue runs/de_en_back_translate \\
        --labels "preset (4,000 steps)" "+400 steps" "+400 steps, back-translation"
"""

import argparse
import json
from pathlib import Path

FIRST_RUN = [
    6.146,
    5.302,
    4.827,
    4.520,
    4.277,
    4.091,
    3.986,
    3.925,
    3.830,
    3.802,
    3.776,
    3.744,
    3.729,
    3.729,
    3.732,
    3.718,
    3.720,
    3.717,
    3.715,
    3.714,
]
FIRST_STEPS = 4000
OUTPUT = "docs/images/translator_de_en_curves.png"


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("runs", nargs="+", help="--run-dir folders")
    parser.add_argument("--labels", nargs="+", help="one per folder")
    parser.add_argument("--output", default=OUTPUT)
    args = parser.parse_args(argv)
    if args.labels and len(args.labels) != len(args.runs):
        parser.error(
            f"--labels needs one label per run folder. Received: {len(args.runs)} "
            f"folders, {len(args.labels)} labels"
        )
    return args


def main(argv=None):
    args = parse_args(argv)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = args.labels or [Path(run).name for run in args.runs]
    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    steps = [FIRST_STEPS * (i + 1) / len(FIRST_RUN) for i in range(len(FIRST_RUN))]
    left.plot(steps, FIRST_RUN, "o-", ms=3, label="first run (new model)")
    scores = {}
    for run, label in zip(args.runs, labels, strict=True):
        run = Path(run)
        history = json.loads((run / "history.json").read_text())
        if history.get("val_loss"):
            parts = len(history["val_loss"])
            steps = [
                FIRST_STEPS + history["steps"] * (i + 1) / parts for i in range(parts)
            ]
            left.plot(steps, history["val_loss"], "o-", ms=3, label=label)
        if (run / "validation.json").is_file():
            scores[label] = json.loads((run / "validation.json").read_text())
    left.set(xlabel="optimizer steps", ylabel="validation loss", ylim=(3.6, 4.4))
    left.set_title("validation loss (label-smoothed 0.1)")
    left.legend(fontsize=8)
    if scores:
        baseline = next(iter(scores.values()))["baseline"]
        names = [*scores, "baseline: word by word"]
        values = [*(s["greedy"] for s in scores.values()), baseline]
        for offset, metric in ((-0.2, "bleu"), (0.2, "chrf")):
            positions = [i + offset for i in range(len(names))]
            bars = right.bar(
                positions,
                [v[metric] for v in values],
                width=0.4,
                label=metric.replace("bleu", "BLEU").replace("chrf", "chrF"),
            )
            right.bar_label(bars, fmt="%.1f", fontsize=7)
        right.axhline(10, color="C0", ls=":", lw=1, label="goal BLEU 10")
        right.axhline(35, color="C1", ls=":", lw=1, label="goal chrF 35")
        right.set_xticks(range(len(names)), names, rotation=15, fontsize=7, ha="right")
        right.set_title("greedy, validation split (1,159 sentences)")
        right.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(args.output, dpi=110)
    print(f"Wrote {args.output}")


if __name__ == "__main__":
    main()
