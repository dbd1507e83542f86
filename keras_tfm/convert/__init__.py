"""Converters between keras-tfm models and other frameworks' checkpoints."""

from keras_tfm.convert.hf_bert import load_hf_bert as load_hf_bert
from keras_tfm.convert.hf_bert import save_hf_bert as save_hf_bert
from keras_tfm.convert.hf_bert_tokenizer import HFBertTokenizer as HFBertTokenizer

__all__ = ["HFBertTokenizer", "load_hf_bert", "save_hf_bert"]
