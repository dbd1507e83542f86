"""Converters between keras-tfm models and other frameworks' checkpoints."""

from keras_tfm.convert.gguf_llama import load_gguf_llama as load_gguf_llama
from keras_tfm.convert.gguf_tokenizer import (
    GGUFBytePairTokenizer as GGUFBytePairTokenizer,
)
from keras_tfm.convert.hf_bert import load_hf_bert as load_hf_bert
from keras_tfm.convert.hf_bert import save_hf_bert as save_hf_bert
from keras_tfm.convert.hf_bert_tokenizer import HFBertTokenizer as HFBertTokenizer
from keras_tfm.convert.hf_gpt2 import load_hf_gpt2 as load_hf_gpt2
from keras_tfm.convert.hf_gpt2 import save_hf_gpt2 as save_hf_gpt2
from keras_tfm.convert.hf_llama import load_hf_llama as load_hf_llama
from keras_tfm.convert.hf_llama import save_hf_llama as save_hf_llama
from keras_tfm.convert.hf_marian import load_hf_marian as load_hf_marian
from keras_tfm.convert.marian_tokenizer import MarianTokenizer as MarianTokenizer
from keras_tfm.convert.smollm2 import smollm2_gguf_path as smollm2_gguf_path

__all__ = [
    "GGUFBytePairTokenizer",
    "HFBertTokenizer",
    "MarianTokenizer",
    "load_gguf_llama",
    "load_hf_bert",
    "load_hf_gpt2",
    "load_hf_llama",
    "load_hf_marian",
    "save_hf_bert",
    "save_hf_gpt2",
    "save_hf_llama",
    "smollm2_gguf_path",
]
