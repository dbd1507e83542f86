"""A converted checkpoint saved as `.keras` loads after a plain `import keras_tfm`.

`keras_tfm.convert` (and its `HFBertTokenizer`) used to be imported lazily,
so a fresh process that never touched `keras_tfm.convert` could not
deserialize the tokenizer of a converted model.
"""

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np

from keras_tfm.convert import load_hf_bert
from keras_tfm.models import EncoderClassifier, TextClassifierPreprocessor

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "tiny_bert_hf"


def test_a_fresh_process_loads_a_converted_model_after_import_keras_tfm(tmp_path):
    backbone, tokenizer = load_hf_bert(FIXTURE)
    preprocessor = TextClassifierPreprocessor(tokenizer, sequence_length=16)
    model = EncoderClassifier(backbone, num_classes=2, preprocessor=preprocessor)
    ids = np.array([[2, 5, 7, 3]])
    np.save(tmp_path / "expected.npy", np.asarray(model(ids)))
    model.save(tmp_path / "converted.keras")
    script = textwrap.dedent(
        f"""
        import keras, numpy as np
        import keras_tfm
        model = keras.models.load_model({str(tmp_path / "converted.keras")!r})
        got = np.asarray(model(np.array([[2, 5, 7, 3]])))
        np.testing.assert_array_equal(got, np.load({str(tmp_path / "expected.npy")!r}))
        print("loaded", type(model.tokenizer).__name__)
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "loaded HFBertTokenizer" in result.stdout
