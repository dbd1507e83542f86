"""The model zoo: presets of keras_tfm models, shipped with the package.

Example:
>>> from keras_tfm import zoo
>>> zoo.list_presets()
>>> print(zoo.preset_card("<name>"))
>>> model = zoo.from_preset("<name>", dropout=0.0)
"""

from keras_tfm.models.preset_loading import register_preset_loader
from keras_tfm.zoo.catalogue import (
    from_preset,
    list_presets,
    preset_card,
    preset_dir,
    preset_labels,
    preset_weights,
)
from keras_tfm.zoo.save_preset import save_preset

register_preset_loader(from_preset)

__all__ = [
    "from_preset",
    "list_presets",
    "preset_card",
    "preset_dir",
    "preset_labels",
    "preset_weights",
    "save_preset",
]
