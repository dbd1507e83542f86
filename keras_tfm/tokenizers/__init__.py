"""Tokenizers of converted checkpoints, and their chat formatting.

keras-hub's tokenizers, with what the checkpoints' own tokenizers do
differently: `ByteLevelBPETokenizer` (GPT-2, Llama 3, Qwen2 and SmolLM
byte-level BPE, from HuggingFace or GGUF files, with the checkpoint's
pre-tokenization and chat template), `SentencePieceBPETokenizer` (the
SentencePiece BPE vocabularies of Llama 2, Mistral v0.1, Phi-3 and Gemma
GGUF files, encoded as llama.cpp encodes them), `HFBertTokenizer` (BERT's
WordPiece with HuggingFace's text normalization), `MarianTokenizer`
(Marian's two SentencePiece models numbered by its vocab.json) and
`T5Tokenizer` (T5's SentencePiece model, "</s>" appended).
`render_chat_template` formats a conversation with a checkpoint's own Jinja2
chat template, in Jinja2's sandbox.

Example:
>>> tokenizer = keras_tfm.tokenizers.ByteLevelBPETokenizer(
...     {"a": 0, "b": 1, "ab": 2}, ["a b"], pre_tokenizer="gpt2")
>>> [int(i) for i in tokenizer("ab")]
[2]
"""

from keras_tfm.lite.chat_template import (
    render_chat_template as render_chat_template,
)
from keras_tfm.tokenizers.byte_level_bpe_tokenizer import (
    ByteLevelBPETokenizer as ByteLevelBPETokenizer,
)
from keras_tfm.tokenizers.byte_level_bpe_tokenizer import (
    GGUFBytePairTokenizer as GGUFBytePairTokenizer,
)
from keras_tfm.tokenizers.hf_bert_tokenizer import HFBertTokenizer as HFBertTokenizer
from keras_tfm.tokenizers.marian_tokenizer import MarianTokenizer as MarianTokenizer
from keras_tfm.tokenizers.sentencepiece_bpe_tokenizer import (
    SentencePieceBPETokenizer as SentencePieceBPETokenizer,
)
from keras_tfm.tokenizers.t5_tokenizer import T5Tokenizer as T5Tokenizer

__all__ = [
    "ByteLevelBPETokenizer",
    "GGUFBytePairTokenizer",
    "HFBertTokenizer",
    "MarianTokenizer",
    "SentencePieceBPETokenizer",
    "T5Tokenizer",
    "render_chat_template",
]
