import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras  # noqa: E402
import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _fresh_keras_state():
    """Each test starts from float32, a fixed seed and a clean graph."""
    keras.config.set_dtype_policy("float32")
    keras.utils.set_random_seed(1234)
    yield
    keras.config.set_dtype_policy("float32")
    keras.backend.clear_session()


@pytest.fixture(scope="session")
def smollm2():
    """SmolLM2-135M-Instruct through its zoo preset, loaded once per run."""
    from keras_tfm import zoo
    from keras_tfm.convert import smollm2_gguf_path

    try:
        smollm2_gguf_path()
    except ValueError as error:
        pytest.skip(str(error))
    return zoo.from_preset("smollm2_135m_instruct")
