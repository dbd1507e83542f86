"""`keras-tfm export MODEL DIRECTORY`: the model loaded with its
`--weights`, then `keras_tfm.export.command`, which writes it."""

from keras_tfm.cli import loading
from keras_tfm.cli.arguments import MODEL_HELP

HELP = "write a SavedModel whose signatures take strings (docs/deployment.md)"


def add_arguments(p):
    p.add_argument("model", help=MODEL_HELP)
    p.add_argument("directory", help="the SavedModel folder to write")
    p.add_argument("--overwrite", action="store_true", help="replace a folder")
    p.add_argument("--max-new-tokens", type=int, default=32, help="the answers' length")
    p.add_argument(
        "--num-beams",
        type=int,
        default=1,
        help="translate's beam width (1: greedy; translate_with_options "
        "takes 1 or this width, 4 when it is 1)",
    )
    p.add_argument(
        "--length-penalty",
        type=float,
        default=0.0,
        help="translate's beam length penalty (the translator's card: 1.5)",
    )
    p.add_argument(
        "--format",
        choices=("saved_model", "litert"),
        default="saved_model",
        help="litert: an encoder task as model.tflite, a decoder-only causal "
        "LM as its decoding step, decoder.tflite (signatures `prefill` and "
        "`decode`, docs/export.md; --weights int8: the chat's int8 step)",
    )
    p.add_argument(
        "--litert", action="store_const", const="litert", dest="format",
        help="the same as --format litert",
    )  # fmt: skip
    loading.add_weights_option(p)


def run(args):
    from keras_tfm.export.command import run_export, saved_model_options

    saved_model_options(args)  # a bad flag is reported before the model loads
    args.litert = args.format == "litert"
    model = loading.resolve_model(args.model)
    if not args.litert:  # LiteRT quantizes its own file
        model = loading.store_weights(model, args.weights)
    elif getattr(model, "is_decoder_only", False):
        from keras_tfm.chat.entry_writer import step_template

        args.template = step_template(model, args.model)  # the chat's buffer
    run_export(model, args)
