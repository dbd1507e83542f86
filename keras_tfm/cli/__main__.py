"""`python -m keras_tfm.cli ...`: the `keras-tfm` command (without the
launcher's quieting of TensorFlow's start-up logs)."""

from keras_tfm.cli import main

main()
