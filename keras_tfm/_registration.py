"""`keras.saving` knows keras-tfm's classes once Keras and keras-tfm are imported.

keras-tfm's serializable classes (layers, models, losses, metrics,
schedules, samplers, the converted checkpoints' tokenizers) register their
names (`keras_tfm>CausalLM`) with `keras.saving` as they are defined, and
`keras.models.load_model` finds a class of a `.keras` file by that name
only: Keras imports a class's module itself for keras, keras_hub, keras_cv
and keras_nlp alone (`keras/src/saving/serialization_lib.py`). So the
subpackages that define them (`REGISTERING`) must be imported before a
keras-tfm file is loaded. `import keras_tfm` imports no Keras (the LiteRT
chat and the start of the `keras-tfm` command run without it), so
`register_with_keras()` imports them:

- at once where Keras is already imported;
- otherwise once it is: a finder on `sys.meta_path` watches the imports of
  `keras`, of `keras_hub` (the one package keras-tfm imports that imports
  Keras itself) and of keras_tfm's own modules, and when the outermost of
  them that loaded Keras ends (the user's `import keras`, all of `import
  keras_hub`, or `from keras_tfm.models import CausalLM`: keras-tfm's
  modules never meet a half-imported package), imports them and leaves
  `sys.meta_path`.

Keras (which imports TensorFlow on that backend) starts inside
`quiet_tensorflow_import` while the finder watches, as when keras-tfm
imports it itself. Registering also points TensorFlow's persistent XLA
cache at keras-tfm's folder (`keras_tfm.runtime.use_persistent_xla_cache`), which
checks the cached files: work for processes that compile, not for the
LiteRT chat.

Example:
>>> import keras_tfm, keras  # either order
>>> keras_tfm.models.CausalLM is keras.saving.get_registered_object(
...     "keras_tfm>CausalLM")
True
"""

import contextlib
import importlib
import importlib.abc
import importlib.machinery
import sys
import threading

from keras_tfm._tensorflow_logs import quiet_tensorflow_import
from keras_tfm.runtime import use_persistent_xla_cache

# The subpackages whose import registers classes with `keras.saving` (and
# the zoo, which registers `from_preset`'s loader with the models); none of
# them imports TensorFlow until a TensorFlow-only feature runs.
REGISTERING = (
    "layers", "tokenizers", "generation.beam_search_sampler", "models", "training",
    "zoo",
)  # fmt: skip
# The top-level packages the finder watches: Keras, and what imports it.
_WATCHED = frozenset({"keras", "keras_hub"})
# The loaders whose modules run Python code, which may import Keras.
_SOURCE_LOADERS = (
    importlib.machinery.SourceFileLoader,
    importlib.machinery.SourcelessFileLoader,
)

_lock = threading.RLock()
_thread = threading.local()  # .depth: the watched imports running in a thread
_keras_imported = False
_registered = False


def register_with_keras():
    """Imports `REGISTERING` now if Keras is imported, else once it is."""
    if "keras" in sys.modules:
        _register()
    elif not any(isinstance(f, _KerasWatcher) for f in sys.meta_path):
        sys.meta_path.insert(0, _KerasWatcher())


def _register():
    global _registered
    with _lock:
        if _registered:
            return
        _registered = True  # before the imports, which end watched imports too
        for finder in [f for f in sys.meta_path if isinstance(f, _KerasWatcher)]:
            sys.meta_path.remove(finder)
        use_persistent_xla_cache()  # a no-op once set
        with quiet_tensorflow_import():
            for name in REGISTERING:
                importlib.import_module(f"keras_tfm.{name}")


class _KerasWatcher(importlib.abc.MetaPathFinder):
    """Finds `_WATCHED` and keras_tfm's modules as the finders after it
    would, with a loader that notes when Keras has been imported and
    registers keras-tfm's classes at the end of the outermost such import."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in _WATCHED and not fullname.startswith("keras_tfm."):
            return None
        finders = sys.meta_path
        after = finders[finders.index(self) + 1 :] if self in finders else finders
        for finder in after:
            find_spec = getattr(finder, "find_spec", None)
            spec = None if find_spec is None else find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        if isinstance(spec.loader, _SOURCE_LOADERS):
            spec.loader = _WatchedLoader(spec.loader)
        return spec


class _WatchedLoader(importlib.abc.Loader):
    """`loader`, counting the watched imports under way in this thread."""

    def __init__(self, loader):
        self.loader = loader

    def __getattr__(self, name):  # get_source, get_resource_reader, ...
        return getattr(self.loader, name)

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        global _keras_imported
        # From here on the module and its spec show their own loader.
        module.__loader__ = module.__spec__.loader = self.loader
        name = module.__spec__.name
        depth = getattr(_thread, "depth", 0)
        _thread.depth = depth + 1
        quiet = quiet_tensorflow_import if name == "keras" else contextlib.nullcontext
        try:
            with quiet():
                self.loader.exec_module(module)
        finally:
            _thread.depth = depth
        if name == "keras":
            _keras_imported = True
        if depth == 0 and _keras_imported:
            _register()
