import keras
from keras import ops

from keras_tfm.validation import check_positive_int, check_rank


def check_patch_stride(patch_stride, patch_size):
    """`patch_stride` as an int in [1, patch_size]; None means patch_size."""
    if patch_stride is None:
        return patch_size
    check_positive_int("patch_stride", patch_stride)
    if patch_stride > patch_size:
        raise ValueError(
            "`patch_stride` must be at most `patch_size` (patches that skip "
            f"pixels). Received: patch_stride={patch_stride}, "
            f"patch_size={patch_size}"
        )
    return int(patch_stride)


@keras.saving.register_keras_serializable(package="keras_tfm")
class PatchEmbedding(keras.layers.Layer):
    """Images to a sequence of patch vectors, a class token first (ViT).

    The image (batch, height, width, channels) is cut into p x p patches
    every s pixels (non-overlapping when s = p, the default), read row by
    row; each patch, flattened in (row, column, channel) order, is projected
    to `hidden_dim`; a learned class token is put before them and a learned
    position vector added to every token (Dosovitskiy et al., 2021, eq. 1):

        z_0 = [x_class; x_1 E; ...; x_N E] + E_pos,   N = (H / s)(W / s)

    The projection is a Dense on the flattened patches, the same map as a
    Conv2D with kernel p, stride s and "same" padding: with s < p the patches
    overlap (a convolutional stem, a locality prior; Xiao et al., 2021), the
    image zero-padded by p - s pixels, (p - s) // 2 of them before.

    Args:
        patch_size: the side p of the square patches.
        hidden_dim: the width of the patch vectors.
        patch_stride: the step s between patches, 1 <= s <= p, dividing the
            image's height and width; None (the default) means p.
        kernel_initializer: initializer of the projection.
        embeddings_initializer: initializer of the class token and positions.

    Call arguments:
        images: (batch, height, width, channels) floats.

    Returns:
        (batch, 1 + N, hidden_dim): the class token, then the N patches.

    Example:
    >>> layer = keras_tfm.layers.PatchEmbedding(patch_size=2, hidden_dim=16)
    >>> layer(np.zeros((3, 8, 8, 1), "float32")).shape
    TensorShape([3, 17, 16])
    >>> overlapping = keras_tfm.layers.PatchEmbedding(
    ...     patch_size=4, hidden_dim=16, patch_stride=2)
    >>> overlapping(np.zeros((3, 8, 8, 1), "float32")).shape
    TensorShape([3, 17, 16])
    """

    def __init__(
        self,
        patch_size,
        hidden_dim,
        patch_stride=None,
        kernel_initializer="glorot_uniform",
        embeddings_initializer=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.patch_size = check_positive_int("patch_size", patch_size)
        self.hidden_dim = check_positive_int("hidden_dim", hidden_dim)
        self.patch_stride = check_patch_stride(patch_stride, self.patch_size)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.embeddings_initializer = keras.initializers.get(
            embeddings_initializer or keras.initializers.TruncatedNormal(stddev=0.02)
        )

    def build(self, images_shape):
        if len(images_shape) != 4:
            raise ValueError(
                "`images` must be (batch, height, width, channels). Received: "
                f"images.shape={tuple(images_shape)}"
            )
        height, width, channels = images_shape[1:]
        stride = self.patch_stride
        if height is None or width is None or height % stride or width % stride:
            raise ValueError(
                f"The image's height and width must be known multiples of "
                f"patch_stride={stride}. Received: images.shape="
                f"{tuple(images_shape)}"
            )
        self.grid = (height // stride, width // stride)
        self.num_patches = self.grid[0] * self.grid[1]
        self.projection = keras.layers.Dense(
            self.hidden_dim,
            kernel_initializer=self.kernel_initializer,
            dtype=self.dtype_policy,
            name="projection",
        )
        self.projection.build((None, None, self.patch_size**2 * channels))
        self.class_token = self.add_weight(
            shape=(1, 1, self.hidden_dim),
            initializer=self.embeddings_initializer,
            name="class_token",
        )
        self.position_embedding = self.add_weight(
            shape=(1, 1 + self.num_patches, self.hidden_dim),
            initializer=self.embeddings_initializer,
            name="position_embedding",
        )

    def patches(self, images):
        """The flattened patches, (batch, N, p * p * channels), row by row."""
        check_rank("images", images, 4, "(batch, height, width, channels)")
        p, s, (rows, columns) = self.patch_size, self.patch_stride, self.grid
        channels = images.shape[-1]
        if s == p:  # non-overlapping: a reshape
            x = ops.reshape(images, (-1, rows, p, columns, p, channels))
            x = ops.transpose(x, (0, 1, 3, 2, 4, 5))  # (B, rows, columns, p, p, C)
            return ops.reshape(x, (-1, rows * columns, p * p * channels))
        before = (p - s) // 2
        padding = [(0, 0), (before, p - s - before), (before, p - s - before), (0, 0)]
        x = ops.pad(images, padding)
        # Pixel (i, j) of every patch: one strided slice (B, rows, columns, C).
        pixels = [x[:, i : i + s * rows : s, j : j + s * columns : s]
                  for i in range(p) for j in range(p)]  # fmt: skip
        x = ops.stack(pixels, axis=3)  # (B, rows, columns, p * p, C)
        return ops.reshape(x, (-1, rows * columns, p * p * channels))

    def call(self, images):
        x = self.projection(self.patches(ops.cast(images, self.compute_dtype)))
        class_token = ops.cast(self.class_token, x.dtype)
        class_token = ops.broadcast_to(
            class_token, (ops.shape(x)[0], 1, self.hidden_dim)
        )
        x = ops.concatenate([class_token, x], axis=1)  # (B, 1 + N, D)
        return x + ops.cast(self.position_embedding, x.dtype)

    def compute_output_shape(self, images_shape):
        patches = (images_shape[1] // self.patch_stride) * (
            images_shape[2] // self.patch_stride
        )
        return (images_shape[0], 1 + patches, self.hidden_dim)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "patch_size": self.patch_size,
                "hidden_dim": self.hidden_dim,
                "patch_stride": self.patch_stride,
                "kernel_initializer": keras.initializers.serialize(
                    self.kernel_initializer
                ),
                "embeddings_initializer": keras.initializers.serialize(
                    self.embeddings_initializer
                ),
            }
        )
        return config
