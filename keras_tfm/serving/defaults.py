"""The server's defaults, shared by `keras-tfm serve`'s options, `Service`,
`serve`, `ServerThread` and the Ray Serve replicas (one owner: none of them
imports another for a number)."""

HOST = "127.0.0.1"
"""The address bound unless told otherwise: this machine only."""
PORT = 8000
MAX_BATCH = 8
"""Requests decoded together (the slots)."""
STEPS_PER_CALL = 1
"""Tokens decoded per slot per compiled call."""
MAX_BODY_BYTES = 1 << 20
"""The largest request body accepted."""
PREFIX_CACHE_MB = 256
"""The memory kept for earlier prompts' keys and values."""
PREFILL_CHUNK = 256
"""The most prompt tokens prefilled between two decoding steps."""
API_KEY_VARIABLE = "KERAS_TFM_API_KEY"
"""The environment variable `keras-tfm serve` reads its key from."""
