"""Training utilities: the Transformer learning-rate schedule, a padding-aware
label-smoothed loss, padding-aware metrics, a throughput/MFU callback, LoRA
(`enable_lora`), the language-model recipe of `keras-tfm train`
(`train_on_text` on `train_language_model`, with its callbacks),
linear-probe initialisation of a classifier's head (`pooled_features`,
`probe_head`), structured pruning of heads and feed-forward units
(`head_importance`, `ffn_importance`, `least_important`, `prune_heads`,
`prune_ffn`), and the device's fastest settings (`device_defaults`).
These are the entry points; the recipe's parts (the text split, the
held-out comparison, the batches) are in their modules
(`language_model_recipe`, `language_model_training`, `flops`).

`Perplexity` is `keras_hub.metrics.Perplexity`, re-exported: pass
`from_logits=True, mask_token_id=<padding id>` to ignore padding.

Example:
>>> from keras_tfm import training
>>> model.compile(
...     keras.optimizers.Adam(training.TransformerSchedule(hidden_dim=64)),
...     loss=training.TokenCrossEntropy(label_smoothing=0.1),
...     metrics=[training.TokenAccuracy(),
...              training.Perplexity(from_logits=True, mask_token_id=0)],
... )
"""

from keras_hub.metrics import Perplexity

from keras_tfm.models.lora import enable_lora
from keras_tfm.runtime.device_settings import device_defaults
from keras_tfm.training.callbacks import BestModelCheckpoint, TimeBudget
from keras_tfm.training.distiller import Distiller
from keras_tfm.training.flops import measure_peak_flops, training_flops_per_token
from keras_tfm.training.language_model_recipe import train_on_text
from keras_tfm.training.language_model_training import train_language_model
from keras_tfm.training.linear_probe import pooled_features, probe_head
from keras_tfm.training.pruning import (
    ffn_importance,
    head_importance,
    least_important,
    prune_ffn,
    prune_heads,
)
from keras_tfm.training.throughput_callback import ThroughputCallback
from keras_tfm.training.token_accuracy import TokenAccuracy
from keras_tfm.training.token_count import TokenCount
from keras_tfm.training.token_cross_entropy import TokenCrossEntropy
from keras_tfm.training.transformer_schedule import TransformerSchedule

__all__ = [
    "BestModelCheckpoint",
    "Distiller",
    "Perplexity",
    "ThroughputCallback",
    "TimeBudget",
    "TokenAccuracy",
    "TokenCount",
    "TokenCrossEntropy",
    "TransformerSchedule",
    "device_defaults",
    "enable_lora",
    "ffn_importance",
    "head_importance",
    "least_important",
    "measure_peak_flops",
    "pooled_features",
    "probe_head",
    "prune_ffn",
    "prune_heads",
    "train_language_model",
    "train_on_text",
    "training_flops_per_token",
]
