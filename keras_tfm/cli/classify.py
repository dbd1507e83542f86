"""`keras-tfm classify MODEL --text ...`: the class of each text."""

from keras_tfm.cli import loading
from keras_tfm.cli.arguments import MODEL_HELP

HELP = "the class of each text (a classifier)"


def add_arguments(p):
    p.add_argument("model", help=MODEL_HELP)
    p.add_argument("--text", action="append", required=True)


def run(args):
    model = loading.language_model(args.model, needs="classify")
    for text, label in zip(args.text, model.classify(args.text), strict=True):
        print(f"{label}\t{text}")
