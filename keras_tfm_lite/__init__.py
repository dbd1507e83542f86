"""What runs without TensorFlow: the cache folder and a cached LiteRT chat.

`import keras_tfm` imports TensorFlow and Keras (about 2 s and 550 MB before
a model loads). The modules here import neither, only the standard library,
NumPy, `tokenizers` and `ai-edge-litert`, so that a `keras-tfm chat` whose
decoding step is already cached answers from a process that never imports
TensorFlow (`keras_tfm_lite.litert_chat`). `keras_tfm` uses them too: the
cache folder (`user_cache`), the ChatML template (`chat_template`), stop
strings and streamed text (`stop_text`).
"""
