"""`keras-tfm serve MODEL`: the model loaded with its `--weights`, then
`keras_tfm.serving.command`, which holds the server's options."""

from keras_tfm.cli import loading
from keras_tfm.serving import command as serving_command

HELP = (
    "an OpenAI-compatible HTTP server that batches concurrent requests "
    "(docs/serving.md)"
)


def add_arguments(p):
    serving_command.add_arguments(p)
    loading.add_weights_option(p)


def run(args):
    model = loading.store_weights(loading.resolve_model(args.model), args.weights)
    serving_command.run(args, model)
