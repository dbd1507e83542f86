"""The OpenAI-compatible routes, as a Starlette application.

Why Starlette (with uvicorn): it is the small, well-maintained ASGI core
that FastAPI itself is built on (Encode's, BSD-licensed, released often),
with streaming responses and lifespan events built in, and nothing more;
FastAPI would add pydantic models whose error JSON is not OpenAI's, which
this server must answer with. uvicorn is the reference ASGI server, and
its shutdown on SIGTERM (stop accepting, wait for open requests) is the
one the issue asks for.

Routes: POST /v1/chat/completions, POST /v1/completions, POST
/v1/embeddings, GET /v1/models, GET /health. A causal LM serves the first
two (chat needs a chat template), a sentence encoder the third.
"""

import asyncio
import base64
import json
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager

import numpy as np
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

from keras_tfm.generation.continuous_batching.scheduler import Scheduler
from keras_tfm.generation.stop_strings import token_bytes
from keras_tfm.models import CausalLM, Seq2SeqLM
from keras_tfm.serving import openai_fields as fields
from keras_tfm.serving.api_errors import ApiError, read_json
from keras_tfm.serving.command import DEFAULT_MAX_BODY_BYTES
from keras_tfm.serving.generation_stream import GenerationStream
from keras_tfm.serving.text_stream import as_text
from keras_tfm.serving.token_logprobs import TokenLogprobs


class Service:
    """The served model and what each route does with it.

    Args:
        model: a `CausalLM` with a tokenizer, or a `SentenceEncoder`.
        model_id: the name clients pass as `model`.
        max_batch: the decoding slots (a causal LM).
        max_length: positions per slot; default the model's, at most 2048.
        steps_per_call: tokens per slot per compiled decode call.
        max_body_bytes: the largest request body accepted.
    """

    def __init__(
        self, model, model_id, max_batch=8, max_length=None, steps_per_call=1,
        max_body_bytes=DEFAULT_MAX_BODY_BYTES,
    ):  # fmt: skip
        self.model = model
        self.model_id = model_id
        self.max_body_bytes = max_body_bytes
        self.created = int(time.time())
        if isinstance(model, Seq2SeqLM):
            raise ValueError(
                "`keras-tfm serve` does not serve sequence-to-sequence models "
                "(a translator, a summariser): its continuous batch holds "
                "decoder-only key/value caches, with no per-slot encoder "
                "context. Call the model's `generate` directly. Received: a "
                f"{type(model).__name__}"
            )
        self.generates = isinstance(model, CausalLM)
        self._pieces = None  # each token's bytes, for logprobs (on first use)
        tokenizer = getattr(model, "tokenizer", None)
        if tokenizer is None:
            raise ValueError(
                "`keras-tfm serve` needs a model with a tokenizer attached. "
                f"Received: a {type(model).__name__} without one"
            )
        self.tokenizer = tokenizer
        self.chats = callable(getattr(tokenizer, "apply_chat_template", None))
        self.scheduler = None
        self.encoder_thread = None
        if self.generates:
            self.scheduler = Scheduler(model, max_batch, max_length, steps_per_call)
        elif callable(getattr(model, "encode", None)):
            # One thread owns the model, as the scheduler's does.
            self.encoder_thread = ThreadPoolExecutor(1, "keras-tfm-encoder")
        else:
            raise ValueError(
                "`keras-tfm serve` serves a CausalLM (chat and completions) or "
                f"a SentenceEncoder (embeddings). Received: {type(model).__name__}"
            )

    # === Lifespan ===

    def start(self):
        if self.scheduler is not None:
            self.scheduler.start()

    def stop(self):
        if self.scheduler is not None:
            self.scheduler.stop()
        if self.encoder_thread is not None:
            self.encoder_thread.shutdown()

    # === Routes ===

    async def health(self, request):
        error = self.scheduler is not None and self.scheduler.error
        body = {"status": "error" if error else "ok", "model": self.model_id}
        if self.scheduler is not None:
            body["busy"] = self.scheduler.busy()
        return JSONResponse(body, status_code=500 if error else 200)

    async def models(self, request):
        card = {
            "id": self.model_id,
            "object": "model",
            "created": self.created,
            "owned_by": "keras-tfm",
        }
        return JSONResponse({"object": "list", "data": [card]})

    async def chat_completions(self, request):
        body = await read_json(request, self.max_body_bytes)
        fields.check_fields(body, fields.CHAT_FIELDS, self.model_id)
        self._require(self.chats, "/v1/chat/completions", "a chat template")
        messages = fields.chat_messages(body)
        settings = fields.sampling_settings(body)
        text = self.tokenizer.apply_chat_template(messages)
        prompt = [int(i) for i in self.tokenizer(text)]
        limit = fields.max_tokens(
            body, len(prompt), self.scheduler.max_length,
            ("max_completion_tokens", "max_tokens"),
        )  # fmt: skip
        return await self._answer(request, prompt, limit, settings, chat=True)

    async def completions(self, request):
        body = await read_json(request, self.max_body_bytes)
        fields.check_fields(body, fields.COMPLETION_FIELDS, self.model_id)
        self._require(self.generates, "/v1/completions", "a causal LM")
        text = fields.completion_prompt(body)
        settings = fields.sampling_settings(body, chat=False)
        prompt = [
            int(i) for i in self.model.preprocessor.generate_preprocess([text])[0]
        ]
        if body.get("max_tokens") is None:  # OpenAI's default for completions
            body = dict(
                body, max_tokens=min(16, self.scheduler.max_length - len(prompt))
            )
        limit = fields.max_tokens(body, len(prompt), self.scheduler.max_length)
        return await self._answer(request, prompt, limit, settings, chat=False)

    async def embeddings(self, request):
        body = await read_json(request, self.max_body_bytes)
        fields.check_fields(body, fields.EMBEDDING_FIELDS, self.model_id)
        self._require(
            self.encoder_thread is not None, "/v1/embeddings", "a sentence encoder"
        )
        texts, encoding = fields.embedding_inputs(body)
        loop = asyncio.get_running_loop()
        try:
            vectors = await loop.run_in_executor(
                self.encoder_thread, self.model.encode, texts
            )
        except ValueError as error:
            raise ApiError(400, str(error), param="input") from None
        packed = self.model.preprocessor.pack_texts(texts, trim=False)
        tokens = int(np.sum(packed["padding_mask"]))  # [CLS] and [SEP] included
        data = [
            {"object": "embedding", "index": i, "embedding": _encode(v, encoding)}
            for i, v in enumerate(np.asarray(vectors, "float32"))
        ]
        usage = {"prompt_tokens": tokens, "total_tokens": tokens}
        return JSONResponse(
            {"object": "list", "data": data, "model": self.model_id, "usage": usage}
        )

    # === Generation ===

    def _require(self, ok, route, what):
        if not ok:
            raise ApiError(
                400,
                f"{route} needs {what}; the model {self.model_id!r} is a "
                f"{type(self.model).__name__}.",
                param="model",
                code="unsupported_route",
            )

    def _detokenize(self, ids):
        return as_text(self.tokenizer.detokenize(ids))

    def _logprobs_format(self, settings, chat):
        """A `TokenLogprobs` for one answer, or None when not asked for."""
        if not settings["logprobs"]:
            return None
        if self._pieces is None:
            size = self.model.backbone.vocabulary_size
            self._pieces = token_bytes(self.tokenizer, size)
        return TokenLogprobs(self._pieces, chat, settings["top_logprobs"])

    async def _answer(self, request, prompt, max_tokens, settings, chat):
        stream = GenerationStream(
            self.scheduler, prompt, max_tokens, self.model.preprocessor.end_token_id,
            self._detokenize, settings,
        )  # fmt: skip
        stream.submit()
        meta = {
            "id": ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex,
            "object": "chat.completion" if chat else "text_completion",
            "created": int(time.time()),
            "model": self.model_id,
        }
        logprobs = self._logprobs_format(settings, chat)
        if settings["stream"]:
            events = _events(
                stream, meta, len(prompt), chat, settings["include_usage"], logprobs
            )
            return StreamingResponse(
                events, media_type="text/event-stream",
                headers={"Cache-Control": "no-cache"},
            )  # fmt: skip
        text = "".join([delta async for delta in stream.deltas()])
        choice = {"index": 0, "finish_reason": stream.finish_reason, "logprobs": None}
        if logprobs is not None:
            choice["logprobs"] = logprobs(stream.take_logprobs())
        if chat:
            choice["message"] = {"role": "assistant", "content": text}
        else:
            choice["text"] = text
        usage = _usage(len(prompt), stream.completion_tokens)
        return JSONResponse(dict(meta, choices=[choice], usage=usage))


def _usage(prompt_tokens, completion_tokens):
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def _encode(vector, encoding):
    if encoding == "base64":  # little-endian float32, as OpenAI sends
        return base64.b64encode(vector.astype("<f4").tobytes()).decode("ascii")
    return vector.tolist()


async def _events(stream, meta, prompt_tokens, chat, include_usage, logprobs):
    """Server-sent events: one chunk per delta (with its tokens' logprobs
    when `logprobs` formats them), the finish, then [DONE]."""
    meta = dict(meta, object=meta["object"] + ".chunk" if chat else meta["object"])

    def chunk(delta, finish_reason=None):
        choice = {"index": 0, "finish_reason": finish_reason, "logprobs": None}
        pairs = stream.take_logprobs()
        if logprobs is not None and pairs:
            choice["logprobs"] = logprobs(pairs)
        if chat:
            choice["delta"] = {"content": delta} if delta is not None else {}
        else:
            choice["text"] = delta or ""
        return _sse(dict(meta, choices=[choice]))

    if chat:
        first = {"index": 0, "delta": {"role": "assistant", "content": ""},
                 "finish_reason": None, "logprobs": None}  # fmt: skip
        yield _sse(dict(meta, choices=[first]))
    try:
        async for delta in stream.deltas():
            yield chunk(delta)
    except ApiError as error:
        yield _sse({"error": {"message": error.message, "type": "server_error"}})
        return
    yield chunk(None, stream.finish_reason)
    if include_usage:
        usage = _usage(prompt_tokens, stream.completion_tokens)
        yield _sse(dict(meta, choices=[], usage=usage))
    yield "data: [DONE]\n\n"


def _sse(payload):
    return f"data: {json.dumps(payload)}\n\n"


async def _api_error(request, error):
    return error.response()


async def _http_error(request, error):
    return ApiError(error.status_code, f"{error.detail}: {request.url.path}").response()


def build_app(service):
    """The Starlette application of a `Service`, with its lifespan."""

    @asynccontextmanager
    async def lifespan(app):
        service.start()
        try:
            yield
        finally:
            await asyncio.get_running_loop().run_in_executor(None, service.stop)

    routes = [
        Route("/v1/chat/completions", service.chat_completions, methods=["POST"]),
        Route("/v1/completions", service.completions, methods=["POST"]),
        Route("/v1/embeddings", service.embeddings, methods=["POST"]),
        Route("/v1/models", service.models, methods=["GET"]),
        Route("/health", service.health, methods=["GET"]),
    ]
    return Starlette(
        routes=routes,
        lifespan=lifespan,
        exception_handlers={ApiError: _api_error, HTTPException: _http_error},
    )
