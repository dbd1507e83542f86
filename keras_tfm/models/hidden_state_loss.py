"""A causal LM's compiled token loss, computed from its hidden states in `fit`.

Which compiled losses `CausalLM.fit` computes without forming the logits
(`keras_tfm.kernels.linear_cross_entropy`), and their reduction: the
compiled loss's own, through Keras' `Loss.__call__`, so sample weights,
`ignore_class` and the reduction mean what they mean on the logits.
"""

import keras
from keras import ops

from keras_tfm._keras_compat import set_keras_mask
from keras_tfm.kernels.linear_cross_entropy import linear_cross_entropy
from keras_tfm.validation import check_label_shape

# Vocabularies at least this large train from the hidden states by default
# ("auto"): below it the logits are small beside the blocks' activations.
MIN_VOCABULARY_SIZE = 4096


def token_loss_settings(loss):
    """`(ignore_class, label_smoothing)` of a sparse cross-entropy on logits
    that `hidden_state_loss` reproduces, or None for any other loss.

    Example:
    >>> token_loss_settings(keras.losses.SparseCategoricalCrossentropy(
    ...     from_logits=True, ignore_class=0))
    (0, 0.0)
    >>> token_loss_settings("mse") is None
    True
    """
    # Exact types only: a subclass may compute something else.
    if type(loss) is keras.losses.SparseCategoricalCrossentropy:
        config = loss.get_config()
        if config["from_logits"]:
            return config["ignore_class"], 0.0
    elif (
        isinstance(loss, keras.losses.Loss)
        and keras.saving.get_registered_name(type(loss))
        == "keras_tfm>TokenCrossEntropy"
        and loss.from_logits
    ):
        return loss.ignore_class, loss.label_smoothing
    return None


class _GivenTokenLosses(keras.losses.Loss):
    # The per-token losses come computed; Keras' `Loss.__call__` weights and
    # reduces them, with the ignored labels masked as the loss itself masks.
    def __init__(self, reduction, ignore_class, name):
        super().__init__(name=name, reduction=reduction, dtype="float32")
        self.ignore_class = ignore_class

    def call(self, y_true, losses):
        if self.ignore_class is None:
            return losses
        valid = ops.not_equal(y_true, ops.cast(self.ignore_class, y_true.dtype))
        losses = ops.where(valid, losses, 0.0)
        set_keras_mask(losses, valid)
        return losses


def hidden_state_loss(loss, y_true, hidden, table, sample_weight=None):
    """`loss(y_true, hidden @ table^T, sample_weight)` without the logits.

    Args:
        loss: a loss `token_loss_settings` accepts.
        y_true: int labels (batch, seq).
        hidden: the final hidden states (batch, seq, hidden_dim).
        table: the output projection as (vocabulary_size, hidden_dim).
        sample_weight: optional (batch, seq) weights.

    Returns:
        The reduced loss, a float32 scalar.

    Example:
    >>> loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    >>> h = np.random.rand(2, 3, 4).astype("float32")
    >>> table = np.random.rand(5, 4).astype("float32")
    >>> y = np.array([[1, 2, 3], [4, 0, 1]])
    >>> bool(np.isclose(hidden_state_loss(loss, y, h, table), loss(y, h @ table.T)))
    True
    """
    settings = token_loss_settings(loss)
    if settings is None:
        raise ValueError(
            "The hidden-state loss reproduces a sparse cross-entropy on logits "
            "(keras.losses.SparseCategoricalCrossentropy(from_logits=True) or "
            f"keras_tfm.training.TokenCrossEntropy). Received: loss={loss!r}"
        )
    ignore_class, label_smoothing = settings
    y_true = ops.convert_to_tensor(y_true)
    if len(y_true.shape) == len(hidden.shape) and y_true.shape[-1] == 1:
        y_true = ops.squeeze(y_true, axis=-1)
    check_label_shape(y_true, hidden, "hidden")
    labels = y_true
    if ignore_class is not None:  # an ignored label may be any id, -100 too
        ignored = ops.equal(labels, ops.cast(ignore_class, labels.dtype))
        labels = ops.where(ignored, ops.zeros_like(labels), labels)
    losses = linear_cross_entropy(hidden, table, labels, label_smoothing)
    reduce = _GivenTokenLosses(loss.reduction, ignore_class, loss.name)
    return reduce(y_true, losses, sample_weight)
