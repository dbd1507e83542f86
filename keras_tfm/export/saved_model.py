"""`export_saved_model`: a task as a SavedModel whose signatures take strings."""

import os
import time
from pathlib import Path

import tensorflow as tf

from keras_tfm.export import (
    decoding,
    encoder_signatures,
    generate_signatures,
    translate_signatures,
)
from keras_tfm.kernels.plain_scope import plain_kernels
from keras_tfm.models import CausalLM, EncoderClassifier, SentenceEncoder, Seq2SeqLM
from keras_tfm.saving import atomic_directory

# Nobody differentiates a string signature: tracing the gradient functions of
# the custom gradients inside (the tiled kernels', weight-only int8
# matmuls') was 80% of the time `tf.saved_model.save` took on SmolLM2.
SAVE = tf.saved_model.SaveOptions(experimental_custom_gradients=False)


def _folder_bytes(directory):
    return sum(
        os.path.getsize(os.path.join(root, name))
        for root, _, names in os.walk(directory)
        for name in names
    )


def signatures_of(model, max_new_tokens=32, num_beams=1, length_penalty=0.0):
    """The string signatures of `model`, by name (tf.functions).

    Raises:
        ValueError: `model` has no tokenizer, or is a kind with no string
            signature.
    """
    if getattr(model, "preprocessor", None) is None:
        raise ValueError(
            f"This {type(model).__name__} has no tokenizer (no `preprocessor`), "
            "so it cannot take or return strings. Export the forward pass of "
            "token ids instead with `model.export(directory)` (Keras' "
            "SavedModel, a `serve(token_ids)` signature), or build the model "
            "with a preprocessor. Received: preprocessor=None"
        )
    if isinstance(model, EncoderClassifier):
        return {"classify": encoder_signatures.classify_signature(model)}
    if isinstance(model, SentenceEncoder):
        return {"embed": encoder_signatures.embed_signature(model)}
    if isinstance(model, Seq2SeqLM):
        return translate_signatures.translate_signatures(
            model, max_new_tokens, num_beams, length_penalty
        )
    if isinstance(model, CausalLM):
        decoder = decoding.Decoder(model)
        with_options = generate_signatures.generate_with_options_signature(
            model, decoder
        )
        signatures = {
            "generate": generate_signatures.generate_signature(
                with_options, max_new_tokens
            ),
            "generate_with_options": with_options,
            "score": generate_signatures.score_signature(model),
        }
        if getattr(model.preprocessor.tokenizer, "chat_template", None):
            signatures["chat"] = generate_signatures.chat_signature(
                model, decoder, max_new_tokens
            )
        return signatures
    raise ValueError(
        "Only an EncoderClassifier, a SentenceEncoder, a CausalLM or a "
        "Seq2SeqLM exports "
        f"string signatures. Received: a {type(model).__name__}"
    )


def export_saved_model(
    model,
    directory,
    overwrite=False,
    max_new_tokens=32,
    num_beams=1,
    length_penalty=0.0,
    timings=None,
    signatures=None,
):
    """Writes `model` as a SavedModel with its tokenizer inside the graph.

    Signatures (each takes and returns tensors keyed by name):

    - `EncoderClassifier`: `classify(texts) -> labels, probabilities`;
    - `SentenceEncoder`: `embed(texts) -> embeddings`;
    - `CausalLM`: `generate(prompts) -> texts` (greedy, `max_new_tokens`
      new tokens at most, the prompt and its continuation as
      `model.generate` returns them), `generate_with_options(prompts,
      max_new_tokens)`, `score(texts) -> log_likelihood`, and with a chat
      template `chat(messages) -> answers` (one user message a row);
      `generate_with_options(prompts, max_new_tokens, temperature, top_k,
      top_p, seed)` samples as `model.generate(..., sampler="top_p")` with
      the same seed (temperature 0: greedy);
    - `Seq2SeqLM`: `translate(sources) -> texts` (`num_beams` and
      `length_penalty` of the export) and `translate_with_options(sources,
      max_new_tokens, num_beams, length_penalty)`.

    The generative signatures share one traced decoding loop.

    Loading needs TensorFlow and tensorflow-text (the tokenizers' ops), not
    Keras or keras-tfm: `tf.saved_model.load(directory).signatures[...]`.

    Args:
        model: a task with a preprocessor (weight-only int8 and bfloat16
            models export as they are).
        directory: the folder to write.
        overwrite: whether an existing non-empty `directory` may be replaced.
        max_new_tokens: the generative signatures' answer length.
        num_beams, length_penalty: `translate`'s beam search (1: greedy, as
            `generate`'s default); `translate_with_options` takes 1 or this
            width (4 when it is 1).
        timings: a dict that receives the seconds each step took (each
            signature's tracing, "save"), or None.
        signatures: the names of the signatures to write (default all of
            `signatures_of(model)`): fewer names, less tracing.

    Returns:
        The size of the written folder, in bytes.

    Example:
    >>> import tempfile
    >>> from keras_tfm import export, zoo
    >>> model = zoo.from_preset("fortunes_classifier")
    >>> folder = tempfile.mkdtemp() + "/fortunes"
    >>> size = export.export_saved_model(model, folder)
    >>> import tensorflow as tf
    >>> classify = tf.saved_model.load(folder).signatures["classify"]
    >>> out = classify(texts=tf.constant(["Real programmers use vi."]))
    >>> sorted(out), out["probabilities"].shape
    (['labels', 'probabilities'], TensorShape([1, 27]))
    """
    names = signatures
    signatures = signatures_of(model, max_new_tokens, num_beams, length_penalty)
    if names is not None:
        unknown = sorted(set(names) - set(signatures))
        if unknown or not names:
            raise ValueError(
                f"`signatures` must name some of {sorted(signatures)}. "
                f"Received: signatures={names!r}"
            )
        signatures = {name: signatures[name] for name in names}
    module = tf.Module()
    module.model = model
    module.tokenizer = model.preprocessor.tokenizer
    timings = {} if timings is None else timings
    # A non-empty `directory` is refused here, before the slow tracing.
    with atomic_directory(Path(directory), overwrite=overwrite) as folder:
        concrete = {}
        for name, function in signatures.items():
            start = time.perf_counter()
            # The signatures only run forward: unknown lengths take the plain
            # kernels, not both kernels and a custom gradient each.
            with plain_kernels():
                concrete[name] = function.get_concrete_function()
            timings[name] = time.perf_counter() - start
        start = time.perf_counter()
        tf.saved_model.save(module, str(folder), signatures=concrete, options=SAVE)
        timings["save"] = time.perf_counter() - start
    return _folder_bytes(directory)
