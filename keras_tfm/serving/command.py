"""`keras-tfm serve MODEL`: the command's options and what it runs.

Kept here rather than in `keras_tfm.cli`, which only dispatches to it; the
HTTP stack (Starlette, uvicorn: the `serve` extra) is imported when the
command runs, so the other commands work without it.
"""

import os
from pathlib import Path

from keras_tfm.serving import defaults
from keras_tfm.serving.defaults import API_KEY_VARIABLE


def add_arguments(parser):
    """The options of `keras-tfm serve` (the model's `--weights` aside)."""
    parser.add_argument("model", help="a .keras file, or a preset name")
    parser.add_argument(
        "--host", default=defaults.HOST,
        help="the address to bind (default %(default)s: this machine only)",
    )  # fmt: skip
    parser.add_argument("--port", type=int, default=defaults.PORT)
    parser.add_argument(
        "--max-batch", type=_positive, default=defaults.MAX_BATCH,
        help="requests decoded together (the slots; default %(default)s)",
    )  # fmt: skip
    parser.add_argument(
        "--max-context", type=_positive,
        help="positions per slot, prompt plus answer (default: the model's "
        "max_sequence_length, at most 2048)",
    )  # fmt: skip
    parser.add_argument(
        "--max-body-bytes", type=_positive, default=defaults.MAX_BODY_BYTES,
        help="the largest request body accepted (default %(default)s)",
    )  # fmt: skip
    parser.add_argument(
        "--steps-per-call", type=_positive, default=defaults.STEPS_PER_CALL,
        help="tokens decoded per slot per compiled call: more amortises the "
        "call, fewer lets new requests join sooner (default %(default)s)",
    )  # fmt: skip
    parser.add_argument(
        "--prefix-cache-mb", type=_non_negative, default=defaults.PREFIX_CACHE_MB,
        help="the most memory (MiB) kept for the keys and values of earlier "
        "prompts' blocks of 16 tokens, which a prompt starting with the same "
        "tokens reuses instead of computing them (least recently used "
        "evicted first; 0: off; default %(default)s)",
    )  # fmt: skip
    parser.add_argument(
        "--prefill-chunk", type=_chunk, default=defaults.PREFILL_CHUNK,
        help="the most prompt tokens prefilled between two decoding steps: "
        "a longer prompt is prefilled in chunks while the other requests go "
        "on decoding (a multiple of 16; 0: every prompt at once; default "
        "%(default)s)",
    )  # fmt: skip
    parser.add_argument(
        "--api-key",
        help="the key clients must send as 'Authorization: Bearer KEY' (every "
        "route but /health and /metrics; default: $" + API_KEY_VARIABLE + ", "
        "else none; the variable keeps the key out of the process list)",
    )  # fmt: skip
    parser.add_argument(
        "--replicas", type=_positive,
        help="serve N copies of the model, each in a process of its own with "
        "one core, behind the one address, on Ray Serve (the `ray` extra; "
        "docs/serving.md); default: one copy in this process, without Ray",
    )  # fmt: skip


def run(args, model):
    """Serves `model` (already loaded) with the parsed `args`."""
    try:
        from keras_tfm.serving.server import serve
    except ImportError as error:
        raise SystemExit(
            f"keras-tfm serve needs the `serve` extra ({error.name} is missing): "
            "pip install 'keras-tfm[serve]'"
        ) from None
    try:
        serve(model, **_options(args), log_level="info")
    except ValueError as error:
        raise SystemExit(f"keras-tfm serve: {error}") from None


def run_replicas(args, load_model):
    """Serves `args.replicas` copies of the model that `load_model()`
    returns, each loading its own, on Ray Serve (`serving.replicas`)."""
    try:
        from keras_tfm.serving.replicas import serve_replicas
    except ImportError as error:
        raise SystemExit(f"keras-tfm serve --replicas: {error}") from None
    try:
        serve_replicas(load_model, replicas=args.replicas, **_options(args))
    except ValueError as error:
        raise SystemExit(f"keras-tfm serve: {error}") from None


def _options(args):
    path = Path(args.model)
    api_key = args.api_key
    if api_key is None:
        api_key = os.environ.get(API_KEY_VARIABLE)
    return dict(
        model_id=path.stem if path.is_file() else args.model, host=args.host,
        port=args.port, max_batch=args.max_batch, max_length=args.max_context,
        steps_per_call=args.steps_per_call, max_body_bytes=args.max_body_bytes,
        api_key=api_key, prefix_cache_mb=args.prefix_cache_mb,
        prefill_chunk=args.prefill_chunk or None,
    )  # fmt: skip


def _non_negative(text):
    value = float(text)
    if not value >= 0:  # NaN too
        raise ValueError(f"must be a number >= 0. Received: {text}")
    return value


def _chunk(text):
    value = int(text)
    if value < 0 or value % 16:
        raise ValueError(f"must be 0 or a multiple of 16. Received: {text}")
    return value


def _positive(text):
    value = int(text)
    if value < 1:
        raise ValueError(f"must be a positive integer. Received: {text}")
    return value
