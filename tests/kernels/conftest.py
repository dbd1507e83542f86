import pytest

from keras_tfm.kernels import attention as attention_module
from keras_tfm.kernels import chunked_attention


@pytest.fixture
def small_tiles(monkeypatch):
    """Long means 12 keys or more, tiles of 5 keys and 3 queries: cheap.

    Returns the keyword arguments of every call `dot_product_attention`
    makes to the tiled kernel.
    """
    monkeypatch.setattr(attention_module, "CHUNKED_ATTENTION_MIN_LENGTH", 12)
    monkeypatch.setattr(chunked_attention, "DEFAULT_CHUNK_SIZE", 5)
    monkeypatch.setattr(chunked_attention, "DEFAULT_QUERY_CHUNK_SIZE", 3)
    calls = []
    tiled = chunked_attention.chunked_dot_product_attention

    def spy(*args, **kwargs):
        calls.append(kwargs)
        return tiled(*args, **kwargs)

    monkeypatch.setattr(attention_module, "chunked_dot_product_attention", spy)
    return calls
