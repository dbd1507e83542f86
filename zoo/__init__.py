"""The keras-tfm model zoo: one folder per preset (config.json, README.md, and
optionally model.weights.h5 and assets/). Installed as `keras_tfm._catalogue`;
read it with `keras_tfm.zoo`."""
