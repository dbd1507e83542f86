"""A GGUF file's SentencePiece ("llama") vocabulary -> `SentencePieceBPETokenizer`.

Llama 2, Mistral v0.1, TinyLlama, Phi-3 and Gemma files give
`tokenizer.ggml.model` "llama": `tokenizer.ggml.tokens`, `.scores` and
`.token_type` are a SentencePiece BPE model's pieces, merge priorities and
types, and `tokenizer.ggml.add_space_prefix` (default true) its dummy
prefix. The tokenizer encodes as llama.cpp does
(`keras_tfm.tokenizers.sentencepiece_bpe_tokenizer`).
"""

from keras_tfm.convert.gguf_reader import metadata
from keras_tfm.tokenizers.sentencepiece_bpe_tokenizer import (
    SentencePieceBPETokenizer,
    sentencepiece_proto,
)


def convert_gguf_sentencepiece(reader):
    """The `SentencePieceBPETokenizer` of a GGUF file's "llama" vocabulary,
    with its special tokens' roles and chat template."""
    tokens = metadata(reader, "tokenizer.ggml.tokens")
    scores = metadata(reader, "tokenizer.ggml.scores")
    types = metadata(reader, "tokenizer.ggml.token_type")
    prefix = metadata(reader, "tokenizer.ggml.add_space_prefix", True, False)
    proto = sentencepiece_proto(tokens, scores, types, add_space_prefix=prefix)

    def token(key):
        index = metadata(reader, key, None, False)
        return None if index is None else tokens[index]

    return SentencePieceBPETokenizer(
        proto,
        bos_token=token("tokenizer.ggml.bos_token_id"),
        eos_token=token("tokenizer.ggml.eos_token_id"),
        pad_token=token("tokenizer.ggml.padding_token_id"),
        chat_template=metadata(reader, "tokenizer.chat_template", None, False),
    )
