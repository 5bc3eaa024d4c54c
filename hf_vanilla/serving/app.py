"""The HTTP service: the Hugging Face Inference API's translation task over one saved model, on FastAPI.

POST / takes {"inputs": text or [texts], "parameters": {"generate_parameters": {...}}} and answers
[{"translation_text": ...}, ...], one a text, in order, as a Hub translation model answers, so that
`huggingface_hub.InferenceClient(model="http://HOST:PORT").translation(...)` works unchanged. Errors are
{"error": one line} with the status saying whose fault it is: 400 a malformed request, 413 / 422 a request over
the server's limits, 503 (with Retry-After) a full queue or a model still loading.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field, StrictInt, field_validator
from pydantic_core import PydanticCustomError
from transformers import AutoConfig, GenerationConfig

from hf_vanilla.model.decoding import DECODER_PROMPT_LENGTH
from hf_vanilla.translation import DecodingOptions, load_model_and_tokenizer

from .batching import DEFAULT_BATCHING, Batcher, BatchingSettings, QueueFull

RETRY_AFTER_SECONDS = "1"
CLIENT_CLOSED_REQUEST = 499  # nginx's status for a client that left before its answer


@dataclass(frozen=True)
class RequestLimits:
    """What one request may ask: sentences, characters (all its sentences together), beams and new tokens
    (None: as many as the decoder has positions for)."""

    max_sentences: int = 64
    max_characters: int = 20_000
    max_beams: int = 8
    max_new_tokens: int | None = None


class GenerateParameters(BaseModel):
    """The decoding options a request may choose; the checkpoint's generation_config.json gives the others."""

    model_config = ConfigDict(extra="forbid")
    num_beams: StrictInt | None = Field(None, ge=1, description="beam size; 1: greedy")
    length_penalty: float | None = Field(None, description="beam search ranks by log p / length**this")
    max_new_tokens: StrictInt | None = Field(
        None, ge=1, description="output limit (default: each sentence its source length + 50)"
    )


class TranslationParameters(BaseModel):
    model_config = ConfigDict(extra="forbid")
    generate_parameters: GenerateParameters | None = None


class TranslationRequest(BaseModel):
    """The Inference API's translation payload."""

    model_config = ConfigDict(extra="forbid")
    inputs: str | list[str] = Field(description="a text, or a list of texts translated each on its own")
    parameters: TranslationParameters | None = None

    @field_validator("inputs", mode="before")
    @classmethod
    def _text_or_texts(cls, value):
        if isinstance(value, str) or (
            isinstance(value, list) and all(isinstance(text, str) for text in value)
        ):
            return value
        raise PydanticCustomError("text_or_texts", "must be a string or a list of strings")


class TranslationOutput(BaseModel):
    translation_text: str


class OverLimit(Exception):
    """A request over one of the server's limits: its status and the line that names the limit."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def error(status: int, message: str, **headers: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers=headers or None)


def validation_message(err: RequestValidationError) -> str:
    """One line for a request that does not parse: where the first problem is, and what it is."""
    first = err.errors()[0]
    if first["type"] == "json_invalid":
        return f"malformed JSON: {first.get('ctx', {}).get('error', first['msg'])}"
    where = ".".join(str(part) for part in first["loc"][1:]) or "body"
    return f"{where}: {first['msg']}"


def generation_defaults(checkpoint: str | os.PathLike) -> GenerationConfig:
    """The checkpoint's generation_config.json, or the one transformers derives from its config.json."""
    try:
        return GenerationConfig.from_pretrained(checkpoint)
    except OSError:
        return GenerationConfig.from_model_config(AutoConfig.from_pretrained(checkpoint))


def server_options(
    checkpoint: str | os.PathLike, batching: BatchingSettings, cache_implementation: str | None = None
) -> DecodingOptions:
    """The options a request without generate_parameters decodes with: the checkpoint's beam size and length
    penalty, each batch one `generate` call within the batching budget, no progress bar."""
    defaults = generation_defaults(checkpoint)
    return DecodingOptions(
        num_beams=defaults.num_beams,
        length_penalty=defaults.length_penalty if defaults.num_beams > 1 else None,
        cache_implementation=cache_implementation,
        max_tokens=batching.max_tokens,
        show_progress=False,
    )


def request_options(
    base: DecodingOptions, chosen: GenerateParameters | None, limits: RequestLimits, room: int
) -> DecodingOptions:
    """`base` with the request's choices over it; OverLimit (422) for beams or new tokens over the limits.
    Greedy search takes no length penalty (generate would warn about one)."""
    settings = chosen.model_dump(exclude_none=True) if chosen else {}
    num_beams = settings.get("num_beams", base.num_beams)
    if num_beams > limits.max_beams:
        raise OverLimit(
            422, f"num_beams {num_beams} is over this server's limit of {limits.max_beams} (max_beams)"
        )
    most_new_tokens = min(limits.max_new_tokens or room, room)
    if settings.get("max_new_tokens", 0) > most_new_tokens:
        raise OverLimit(
            422,
            f"max_new_tokens {settings['max_new_tokens']} is over this server's limit of {most_new_tokens} "
            "(max_new_tokens)",
        )
    if num_beams > 1:
        settings.setdefault("length_penalty", base.length_penalty)
    else:
        settings["length_penalty"] = None
    return base.replace(**settings)


def check_request_size(texts: list[str], limits: RequestLimits) -> None:
    """OverLimit (413) for more sentences or characters than one request may send."""
    if len(texts) > limits.max_sentences:
        raise OverLimit(
            413,
            f"{len(texts)} sentences in one request, this server takes at most {limits.max_sentences} "
            "(max_sentences)",
        )
    characters = sum(map(len, texts))
    if characters > limits.max_characters:
        raise OverLimit(
            413,
            f"{characters} characters in one request, this server takes at most {limits.max_characters} "
            "(max_characters)",
        )


async def _client_gone(request: Request) -> None:
    """Returns when the client disconnects (the body is read: the next message is the disconnect)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


def create_app(
    checkpoint: str | os.PathLike,
    device: str | None = None,
    dtype: str = "float32",
    batching: BatchingSettings = DEFAULT_BATCHING,
    limits: RequestLimits = RequestLimits(),
    cache_implementation: str | None = None,
) -> FastAPI:
    """The service for a saved model directory: the model loads on the worker thread once the server runs."""
    if limits.max_sentences > batching.max_queued_sentences:
        raise ValueError(
            f"max_sentences {limits.max_sentences} is more than the queue holds ({batching.max_queued_sentences}):"
            " such a request could never be taken"
        )
    base = server_options(checkpoint, batching, cache_implementation)
    room = AutoConfig.from_pretrained(checkpoint).max_position_embeddings - DECODER_PROMPT_LENGTH
    batcher = Batcher(lambda: load_model_and_tokenizer(checkpoint, device, dtype), base, batching)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        batcher.start()
        yield
        # uvicorn has answered every accepted request by now: the worker ends with an empty queue.
        await asyncio.to_thread(batcher.stop)

    def not_ready() -> JSONResponse:
        return error(503, batcher.load_error or "the model is loading", **{"Retry-After": RETRY_AFTER_SECONDS})

    app = FastAPI(title="hf_vanilla translation", summary=f"Translation with {checkpoint}", lifespan=lifespan)
    app.state.batcher = batcher

    @app.exception_handler(RequestValidationError)
    async def malformed(request: Request, err: RequestValidationError) -> JSONResponse:
        return error(400, validation_message(err))

    @app.post("/", response_model=list[TranslationOutput])
    async def translate(body: TranslationRequest, request: Request) -> Response | list[TranslationOutput]:
        """Translate `inputs` (one text or a list), with the request's generate_parameters over the server's."""
        if not batcher.ready.is_set():
            return not_ready()
        texts = [body.inputs] if isinstance(body.inputs, str) else body.inputs
        chosen = body.parameters.generate_parameters if body.parameters else None
        try:
            check_request_size(texts, limits)
            options = request_options(base, chosen, limits, room)
            queued = batcher.submit(texts, options)
        except OverLimit as err:
            return error(err.status, str(err))
        except QueueFull as err:
            return error(503, f"the queue is full: {err}", **{"Retry-After": RETRY_AFTER_SECONDS})
        gone = asyncio.ensure_future(_client_gone(request))
        try:
            await asyncio.wait({queued.future, gone}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
            if not queued.future.done():  # the client left (or the server cancelled this handler)
                batcher.cancel(queued)
        if not queued.future.done():
            return Response(status_code=CLIENT_CLOSED_REQUEST)
        if failed := queued.future.exception():
            return error(500, f"decoding failed: {failed}")
        return [TranslationOutput(translation_text=text) for text in queued.future.result()]

    @app.get("/health")
    async def health() -> Response:
        """Alive: 200 while the process serves (also while the model loads), 500 when the model failed to load."""
        return error(500, batcher.load_error) if batcher.load_error else JSONResponse({"status": "ok"})

    @app.get("/ready")
    async def ready() -> Response:
        """Ready for requests: 200 once the model is loaded and has translated one sentence, 503 before."""
        return JSONResponse({"status": "ready"}) if batcher.ready.is_set() else not_ready()

    @app.get("/stats")
    async def stats() -> dict[str, int]:
        """Batches decoded, sentences, the largest batch, sentences refused for a full queue, sentences waiting."""
        return {**asdict(batcher.stats), "queued": batcher.queued}

    return app
