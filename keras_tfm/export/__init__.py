"""Models that leave Python: SavedModels with string signatures, and LiteRT.

Example:
>>> from keras_tfm import export, zoo
>>> sorted(export.signatures_of(zoo.from_preset("kjv_gpt")))
['generate', 'generate_with_options', 'score']
"""

from keras_tfm._optional import require_tensorflow

require_tensorflow("keras_tfm.export (SavedModel and LiteRT export)")

from keras_tfm.export.litert import export_litert  # noqa: E402
from keras_tfm.export.litert_decoder import export_litert_decoder  # noqa: E402
from keras_tfm.export.saved_model import (  # noqa: E402
    export_saved_model,
    signatures_of,
)

__all__ = [
    "export_litert",
    "export_litert_decoder",
    "export_saved_model",
    "signatures_of",
]
