"""Writes the zoo's architecture presets (configs and cards, no weights).

    python tools/make_architecture_presets.py

Each preset is a plain dict of constructor arguments. The sizes follow their
sources: the Transformer of Vaswani et al. (2017), table 3 ("base", "big",
with the paper's shared 37,000-token vocabulary); the compact BERTs of Turc et
al. (2019) and BERT-base (Devlin et al., 2019); minGPT's nano/micro/mini
(byte-level here, 256 tokens) and GPT-2 small (124M). The "tiny_*" presets are
for tests and quick experiments.
"""

from pathlib import Path

import keras

from keras_tfm.models import CausalLM, EncoderBackbone, Seq2SeqTransformer
from keras_tfm.zoo import save_preset

ZOO = Path(__file__).parents[1] / "zoo"
UNTRAINED = "None: an architecture preset with freshly initialised weights."


def transformer(layers, hidden, heads, ffn, dropout, vocabulary=37000):
    return dict(
        vocabulary_size=vocabulary,
        num_encoder_layers=layers,
        num_decoder_layers=layers,
        num_heads=heads,
        hidden_dim=hidden,
        intermediate_dim=ffn,
        max_sequence_length=256,
        dropout=dropout,
    )


def bert(layers, hidden, vocabulary=30522, max_length=512):
    return dict(
        vocabulary_size=vocabulary,
        num_layers=layers,
        num_heads=max(1, hidden // 64),
        hidden_dim=hidden,
        intermediate_dim=4 * hidden,
        max_sequence_length=max_length,
        dropout=0.1,
    )


def gpt(layers, heads, hidden, vocabulary=256, max_length=256, dropout=0.1):
    return dict(
        vocabulary_size=vocabulary,
        num_layers=layers,
        num_heads=heads,
        hidden_dim=hidden,
        intermediate_dim=4 * hidden,
        max_sequence_length=max_length,
        dropout=dropout,
        initializer_range=0.02,  # GPT-2's draw
    )


PRESETS = {
    "transformer_base": (
        Seq2SeqTransformer,
        transformer(6, 512, 8, 2048, 0.1),
        "The base Transformer of 'Attention Is All You Need' (table 3): 6+6 "
        "layers, d_model 512, 8 heads, FFN 2048, post-LN, sinusoidal positions, "
        "embeddings shared three ways over a 37,000-token vocabulary. The paper "
        "reports 65M parameters.",
        "Translation and other sequence-to-sequence tasks, trained from scratch.",
    ),
    "transformer_big": (
        Seq2SeqTransformer,
        transformer(6, 1024, 16, 4096, 0.3),
        "The big Transformer of 'Attention Is All You Need' (table 3): d_model "
        "1024, 16 heads, FFN 4096, dropout 0.3. The paper reports 213M parameters.",
        "Large-scale translation, trained from scratch on an accelerator.",
    ),
    "transformer_tiny": (
        Seq2SeqTransformer,
        transformer(1, 32, 2, 64, 0.0, vocabulary=64),
        "A 1+1-layer encoder-decoder of width 32 over 64 tokens.",
        "Tests and quick experiments.",
    ),
    "bert_tiny": (
        EncoderBackbone,
        bert(2, 128),
        "BERT-Tiny (Turc et al., 2019): 2 layers, hidden 128, 2 heads.",
        "An encoder backbone for classification or masked-LM pretraining.",
    ),
    "bert_mini": (
        EncoderBackbone,
        bert(4, 256),
        "BERT-Mini (Turc et al., 2019): 4 layers, hidden 256, 4 heads.",
        "An encoder backbone for classification or masked-LM pretraining.",
    ),
    "bert_small": (
        EncoderBackbone,
        bert(4, 512),
        "BERT-Small (Turc et al., 2019): 4 layers, hidden 512, 8 heads.",
        "An encoder backbone for classification or masked-LM pretraining.",
    ),
    "bert_base": (
        EncoderBackbone,
        bert(12, 768),
        "BERT-base (Devlin et al., 2019): 12 layers, hidden 768, 12 heads, "
        "30,522 WordPiece tokens. BERT's published 110M includes the pooler, "
        "which keras-tfm puts in `EncoderClassifier`.",
        "An encoder backbone for classification or masked-LM pretraining.",
    ),
    "bert_tiny_test": (
        EncoderBackbone,
        dict(bert(1, 32, vocabulary=64, max_length=32), dropout=0.0),
        "A 1-layer encoder of width 32 over 64 tokens.",
        "Tests and quick experiments.",
    ),
    "gpt_nano": (
        CausalLM,
        gpt(3, 3, 48),
        "minGPT's gpt-nano shape: 3 layers, 3 heads, width 48, over bytes.",
        "Character-level language modelling on small corpora; quick demos.",
    ),
    "gpt_micro": (
        CausalLM,
        gpt(4, 4, 128),
        "minGPT's gpt-micro shape: 4 layers, 4 heads, width 128, over bytes. "
        "`keras-tfm train` trains it on the shipped KJV text by default.",
        "Character-level language modelling; the default of `keras-tfm train`.",
    ),
    "gpt_mini": (
        CausalLM,
        gpt(6, 6, 192),
        "minGPT's gpt-mini shape: 6 layers, 6 heads, width 192, over bytes.",
        "Character-level language modelling on corpora of a few MB.",
    ),
    "gpt_small": (
        CausalLM,
        gpt(12, 12, 768, vocabulary=50257, max_length=1024),
        "GPT-2 small's shape (Radford et al., 2019): 12 layers, 12 heads, width "
        "768, 50,257 tokens, 1,024 positions, tied embeddings: 124,439,808 "
        "parameters, as GPT-2's.",
        "Language modelling with a BPE tokenizer, trained on an accelerator.",
    ),
    "gpt_tiny": (
        CausalLM,
        gpt(1, 2, 32, vocabulary=64, max_length=64, dropout=0.0),
        "A 1-layer decoder of width 32 over 64 tokens.",
        "Tests and quick experiments.",
    ),
}


def main():
    for name, (cls, config, description, intended_use) in PRESETS.items():
        model = cls(**config)  # the model classes build in their constructors
        save_preset(
            model,
            ZOO / name,
            description=description,
            intended_use=intended_use,
            training_data=UNTRAINED,
            training_command="python tools/make_architecture_presets.py",
            save_weights=False,
            overwrite=True,
            verify=False,
        )
        print(f"{name}: {model.count_params():,} parameters")
        keras.backend.clear_session()


if __name__ == "__main__":
    main()
