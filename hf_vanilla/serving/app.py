"""The HTTP service: the Hugging Face Inference API's translation task over one saved model, on FastAPI.

POST / takes {"inputs": text or [texts], "parameters": {...}, "options": {...}} and answers
[{"translation_text": ...}, ...], one a text, in order, as a Hub translation model answers, so that
`huggingface_hub.InferenceClient(model="http://HOST:PORT").translation(...)` works unchanged. GET / is the
page for a browser; POST /attention gives one translation with the cross-attention behind it, from the
serving engine or, where it gives none, from the reference model loaded beside it on first use. Every error,
whoever raises it, is {"error": one line} with the status saying whose fault it is: 400 a malformed
request, 413 / 422 a request over the server's limits, 503 (with Retry-After) a full queue or a model still
loading, 500 the server's own failure (never the client's input).
A body is refused once it passes the byte limit, before it is all read. The routes read what they share from
the app's state (`Service`).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response
from huggingface_hub import ModelCard
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, field_validator
from pydantic_core import PydanticCustomError
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from transformers import PretrainedConfig

from hf_vanilla.checkpoints.loading import decoding_for, load_config
from hf_vanilla.model.configuration_vanilla import VanillaTransformerConfig
from hf_vanilla.model.decoding import (
    PAPER_GENERATION_KWARGS,
    DecodingOptions,
    max_new_tokens_room,
    resolve_decoding,
)
from hf_vanilla.model.hub import checkpoint_card
from hf_vanilla.serving.attention import AttentionModel, AttentionQuery, attention_settings
from hf_vanilla.serving.batching import DEFAULT_BATCHING, Batcher, QueueFull, RequestRefused
from hf_vanilla.serving.page import PageSettings, page_html
from hf_vanilla.serving.policy import BatchingSettings
from hf_vanilla.translation.decoding import unencodable_character
from hf_vanilla.translation.engines import DEFAULT_ENGINE, EngineSettings, load_engine

logger = logging.getLogger(__name__)
RETRY_AFTER_SECONDS = "1"
CLIENT_CLOSED_REQUEST = 499  # nginx's status for a client that left before its answer
# Beyond this a length penalty only ever picks the longest (or shortest) hypothesis, and length**penalty
# overflows a float long before 1e308.
MAX_LENGTH_PENALTY = 10.0
# The bytes a character may take in a JSON body (a character outside the BMP written as two \uXXXX escapes),
# those of each sentence's quotes and comma, and the room for the rest of the request (its parameters).
JSON_BYTES_PER_CHARACTER, JSON_BYTES_PER_SENTENCE, JSON_BYTES_AROUND = 12, 3, 4096


@dataclass(frozen=True)
class RequestLimits:
    """What one request may ask: sentences, characters (all its sentences together), beams, new tokens
    (None: as many as the decoder has positions for), and the source tokens of a sentence whose attention it
    asks (the answer grows with their square)."""

    max_sentences: int = 64
    max_characters: int = 20_000
    max_beams: int = 8
    max_new_tokens: int | None = None
    max_attention_tokens: int = 128

    @property
    def max_body_bytes(self) -> int:
        """The largest body a request within the limits can take, however its text is escaped: a larger one is
        refused (413) before it is read."""
        return (
            JSON_BYTES_PER_CHARACTER * self.max_characters
            + JSON_BYTES_PER_SENTENCE * self.max_sentences
            + JSON_BYTES_AROUND
        )


class GenerateParameters(BaseModel):
    """The decoding options a request may choose; the checkpoint's generation_config.json gives the others."""

    model_config = ConfigDict(extra="forbid")
    num_beams: StrictInt | None = Field(None, ge=1, description="beam size; 1: greedy")
    length_penalty: float | None = Field(
        None,
        ge=-MAX_LENGTH_PENALTY,
        le=MAX_LENGTH_PENALTY,
        allow_inf_nan=False,
        description="beam search ranks by log p / length**this",
    )
    max_new_tokens: StrictInt | None = Field(
        None, ge=1, description="output limit (default: each sentence its source length + 50)"
    )


class TranslationParameters(BaseModel):
    """The Inference API's translation parameters (huggingface_hub's `TranslationParameters`)."""

    model_config = ConfigDict(extra="forbid")
    src_lang: str | None = Field(None, description="the source language: must be the model's own")
    tgt_lang: str | None = Field(None, description="the target language: must be the model's own")
    clean_up_tokenization_spaces: StrictBool | None = Field(
        None, description="remove the spaces tokenization leaves before punctuation (transformers' clean-up)"
    )
    truncation: Literal["do_not_truncate", "longest_first", "only_first", "only_second"] | None = Field(
        None,
        description="a source longer than the model's positions: cut to its first tokens (the default, "
        "longest_first or only_first) or refused with 422 (do_not_truncate); only_second cuts nothing here",
    )
    generate_parameters: GenerateParameters | None = None


class InferenceOptions(BaseModel):
    """The Inference API's request options: there is no cache to use, and a request waits for the model to
    load with wait_for_model (else it is answered 503 while the model loads)."""

    model_config = ConfigDict(extra="forbid")
    use_cache: StrictBool | None = None
    wait_for_model: StrictBool | None = None


class TranslationRequest(BaseModel):
    """The Inference API's translation payload."""

    model_config = ConfigDict(extra="forbid")
    inputs: str | list[str] = Field(description="a text, or a list of texts translated each on its own")
    parameters: TranslationParameters | None = None
    options: InferenceOptions | None = None

    @field_validator("inputs", mode="before")
    @classmethod
    def _text_or_texts(cls, value):
        texts = isinstance(value, list) and all(isinstance(text, str) for text in value)
        if not (isinstance(value, str) or texts):
            raise PydanticCustomError("text_or_texts", "must be a string or a list of strings")
        for index, text in enumerate([value] if isinstance(value, str) else value):
            check_unicode(text, "inputs" if isinstance(value, str) else f"inputs[{index}]")
        return value


def check_unicode(text: str, where: str) -> None:
    """A validation error for a text holding a lone surrogate, named by `where`."""
    if (position := unencodable_character(text)) is not None:
        raise PydanticCustomError(
            "unicode",
            f"{where} holds a lone surrogate ({text[position]!a}) at character {position}, which is no "
            "Unicode text: send the text as UTF-8, or pair the surrogate",
        )


class TranslationOutput(BaseModel):
    translation_text: str


class AttentionParameters(BaseModel):
    """How POST /attention decodes its sentence, as POST / would, and whether it answers each head's
    weights."""

    model_config = ConfigDict(extra="forbid")
    generate_parameters: GenerateParameters | None = None
    heads: StrictBool = Field(False, description="each head's weights too (cross_attention_heads)")


class AttentionRequest(BaseModel):
    """One sentence, whose translation and cross-attention are wanted."""

    model_config = ConfigDict(extra="forbid")
    inputs: str = Field(description="one text, translated as POST / translates it")
    parameters: AttentionParameters | None = None

    @field_validator("inputs")
    @classmethod
    def _nonblank_unicode(cls, value: str) -> str:
        if not value.strip():
            raise PydanticCustomError("blank", "the sentence is blank: send one to translate")
        check_unicode(value, "inputs")
        return value


class AttentionOutput(BaseModel):
    """The translation and the cross-attention behind it: rows the output tokens (each the token its row
    predicts), columns the source tokens; each row of each head sums to 1."""

    translation_text: str
    source_tokens: list[str]
    output_tokens: list[str]
    num_heads: int = Field(description="the heads of each layer")
    cross_attention: list[list[list[float]]] = Field(
        description="layer, output token, source token: heads' mean"
    )
    cross_attention_heads: list[list[list[list[float]]]] | None = Field(
        None, description="layer, head, output token, source token: with parameters.heads"
    )
    translation_engine: str = Field(description="the engine that translated: the one serving POST /")
    attention_engine: str = Field(
        description="the engine that gave the weights: the serving one, or the reference loaded beside it"
    )


def error(status: int, message: str, **headers: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers=headers or None)


def validation_message(err: RequestValidationError) -> str:
    """One line for a request that does not parse: where the first problem is, and what it is."""
    first = err.errors()[0]
    if first["type"] == "json_invalid":
        return f"malformed JSON: {first.get('ctx', {}).get('error', first['msg'])}"
    if first["type"] == "unicode":
        return first["msg"]
    where = ".".join(str(part) for part in first["loc"][1:]) or "body"
    return f"{where}: {first['msg']}"


def http_error_message(err: HTTPException) -> str:
    """One line for an error FastAPI or Starlette raised, naming the cause where the body would not parse."""
    cause = err.__cause__
    if isinstance(cause, RecursionError):
        return "malformed JSON: nested too deeply"
    if isinstance(cause, UnicodeDecodeError):
        return f"malformed JSON: the body is not UTF-8 ({cause.reason} at byte {cause.start})"
    return " ".join(str(err.detail).split())


class BodyTooLarge(HTTPException):
    def __init__(self, max_bytes: int):
        super().__init__(
            413,
            f"the request body is over this server's {max_bytes} bytes "
            "(from --request-max-characters and --request-max-sentences)",
        )


class BodyLimit:
    """ASGI middleware that refuses a request body over `max_bytes` (413) before it is read into memory: on
    its Content-Length alone, or as soon as the bytes received pass the limit; the rest is never read."""

    def __init__(self, app: ASGIApp, max_bytes: int):
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = Headers(scope=scope).get("content-length", "")
        if declared.isdigit() and int(declared) > self.max_bytes:
            refused = BodyTooLarge(self.max_bytes)
            return await error(refused.status_code, refused.detail, Connection="close")(scope, receive, send)
        received = 0

        async def counted() -> Message:
            nonlocal received
            message = await receive()
            received += len(message.get("body", b""))
            if received > self.max_bytes:
                raise BodyTooLarge(self.max_bytes)  # FastAPI lets an HTTPException out of reading a body
            return message

        await self.app(scope, counted, send)


def model_pair(config: PretrainedConfig) -> tuple[str, str] | None:
    """The languages the checkpoint of `config` translates from and to, as its model card's metadata names
    them, if it does."""
    card = checkpoint_card(config) if config.model_type == VanillaTransformerConfig.model_type else None
    try:
        languages = ModelCard.load(card).data.language if card else None
    except Exception:  # a card that does not parse: the pair is unknown and any pair a client names goes
        return None
    return tuple(languages) if isinstance(languages, list) and len(languages) == 2 else None


def check_pair(parameters: TranslationParameters, pair: tuple[str, str] | None) -> None:
    """RequestRefused (422) for a src_lang or tgt_lang that is not the model's own."""
    if pair is None:
        return
    asked_own_names = ((parameters.src_lang, pair[0], "src_lang"), (parameters.tgt_lang, pair[1], "tgt_lang"))
    for asked, own, name in asked_own_names:
        if asked is not None and asked != own:
            raise RequestRefused(
                422, f"{name} {asked!r}: this server translates {pair[0]} -> {pair[1]} only"
            )


def server_options(checkpoint: str | os.PathLike, cache_implementation: str | None = None) -> DecodingOptions:
    """The options a request without generate_parameters decodes with: the checkpoint's beam size, length
    penalty and output limit, else the paper's (`resolve_decoding`, logged); each batch is one `generate`
    call within the batching budget (`Batcher`)."""
    return decoding_for(checkpoint, DecodingOptions(cache_implementation=cache_implementation))[0]


def request_options(
    base: DecodingOptions, chosen: GenerateParameters | None, limits: RequestLimits, room: int
) -> DecodingOptions:
    """`base` with the request's choices over it, as the engine resolves them (`resolve_decoding`:
    greedy search takes no length penalty); RequestRefused (422) for beams or new tokens over the limits."""
    settings = chosen.model_dump(exclude_none=True) if chosen else {}
    num_beams = settings.get("num_beams", base.num_beams)
    if num_beams > limits.max_beams:
        raise RequestRefused(
            422,
            f"num_beams {num_beams} is over this server's limit of {limits.max_beams} (--request-max-beams)",
        )
    most_new_tokens = min(limits.max_new_tokens or room, room)
    if settings.get("max_new_tokens", 0) > most_new_tokens:
        raise RequestRefused(
            422,
            f"max_new_tokens {settings['max_new_tokens']} is over this server's limit of {most_new_tokens} "
            "(--request-max-new-tokens)",
        )
    # `base` holds the checkpoint's values already; resolved here, requests that decode alike batch together.
    return resolve_decoding(None, base.replace(**settings))[0]


def check_request_size(texts: list[str], limits: RequestLimits) -> None:
    """RequestRefused (413) for more sentences or characters than one request may send."""
    if len(texts) > limits.max_sentences:
        raise RequestRefused(
            413,
            f"{len(texts)} sentences in one request, this server takes at most {limits.max_sentences} "
            "(--request-max-sentences)",
        )
    characters = sum(map(len, texts))
    if characters > limits.max_characters:
        raise RequestRefused(
            413,
            f"{characters} characters in one request, this server takes at most {limits.max_characters} "
            "(--request-max-characters)",
        )


async def _client_gone(request: Request) -> None:
    """Returns when the client disconnects (the body is read: the next message is the disconnect)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def worker_answer(
    batcher: Batcher, request: Request, submit: Callable[[], Any]
) -> Response | list[Any]:
    """What the worker answers for the work `submit` queues (after the request's checks, which raise
    RequestRefused), or the error Response: the refusal, a full queue, the work's failure, or 499 once the
    client has left (its work is dropped if the worker has not taken it yet)."""
    try:
        queued = submit()
    except RequestRefused as err:
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
        return error(failed.status, str(failed))
    return queued.future.result()


@dataclass(frozen=True)
class Service:
    """What the routes share, kept in the app's state: the batcher, the options a request without
    generate_parameters decodes with, the request limits, the decoder's room for new tokens, the language
    pair of the model (if its card names one), the page, and the model that weighs translations for
    POST /attention where the serving engine gives no attention."""

    batcher: Batcher
    base: DecodingOptions
    limits: RequestLimits
    room: int
    pair: tuple[str, str] | None
    page: str
    attention_model: AttentionModel


def _service(request: Request) -> Service:
    return request.app.state.service


ServiceDependency = Annotated[Service, Depends(_service)]
router = APIRouter()


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    batcher = app.state.batcher
    batcher.start()
    yield
    # uvicorn has answered every accepted request by now: the worker ends with an empty queue.
    await asyncio.to_thread(batcher.stop)


def not_ready(batcher: Batcher) -> JSONResponse:
    if batcher.failure:
        return error(500, batcher.failure)
    return error(503, "the model is loading", **{"Retry-After": RETRY_AFTER_SECONDS})


async def malformed(request: Request, err: RequestValidationError) -> JSONResponse:
    return error(400, validation_message(err))


async def http_error(request: Request, err: HTTPException) -> JSONResponse:
    return error(err.status_code, http_error_message(err), **(err.headers or {}))


async def internal_error(request: Request, err: Exception) -> JSONResponse:
    logger.error("an unexpected error answering %s %s", request.method, request.url.path, exc_info=err)
    return error(500, f"internal error: {type(err).__name__}: {err}")


@router.post("/", response_model=list[TranslationOutput])
async def translate(
    body: TranslationRequest, request: Request, service: ServiceDependency
) -> Response | list[TranslationOutput]:
    """Translate `inputs` (one text or a list), with the request's generate_parameters over the server's."""
    batcher = service.batcher
    if body.options and body.options.wait_for_model and not batcher.failure:
        await asyncio.to_thread(batcher.wait_until_loaded)
    if not batcher.ready.is_set() or batcher.failure:
        return not_ready(batcher)
    texts = [body.inputs] if isinstance(body.inputs, str) else body.inputs
    parameters = body.parameters or TranslationParameters()

    def submit():
        check_request_size(texts, service.limits)
        check_pair(parameters, service.pair)
        options = request_options(service.base, parameters.generate_parameters, service.limits, service.room)
        options = options.replace(clean_up_tokenization_spaces=bool(parameters.clean_up_tokenization_spaces))
        return batcher.submit(texts, options, may_cut=parameters.truncation != "do_not_truncate")

    answer = await worker_answer(batcher, request, submit)
    if isinstance(answer, Response):
        return answer
    return [TranslationOutput(translation_text=text) for text in answer]


@router.post("/attention", response_model=AttentionOutput, response_model_exclude_none=True)
async def attention(
    body: AttentionRequest, request: Request, service: ServiceDependency
) -> Response | AttentionOutput:
    """Translate one sentence as POST / would, and give the cross-attention behind that translation: the
    worker decodes it alone, between two batches."""
    batcher, limits = service.batcher, service.limits
    if not batcher.ready.is_set() or batcher.failure:
        return not_ready(batcher)
    parameters = body.parameters or AttentionParameters()

    def submit():
        check_request_size([body.inputs], limits)
        options = request_options(service.base, parameters.generate_parameters, limits, service.room)
        query = AttentionQuery(
            body.inputs, options, parameters.heads, limits.max_attention_tokens, service.attention_model
        )
        return batcher.submit_job(query)

    answer = await worker_answer(batcher, request, submit)
    return answer if isinstance(answer, Response) else AttentionOutput(**answer[0])


@router.get("/", include_in_schema=False)
async def translation_page(service: ServiceDependency) -> HTMLResponse:
    """The translation page, for a browser."""
    return HTMLResponse(service.page)


@router.get("/health")
async def health(service: ServiceDependency) -> Response:
    """Alive: 200 while the process can answer (also while the model loads), 500 once the model failed to
    load or the worker stopped (the process then exits, for its supervisor to restart it)."""
    failure = service.batcher.failure
    return error(500, failure) if failure else JSONResponse({"status": "ok"})


@router.get("/ready")
async def ready(service: ServiceDependency) -> Response:
    """Ready for requests: 200 once the model is loaded and has translated one sentence, 503 before."""
    batcher = service.batcher
    return JSONResponse({"status": "ready"}) if batcher.ready.is_set() else not_ready(batcher)


@router.get("/stats")
async def stats(service: ServiceDependency) -> dict[str, int]:
    """Batches decoded, sentences, the largest batch, sentences refused for a full queue, sentences
    waiting."""
    return {**asdict(service.batcher.stats), "queued": service.batcher.queued}


def service_page(base: DecodingOptions, limits: RequestLimits, pair: tuple[str, str] | None) -> str:
    """The translation page, its controls starting at the server's decoding options and bounded by the
    limits."""
    limits_shown = (limits.max_beams, MAX_LENGTH_PENALTY, limits.max_characters)
    # Greedy by default: the page's penalty control starts where a beam search request's would.
    penalty = base.length_penalty
    penalty = PAPER_GENERATION_KWARGS["length_penalty"] if penalty is None else penalty
    return page_html(PageSettings(base.num_beams, penalty, *limits_shown, pair))


def create_app(
    checkpoint: str | os.PathLike,
    engine: EngineSettings = DEFAULT_ENGINE,
    batching: BatchingSettings = DEFAULT_BATCHING,
    limits: RequestLimits = RequestLimits(),
    cache_implementation: str | None = None,
) -> FastAPI:
    """The service for a saved model directory, decoding on `engine`: the model loads (for the ctranslate2
    engine, converted on first use) on the worker thread once the server runs."""
    if limits.max_sentences > batching.max_queued_sentences:
        raise ValueError(
            f"--request-max-sentences {limits.max_sentences} is more than the queue holds "
            f"({batching.max_queued_sentences}): such a request could never be taken"
        )
    base = server_options(checkpoint, cache_implementation)
    config = load_config(checkpoint)
    room, pair = max_new_tokens_room(config), model_pair(config)
    batcher = Batcher(lambda: load_engine(checkpoint, engine), base, batching)
    app = FastAPI(title="hf_vanilla translation", summary=f"Translation with {checkpoint}", lifespan=lifespan)
    app.add_middleware(BodyLimit, max_bytes=limits.max_body_bytes)
    app.state.batcher = batcher
    attention_model = AttentionModel(lambda: load_engine(checkpoint, attention_settings(engine)))
    page = service_page(base, limits, pair)
    app.state.service = Service(batcher, base, limits, room, pair, page, attention_model)
    app.add_exception_handler(RequestValidationError, malformed)
    app.add_exception_handler(HTTPException, http_error)
    app.add_exception_handler(Exception, internal_error)
    app.include_router(router)
    return app
