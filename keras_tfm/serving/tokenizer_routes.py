"""vLLM's tokenizer routes: POST /tokenize, POST /detokenize, GET
/tokenizer_info.

lm-evaluation-harness's `local-completions` model needs the served
model's tokenizer to split a multiple-choice prompt into context and
continuation; with these routes it uses the server's own (its "remote"
tokenizer backend, chosen by itself when they answer), so no Hugging Face
tokenizer need be downloaded or match. The shapes are vLLM's:

    POST /tokenize {"prompt": "...", "add_special_tokens": false}
      -> {"tokens": [...], "count": n, "max_model_len": ...}
    POST /detokenize {"tokens": [...]} -> {"prompt": "..."}
    GET /tokenizer_info -> {"eos_token", "bos_token", "pad_token",
                            "chat_template", "model_max_length"}

A text is tokenized as /v1/completions tokenizes a prompt (the
preprocessor's `generate_preprocess`, which adds no special token, so
`add_special_tokens` changes nothing).
"""

from starlette.responses import JSONResponse

from keras_tfm.serving import openai_fields as fields
from keras_tfm.serving.api_errors import read_json
from keras_tfm.serving.text_stream import as_text

# The most characters one /tokenize request may hold (the body limit bounds
# it too; this keeps the refusal named).
MAX_TEXT_CHARACTERS = 1 << 20


class TokenizerRoutes:
    """The three routes, for a `Service` of a causal LM (an encoder's
    server has none of them).

    Args:
        service: the `keras_tfm.serving.app.Service` whose model's
            tokenizer they use.
    """

    def __init__(self, service):
        self.service = service

    async def tokenize(self, request):
        body = await self._body(request, {"model", "prompt", "add_special_tokens"})
        prompt = body.get("prompt")
        if not isinstance(prompt, str) or len(prompt) > MAX_TEXT_CHARACTERS:
            raise fields.bad(
                "prompt", f"a string of at most {MAX_TEXT_CHARACTERS} characters",
                prompt,
            )  # fmt: skip
        special = body.get("add_special_tokens", False)
        if not isinstance(special, bool):
            raise fields.bad("add_special_tokens", "true or false", special)
        service = self.service
        tokens = []
        if prompt:
            preprocess = service.model.preprocessor.generate_preprocess
            tokens = [int(i) for i in preprocess([prompt])[0]]
        return JSONResponse({
            "tokens": tokens, "count": len(tokens),
            "max_model_len": service.scheduler.max_length,
        })  # fmt: skip

    async def detokenize(self, request):
        body = await self._body(request, {"model", "tokens"})
        tokens = body.get("tokens")
        size = self.service.model.backbone.vocabulary_size
        if not (
            isinstance(tokens, list)
            and all(fields.is_id(t) and 0 <= t < size for t in tokens)
        ):
            raise fields.bad("tokens", f"a list of token ids from 0 to {size - 1}",
                             tokens)  # fmt: skip
        text = as_text(self.service.tokenizer.detokenize(tokens)) if tokens else ""
        return JSONResponse({"prompt": text})

    async def tokenizer_info(self, request):
        tokenizer = self.service.tokenizer
        return JSONResponse({
            "eos_token": getattr(tokenizer, "end_token", None),
            "bos_token": getattr(tokenizer, "start_token", None),
            "pad_token": getattr(tokenizer, "pad_token", None),
            "chat_template": getattr(tokenizer, "chat_template", None),
            "model_max_length": self.service.scheduler.max_length,
        })  # fmt: skip

    async def _body(self, request, allowed):
        body = await read_json(request, self.service.max_body_bytes)
        fields.check_fields(body, allowed, self.service.model_id, require_model=False)
        return body
