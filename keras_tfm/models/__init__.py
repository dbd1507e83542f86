"""The three Transformer families built from `keras_tfm.layers`."""
