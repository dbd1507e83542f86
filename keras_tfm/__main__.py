"""`python -m keras_tfm ...`: the `keras-tfm` command (`keras_tfm.launcher`)."""

import sys

from keras_tfm.launcher import main

sys.exit(main())
