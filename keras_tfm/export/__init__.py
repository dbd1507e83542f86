"""Models that leave Python: SavedModels with string signatures, and LiteRT.

Example:
>>> from keras_tfm import export
>>> sorted(name for name in dir(export) if not name.startswith("_"))[:2]
['export_litert', 'export_saved_model']
"""

from keras_tfm.export.litert import export_litert
from keras_tfm.export.saved_model import export_saved_model, signatures_of

__all__ = ["export_litert", "export_saved_model", "signatures_of"]
