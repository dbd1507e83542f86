import keras
from keras import ops

from keras_tfm.kernels.activations import ACTIVATIONS
from keras_tfm.layers.normalization import make_normalization
from keras_tfm.layers.patch_embedding import PatchEmbedding, check_patch_stride
from keras_tfm.layers.transformer_encoder_block import TransformerEncoderBlock
from keras_tfm.models.preset_loading import PresetMixin
from keras_tfm.validation import (
    check_choice,
    check_positive_float,
    check_positive_int,
    check_rank,
    check_rate,
)

POOLINGS = ("cls", "mean")


def _check_image_shape(image_shape, patch_stride):
    if (
        not isinstance(image_shape, (list, tuple))
        or len(image_shape) != 3
        or any(isinstance(v, bool) or not isinstance(v, int) or v <= 0
               for v in image_shape)
        or image_shape[0] % patch_stride
        or image_shape[1] % patch_stride
    ):  # fmt: skip
        raise ValueError(
            "`image_shape` must be (height, width, channels), positive ints, "
            f"the height and width multiples of patch_stride={patch_stride}. "
            f"Received: image_shape={image_shape!r}"
        )
    return tuple(image_shape)


@keras.saving.register_keras_serializable(package="keras_tfm")
class VisionTransformer(PresetMixin, keras.Model):
    """An image classifier from the encoder's blocks (ViT).

        z = PatchEmbedding(image)                    class token + N patches
        z = Block_L(...Block_1(Dropout(z)))          `TransformerEncoderBlock`s
        logits = Dense(Norm(z)[:, 0])                the class token ("cls")

    The blocks are the text encoder's `TransformerEncoderBlock`, pre-LN as in
    ViT (Dosovitskiy et al., 2021); no position is padding, so no mask.
    With `pooling="mean"` the head reads the mean of the patch vectors.

    Sublayers: `patch_embedding` (PatchEmbedding), `embeddings_dropout`,
    `transformer_layers[i]` named `transformer_layer_{i}`, `final_norm`,
    `classifier_dropout` and `classifier` (Dense to `num_classes`).

    Args:
        image_shape: (height, width, channels) of the images.
        patch_size: the side of the square patches.
        num_layers: number of encoder blocks.
        num_heads: attention heads per block.
        hidden_dim: width of the patch vectors and hidden states.
        intermediate_dim: inner width of the feed-forward networks.
        num_classes: number of classes.
        activation: the feed-forward's activation ("gelu", as ViT).
        dropout: dropout rate of the embeddings, attention, sublayers and
            the head's input.
        layer_norm_epsilon: epsilon of every layer norm.
        pooling: "cls" (the class token) or "mean" (of the patches).
        patch_stride: the step between patches (`PatchEmbedding`); None
            means `patch_size` (non-overlapping), smaller overlaps them.

    Call arguments:
        images: (batch, height, width, channels) floats.
        training: whether dropout is active.
        return_attention_scores: also return every block's attention weights.

    Returns:
        Logits (batch, num_classes); with `return_attention_scores=True`,
        `(logits, scores)`, `scores` a tuple of `num_layers` float32 tensors
        (batch, num_heads, 1 + N, 1 + N), token 0 the class token.

    Example:
    >>> model = keras_tfm.models.VisionTransformer(
    ...     image_shape=(8, 8, 1), patch_size=2, num_layers=1, num_heads=2,
    ...     hidden_dim=16, intermediate_dim=32, num_classes=10)
    >>> model(np.zeros((4, 8, 8, 1), "float32")).shape
    TensorShape([4, 10])
    """

    def __init__(
        self,
        image_shape,
        patch_size,
        num_layers,
        num_heads,
        hidden_dim,
        intermediate_dim,
        num_classes,
        activation="gelu",
        dropout=0.0,
        layer_norm_epsilon=1e-6,
        pooling="cls",
        patch_stride=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.patch_size = check_positive_int("patch_size", patch_size)
        self.patch_stride = check_patch_stride(patch_stride, self.patch_size)
        self.image_shape = _check_image_shape(image_shape, self.patch_stride)
        self.num_layers = check_positive_int("num_layers", num_layers)
        self.num_heads = check_positive_int("num_heads", num_heads)
        self.hidden_dim = check_positive_int("hidden_dim", hidden_dim)
        if hidden_dim % num_heads:
            raise ValueError(
                "`hidden_dim` must be divisible by `num_heads`. Received: "
                f"hidden_dim={hidden_dim}, num_heads={num_heads}"
            )
        self.intermediate_dim = check_positive_int("intermediate_dim", intermediate_dim)
        self.num_classes = check_positive_int("num_classes", num_classes)
        self.activation = check_choice("activation", activation, ACTIVATIONS)
        self.dropout = check_rate("dropout", dropout)
        self.layer_norm_epsilon = check_positive_float(
            "layer_norm_epsilon", layer_norm_epsilon
        )
        self.pooling = check_choice("pooling", pooling, POOLINGS)

        # Every sublayer is built here, so a preset's weights load before a call.
        policy = self.dtype_policy
        self.patch_embedding = PatchEmbedding(
            patch_size, hidden_dim, patch_stride=self.patch_stride, dtype=policy,
            name="patch_embedding",
        )  # fmt: skip
        self.patch_embedding.build((None, *self.image_shape))
        hidden_shape = (None, 1 + self.patch_embedding.num_patches, hidden_dim)
        self.embeddings_dropout = keras.layers.Dropout(
            dropout, dtype=policy, name="embeddings_dropout"
        )
        self.transformer_layers = []
        for i in range(num_layers):
            block = TransformerEncoderBlock(
                num_heads=num_heads,
                intermediate_dim=intermediate_dim,
                activation=activation,
                dropout=dropout,
                normalize_first=True,
                layer_norm_epsilon=layer_norm_epsilon,
                dtype=policy,
                name=f"transformer_layer_{i}",
            )
            block.build(hidden_shape)
            self.transformer_layers.append(block)
        self.final_norm = make_normalization(
            "layer_norm", layer_norm_epsilon, policy, "final_norm",
            hidden_dim=hidden_dim,
        )  # fmt: skip
        self.classifier_dropout = keras.layers.Dropout(
            dropout, dtype=policy, name="classifier_dropout"
        )
        if policy.compute_dtype != policy.variable_dtype:
            policy = keras.DTypePolicy(policy.variable_dtype)  # float32 logits
        self.classifier = keras.layers.Dense(
            num_classes, dtype=policy, name="classifier"
        )
        self.classifier.build((None, hidden_dim))
        self.built = True

    def call(self, images, training=None, return_attention_scores=False):
        check_rank("images", images, 4, "(batch, height, width, channels)")
        if tuple(images.shape[1:]) != self.image_shape:
            raise ValueError(
                f"`images` must be of shape (batch, *{self.image_shape}). "
                f"Received: images.shape={tuple(images.shape)}"
            )
        x = self.patch_embedding(images)
        x = self.embeddings_dropout(x, training=training)
        scores = []
        for block in self.transformer_layers:
            if return_attention_scores:
                x, layer_scores = block(
                    x, return_attention_scores=True, training=training
                )
                scores.append(layer_scores)
            else:
                x = block(x, training=training)
        x = self.final_norm(x)
        pooled = x[:, 0] if self.pooling == "cls" else ops.mean(x[:, 1:], axis=1)
        pooled = self.classifier_dropout(pooled, training=training)
        logits = self.classifier(pooled)
        return (logits, tuple(scores)) if return_attention_scores else logits

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "image_shape": list(self.image_shape),
                "patch_size": self.patch_size,
                "num_layers": self.num_layers,
                "num_heads": self.num_heads,
                "hidden_dim": self.hidden_dim,
                "intermediate_dim": self.intermediate_dim,
                "num_classes": self.num_classes,
                "activation": self.activation,
                "dropout": self.dropout,
                "layer_norm_epsilon": self.layer_norm_epsilon,
                "pooling": self.pooling,
                "patch_stride": self.patch_stride,
            }
        )
        return config
