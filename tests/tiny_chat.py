"""A one-layer Llama that answers ANSWER to QUESTION under ChatML.

It has SmolLM2's architecture (RMSNorm, rotary positions, SwiGLU, grouped
queries), takes SmolLM2's tokenizer and chat template, and its weights plant
a bigram chain: the token embedding of the i-th token of ("\\n", ANSWER's
tokens, <|im_end|>) is 100 along axis i (the attention and the MLP add
O(1)), and the untied head maps axis i to the next token of the chain. So
greedy decoding from the template's last token ("\\n" after "assistant")
answers ANSWER and ends the turn, in a model that compiles in seconds where
SmolLM2's 30 layers take tens of seconds. SmolLM2's own answer is
transformers' (tests/zoo/test_installed_checkpoints.py).
"""

import numpy as np

from tests.builders import causal_lm

QUESTION = "What is the capital of France?"
ANSWER = "The capital of France is Paris."


def tiny_chat_model(tokenizer):
    """The model, around `tokenizer` (SmolLM2's: `smollm2.preprocessor.tokenizer`)."""
    model = causal_lm(
        vocabulary_size=tokenizer.vocabulary_size(), num_layers=1, num_heads=2,
        num_key_value_heads=1, head_dim=16, hidden_dim=32, intermediate_dim=32,
        max_sequence_length=256, activation="swiglu", normalization="rms_norm",
        position_encoding="rotary", use_bias=False, tokenizer=tokenizer,
        tie_word_embeddings=False,
    )  # fmt: skip
    chain = [*tokenizer("\n"), *tokenizer(ANSWER), tokenizer.end_token_id]
    embeddings = np.asarray(model.backbone.token_embedding.embeddings)
    head = np.asarray(model.lm_head.kernel)
    for axis, (token, following) in enumerate(zip(chain, chain[1:], strict=False)):
        embeddings[int(token)] = 0.0
        embeddings[int(token), axis] = 100.0
        head[axis] = 0.0
        head[axis, int(following)] = 10.0
    model.backbone.token_embedding.embeddings.assign(embeddings)
    model.lm_head.kernel.assign(head)
    return model
