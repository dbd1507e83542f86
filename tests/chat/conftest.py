import keras
import pytest

from keras_tfm.convert import GGUFBytePairTokenizer
from tests.builders import causal_lm
from tests.convert.tiny_gguf import MERGES, SPECIALS, TEMPLATE, tiny_vocabulary


@pytest.fixture(scope="package")
def llm():
    """A tiny random ChatML model (byte-level BPE, a chat template)."""
    tokens = tiny_vocabulary()
    tokenizer = GGUFBytePairTokenizer(
        {t: i for i, t in enumerate(tokens)},
        MERGES,
        unsplittable_tokens=SPECIALS,
        bos_token="<|im_start|>",
        eos_token="<|im_end|>",
        chat_template=TEMPLATE,
    )
    keras.utils.set_random_seed(3)
    return causal_lm(
        vocabulary_size=len(tokens), num_layers=2, num_heads=4,
        num_key_value_heads=2, hidden_dim=32, intermediate_dim=64,
        max_sequence_length=512, position_encoding="rotary",
        normalization="rms_norm", activation="swiglu", use_bias=False,
        padding_id=None, tokenizer=tokenizer,
    )  # fmt: skip
