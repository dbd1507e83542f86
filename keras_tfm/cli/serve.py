"""`keras-tfm serve MODEL`: the model loaded with its `--weights`, then
`keras_tfm.serving.command`, which holds the server's options."""

from functools import partial

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
    if args.replicas is not None:  # each replica loads its own
        serving_command.run_replicas(args, partial(load, args.model, args.weights))
    else:
        serving_command.run(args, load(args.model, args.weights))


def load(reference, weights):
    """The model `reference` names, its weights stored as `weights`."""
    return loading.store_weights(loading.resolve_model(reference), weights)
