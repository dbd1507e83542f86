"""What runs without Keras or TensorFlow: the cache folder and a cached LiteRT chat.

Keras and TensorFlow take about 2 s and 550 MB to import before a model
loads. The modules here import neither, only the standard library, NumPy,
`tokenizers`, Jinja2 and `ai-edge-litert` (and `import keras_tfm`, which imports no
Keras), so that a `keras-tfm chat` whose decoding step is already cached
answers from a process that never imports them
(`keras_tfm.lite.litert_chat`). The rest of keras_tfm uses them too: the
cache folder (`user_cache`), chat templates (`chat_template`), stop
strings and streamed text (`stop_text`).
"""
