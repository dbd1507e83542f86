"""Converters between keras-tfm models and other frameworks' checkpoints.

One module per model family (bert, gemma, gpt2, llama, marian, t5), each with
`convert_backbone_config`, `convert_weights` and `convert_tokenizer`, on
shared readers of the file formats: hf_directory (a HuggingFace folder:
config.json, safetensors in one file or shards), hf_tokenizer_files
(byte-level BPE tokenizer files) and gguf_reader (llama.cpp's GGUF; a GGUF
file of the Llama family, Qwen2 and Qwen3 included, is loaded by
gguf_llama, its conversion kept by converted_cache). `load_checkpoint`
takes either kind of checkpoint by what it is (checkpoint.py).
The tokenizers themselves live in `keras_tfm.tokenizers`; where the zoo's
SmolLM2 file is, in `keras_tfm.zoo.smollm2`.
"""

from keras_tfm.convert.bert import load_hf_bert as load_hf_bert
from keras_tfm.convert.bert import save_hf_bert as save_hf_bert
from keras_tfm.convert.checkpoint import load_checkpoint as load_checkpoint
from keras_tfm.convert.gemma import load_hf_gemma as load_hf_gemma
from keras_tfm.convert.gemma import save_hf_gemma as save_hf_gemma
from keras_tfm.convert.gguf_llama import load_gguf_llama as load_gguf_llama
from keras_tfm.convert.gpt2 import load_hf_gpt2 as load_hf_gpt2
from keras_tfm.convert.gpt2 import save_hf_gpt2 as save_hf_gpt2
from keras_tfm.convert.llama import load_hf_llama as load_hf_llama
from keras_tfm.convert.llama import save_hf_llama as save_hf_llama
from keras_tfm.convert.marian import load_hf_marian as load_hf_marian
from keras_tfm.convert.t5 import load_hf_t5 as load_hf_t5
from keras_tfm.convert.t5 import save_hf_t5 as save_hf_t5
from keras_tfm.tokenizers import GGUFBytePairTokenizer as GGUFBytePairTokenizer
from keras_tfm.tokenizers import HFBertTokenizer as HFBertTokenizer
from keras_tfm.tokenizers import MarianTokenizer as MarianTokenizer
from keras_tfm.tokenizers import T5Tokenizer as T5Tokenizer

__all__ = [
    "GGUFBytePairTokenizer",
    "HFBertTokenizer",
    "MarianTokenizer",
    "T5Tokenizer",
    "load_checkpoint",
    "load_gguf_llama",
    "load_hf_bert",
    "load_hf_gemma",
    "load_hf_gpt2",
    "load_hf_llama",
    "load_hf_marian",
    "load_hf_t5",
    "save_hf_bert",
    "save_hf_gemma",
    "save_hf_gpt2",
    "save_hf_llama",
    "save_hf_t5",
]
