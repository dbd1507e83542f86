"""What a user meets first: `import keras_tfm`, then loading a saved model."""

import subprocess
import sys
import textwrap

import numpy as np
import pytest

from keras_tfm import zoo


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    folder = tmp_path_factory.mktemp("saved")
    model = zoo.from_preset("gpt_tiny")
    np.save(folder / "expected.npy", np.asarray(model(np.array([[1, 2, 3, 4]]))))
    model.save(folder / "m.keras")
    return folder


# `import keras_tfm` imports no Keras: keras-tfm's classes are registered
# when Keras is imported after it (keras_tfm._registration), or at once.
@pytest.mark.slow  # fresh processes
@pytest.mark.parametrize(
    "imports", ["import keras\nimport keras_tfm", "import keras_tfm\nimport keras"]
)
def test_a_fresh_process_loads_a_saved_model_after_import_keras_tfm(saved, imports):
    tmp_path = saved
    script = imports + textwrap.dedent(
        f"""
        import numpy as np
        model = keras.models.load_model({str(tmp_path / "m.keras")!r})
        got = np.asarray(model(np.array([[1, 2, 3, 4]])))
        np.testing.assert_array_equal(got, np.load({str(tmp_path / "expected.npy")!r}))
        print("loaded", type(model).__name__)
        # A task's from_preset finds the zoo (which registers its loader).
        # (gpt_tiny is an architecture preset: its weights are freshly drawn.)
        preset = keras_tfm.models.CausalLM.from_preset("gpt_tiny")
        assert preset(np.array([[1, 2, 3, 4]])).shape == got.shape
        print("from_preset", type(preset).__name__)
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "loaded CausalLM" in result.stdout
    assert "from_preset CausalLM" in result.stdout
