"""The `keras-tfm` console script: quiets TensorFlow, then runs `keras_tfm.cli`.

`import keras_tfm` imports neither Keras nor TensorFlow, so this module
runs before either and configures what they print:

- `TF_CPP_MIN_LOG_LEVEL=3` silences TensorFlow's and XLA's C++ logs, and
  the lines absl writes before it is initialised are dropped from file
  descriptor 2 while TensorFlow is imported
  (`keras_tfm._tensorflow_logs.drop_absl_lines_from_stderr`).
  `import keras` after `import keras_tfm` does the same at level 2, and
  only where the user has not set `TF_CPP_MIN_LOG_LEVEL`.
- Python-side: the `tensorflow` and absl loggers are set to ERROR and
  warnings raised by dependencies are ignored (keras_tfm's own still show).

`keras-tfm ... --verbose` skips all of this.

Before any of it, a `keras-tfm chat "..."` (or a conversation, without a
message) whose model has a LiteRT entry in the cache folder answers from it
and returns, without importing Keras or TensorFlow
(`keras_tfm.cli.chat.answer_from_cache`).

It also spares the commands two imports they never use: Keras imports
scikit-learn (for `keras.wrappers`' estimators) and matplotlib (for
`keras.visualization`) when they are installed, ~2.5 of the ~10 CPU seconds
and 80 MB of a command's start (benchmarks/cold_start.py). While
TensorFlow, Keras and keras_tfm are imported, both look absent
(`_deferred_imports`), as Keras allows (it then leaves those two features
out); afterwards they import normally.

The arguments are parsed before Keras is imported, so `--help` and a
refused argument answer at once (`keras_tfm.cli` imports no Keras at module
level; tests/test_lazy_import.py holds it to that).

`python -m keras_tfm ...` runs it too.
"""

import contextlib
import functools
import importlib.abc
import logging
import os
import sys
import warnings

from keras_tfm._tensorflow_logs import drop_absl_lines_from_stderr

# Imported by Keras if present, used by no keras-tfm command.
DEFERRED = ("sklearn", "matplotlib")


class _Absent(importlib.abc.MetaPathFinder):
    """An import finder for which the packages `names` are not installed."""

    def __init__(self, names):
        self.names = set(names)

    def find_spec(self, fullname, path, target=None):
        if fullname.partition(".")[0] in self.names:
            raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)
        return None


@contextlib.contextmanager
def _deferred_imports(names=DEFERRED):
    """Within the block, the packages `names` cannot be imported (unless they
    already are); after it, they import as usual."""
    finder = _Absent(name for name in names if name not in sys.modules)
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)


def quiet():
    """Silences TensorFlow's C++ logs and dependencies' Python warnings.

    Call before TensorFlow is imported; it sets environment variables only
    where the user has not set them.
    """
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    os.environ.setdefault("TF_CPP_MAX_VLOG_LEVEL", "-1")
    logging.getLogger("tensorflow").setLevel(logging.ERROR)
    try:
        from absl import logging as absl_logging
    except ImportError:  # absl comes with TensorFlow; without it, nothing to do
        pass
    else:
        absl_logging.set_verbosity(absl_logging.ERROR)
    warnings.filterwarnings("ignore")
    warnings.filterwarnings("default", module=r"keras_tfm(\.|$)")


def _tensorflow_conversation(argv):
    """What a conversation on a LiteRT entry goes on with once it outgrows it
    (`keras_tfm.cli.chat.continue_conversation`), imported quietly."""
    if "--verbose" not in argv:
        quiet()
    with drop_absl_lines_from_stderr(), _deferred_imports():
        import keras  # noqa: F401

        from keras_tfm.cli.chat import continue_conversation
    return continue_conversation(argv)


def main(argv=None):
    """The `keras-tfm` command (see `keras_tfm.cli`)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    from keras_tfm.cli import build_parser
    from keras_tfm.cli.chat import answer_from_cache
    from keras_tfm.lite.user_cache import unusable_cache_directory

    unusable = unusable_cache_directory()
    if unusable is not None:  # refused at once, before anything loads
        print(f"keras-tfm: {unusable}", file=sys.stderr)
        return 2
    # `--help` and refused arguments exit here, in a fraction of a second:
    # the parser imports neither Keras nor TensorFlow.
    args = build_parser().parse_args(argv)
    later = functools.partial(_tensorflow_conversation, argv)
    if answer_from_cache(args, continue_with=later):
        return 0  # a cached chat: Keras imported only if a conversation outgrew it
    if "--verbose" in argv:
        # TensorFlow's own level (0) unless set: keras-tfm would quiet it.
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "0")
        with _deferred_imports():
            from keras_tfm.cli import main as command
    else:
        quiet()
        with drop_absl_lines_from_stderr(), _deferred_imports():
            # Imported here to filter TensorFlow's start-up lines (Keras
            # imports it on its TensorFlow backend; keras-tfm's classes are
            # registered as Keras's import ends, keras_tfm._registration).
            import keras  # noqa: F401

            from keras_tfm.cli import main as command
    return command(argv)
