"""`import keras_tfm` imports no Keras; keras.saving still knows its classes.

Each case runs in a fresh interpreter, since what matters is what an import
brings into `sys.modules` and in which order. Loading a saved `.keras` file
in either import order is tests/test_package.py.
"""

import pkgutil
import subprocess
import sys
import textwrap

import pytest

import keras_tfm
from keras_tfm._registration import REGISTERING

HEAVY = ("keras", "tensorflow", "keras_hub", "jax", "torch")


def run_python(code):
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def test_import_keras_tfm_imports_no_keras_and_no_subpackage():
    out = run_python(
        f"""
        import sys
        import keras_tfm
        print(sorted(set({HEAVY!r}) & set(sys.modules)))
        print(sorted(m for m in sys.modules if m.startswith("keras_tfm.")))
        """
    )
    heavy, ours = out.splitlines()
    assert heavy == "[]"
    assert eval(ours) == [
        "keras_tfm._registration",
        "keras_tfm._tensorflow_logs",
        "keras_tfm.lite",
        "keras_tfm.lite.user_cache",
        "keras_tfm.runtime",
    ]


def test_the_cached_chat_and_the_launcher_import_no_keras():
    out = run_python(
        f"""
        import sys
        import keras_tfm.launcher, keras_tfm.lite.chat_command
        import keras_tfm.lite.litert_chat, keras_tfm.lite.litert_bench
        print(sorted(set({HEAVY!r}) & set(sys.modules)))
        """
    )
    assert out.strip() == "[]"



def test_help_and_refused_arguments_import_no_keras():
    # The launcher parses before it imports Keras: `--help` and a refused
    # argument exit with argparse's status, nothing heavy imported.
    out = run_python(
        f"""
        import sys
        from keras_tfm.launcher import main
        refused = ["chat", "m", "--weights", "int5"]
        for argv in (["--help"], ["serve", "--help"], refused):
            try:
                main(argv)
            except SystemExit as exit:
                print(exit.code, file=sys.stderr)
        print(sorted(set({HEAVY!r}) & set(sys.modules)))
        """
    )
    assert out.splitlines()[-1] == "[]"
    assert "usage: keras-tfm" in out and "--max-batch" in out

# After which statements keras.saving must know keras-tfm's classes: Keras
# imported after keras_tfm; by a package that imports it (keras_hub, whose
# import must end before keras-tfm's modules use it); inside a keras_tfm
# subpackage's own import. (Keras before keras_tfm: tests/test_package.py.)
@pytest.mark.parametrize(
    "statements",
    [
        "import keras_tfm; import keras",
        # A fresh process each (7 CPU-s): the other orders with the slow tests.
        pytest.param("import keras_tfm; import keras_hub", marks=pytest.mark.slow),
        pytest.param(
            "import keras_tfm; from keras_tfm.models import CausalLM",
            marks=pytest.mark.slow,
        ),
    ],
)
def test_keras_saving_knows_the_classes_after(statements):
    out = run_python(
        f"""
        import sys
        {statements}
        import keras
        from keras_tfm import _registration
        names = ["keras_tfm>CausalLM", "keras_tfm>TransformerSchedule",
                 "keras_tfm>ByteLevelBPETokenizer", "keras_tfm>BeamSearchSampler"]
        print([keras.saving.get_registered_object(n) is not None for n in names])
        print(sorted(m.partition(".")[2] for m in sys.modules
                     if m.startswith("keras_tfm.")))
        print(any(type(f) is _registration._KerasWatcher for f in sys.meta_path))
        print(keras_tfm.models.CausalLM is keras.saving.get_registered_object(
            "keras_tfm>CausalLM"))
        """
    )
    found, loaded, watching, same = out.splitlines()
    assert found == "[True, True, True, True]"
    assert set(REGISTERING) <= set(eval(loaded))
    assert watching == "False"  # the finder left once its work was done
    assert same == "True"  # the attribute is the registered class


def test_subpackages_are_attributes_on_first_use():
    out = run_python(
        """
        import sys, keras_tfm
        assert "lite" in dir(keras_tfm) and "models" in dir(keras_tfm)
        print(keras_tfm.lite.user_cache.__name__, "keras" in sys.modules)
        try:
            keras_tfm.no_such_part
        except AttributeError as error:
            print(error)
        """
    )
    assert out.splitlines() == [
        "keras_tfm.lite.user_cache False",
        "module 'keras_tfm' has no attribute 'no_such_part'",
    ]


def test_every_public_submodule_is_an_attribute():
    found = {
        module.name
        for module in pkgutil.iter_modules(keras_tfm.__path__)
        if not module.name.startswith("_")
    }
    assert keras_tfm._SUBMODULES == found
