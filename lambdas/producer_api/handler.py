"""Producer API Lambda behind API Gateway (REST, proxy integration).

``POST /v1/records`` puts a batch of records on the stream and answers per record like
Kinesis PutRecords; ``GET /v1/health`` answers liveness. Thin on purpose: refuse a wrong
media type or an oversized body before parsing (checks.py), let Powertools parse and
validate the body against the pydantic models (models.py), check the records against the
Kinesis limits and put them with the SDK Producer (batch.py), and map every outcome to
JSON. Every error has the shape ``{"error", "field", "limit"}``: 400 for bad input, 413
for too large, 415 for a wrong media type, 404/405 for unknown routes and methods,
429/503 with Retry-After when provably nothing was put, 500 when the stream refused the
records, 502 when the outcome of every record is unknown (and when the function failed:
it may have put records first).
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Response, content_types
from aws_lambda_powertools.event_handler.exceptions import NotFoundError
from aws_lambda_powertools.event_handler.openapi.exceptions import RequestValidationError
from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from lambdas.entry import Handler, LazyHandler
from lambdas.observability import instrumented, logger, metrics
from lambdas.producer_api import batch, spec
from lambdas.producer_api.checks import (
    HttpError,
    error_response,
    precheck,
    proxy_response,
    validation_error,
    with_canonical_media_type,
)
from lambdas.producer_api.models import (
    Health,
    PutFailureEntry,
    PutRecordsRequest,
    PutRecordsResponse,
    PutResultEntry,
)
from lambdas.producer_api.spec import DOCS_PATH, OPENAPI_PATH
from shardlog import __version__
from shardlog import constants as C
from shardlog.api_client import HEALTH_PATH, RECORDS_PATH
from shardlog.aws import Clients
from shardlog.clock import Clock
from shardlog.function_settings import ProducerApiSettings
from shardlog.outcomes import Outcome, PutResult
from shardlog.producer import Producer

METRIC_API_REQUESTS = "ApiRequests"
METRIC_API_RECORDS_PUT = "ApiRecordsPut"
METRIC_API_RECORDS_FAILED = "ApiRecordsFailed"


def to_response(outcomes: list[Outcome]) -> PutRecordsResponse:
    records: list[PutResultEntry | PutFailureEntry] = [
        PutResultEntry(shardId=o.shard_id, sequenceNumber=o.sequence_number)
        if isinstance(o, PutResult)
        else PutFailureEntry(errorCode=o.error_code, errorMessage=o.error_message)
        for o in outcomes
    ]
    failed = sum(isinstance(r, PutFailureEntry) for r in records)
    return PutRecordsResponse(failedRecordCount=failed, records=records)


def create_app(
    settings: ProducerApiSettings | None = None,
    clients: Clients | None = None,
    clock: Clock | None = None,
    *,
    producer: Producer | None = None,
    serve_docs: bool = False,
) -> spec.ProducerApiResolver:
    """The resolver with its routes; tests and the local server inject what they need.

    ``producer`` replaces the SDK Producer (tests inject failures at its ``_send``);
    ``serve_docs`` adds Swagger UI at /docs and the document at /openapi.json.
    """
    settings = settings or ProducerApiSettings.from_env()
    producer = producer or Producer(
        settings.stream_name,
        clients or Clients(),
        max_attempts=settings.max_attempts,
        base_backoff_s=settings.base_backoff_ms / 1000,
        max_backoff_s=settings.max_backoff_ms / 1000,
        clock=clock,
    )
    app = spec.ProducerApiResolver(enable_validation=True)
    spec.configure(app)
    allowed = {RECORDS_PATH: ["POST"], HEALTH_PATH: ["GET"]}

    @app.post(
        RECORDS_PATH,
        summary="Put records on the stream",
        description="Like Kinesis PutRecords: one result per record, in request order.",
        responses=spec.RECORDS_RESPONSES,
        operation_id="putRecords",
        tags=["records"],
    )
    def put_records(request: PutRecordsRequest) -> PutRecordsResponse:
        records = batch.to_producer_records(request)
        outcomes = producer.try_put_records(records)
        response = to_response(outcomes)
        put = len(records) - response.failedRecordCount
        metrics.add_metric(METRIC_API_RECORDS_PUT, MetricUnit.Count, put)
        metrics.add_metric(METRIC_API_RECORDS_FAILED, MetricUnit.Count, response.failedRecordCount)
        refusal = batch.whole_request_error(outcomes, settings.retry_after_s)
        if refusal is not None:
            raise refusal
        if response.failedRecordCount:
            logger.warning("records not put", failed=response.failedRecordCount, put=put)
        return response

    @app.get(
        HEALTH_PATH,
        summary="Liveness",
        responses=spec.HEALTH_RESPONSES,
        operation_id="health",
        tags=["health"],
    )
    def health() -> Health:
        return Health(status="ok", version=__version__)

    if serve_docs:
        app.enable_swagger(path=DOCS_PATH, title=spec.API_TITLE)
        allowed[DOCS_PATH] = ["GET"]
        allowed[OPENAPI_PATH] = ["GET"]

        # No return annotation: Powertools would try to model Response as a body schema.
        @app.get(OPENAPI_PATH, include_in_schema=False)
        def openapi_document():  # type: ignore[no-untyped-def]
            return Response(200, content_types.APPLICATION_JSON, openapi_json(app))

    @app.exception_handler(HttpError)
    def on_api_error(exc: HttpError) -> Response:
        if exc.status >= 500:
            logger.error("request failed", status=exc.status, error=exc.error)
        return error_response(exc)

    @app.exception_handler(RequestValidationError)
    def on_validation_error(exc: RequestValidationError) -> Response:
        return error_response(validation_error(exc))

    # NotImplementedError: what Powertools raises for a body of another media type. Newer
    # versions raise its subclass RequestUnsupportedContentType, which the pinned layer
    # (Powertools 3.23) does not have: importing it failed the function's cold start.
    @app.exception_handler(NotImplementedError)
    def on_media_type(_exc: NotImplementedError) -> Response:
        return error_response(
            HttpError(415, "Content-Type must be application/json", field="Content-Type")
        )

    @app.not_found
    def on_not_found(_exc: NotFoundError) -> Response:
        method = app.current_event.http_method
        path = app.current_event.path
        methods = allowed.get(path)
        if methods is None:
            return error_response(HttpError(404, f"no route {method} {path}", field="path"))
        allow = ", ".join(methods)
        return error_response(
            HttpError(
                405,
                f"{method} is not allowed on {path}; allowed: {allow}",
                field="method",
                headers={"Allow": allow},
            )
        )

    @app.exception_handler(Exception)
    def on_unexpected(exc: Exception) -> Response:
        # It may have come after records went in: the outcome is unknown, never "nothing".
        logger.exception("unexpected error")
        return error_response(
            HttpError(502, f"the function failed ({type(exc).__name__}); the outcome is unknown")
        )

    return app


def openapi_json(app: APIGatewayRestResolver | None = None) -> str:
    """The OpenAPI document (docs/openapi.json holds it; a test keeps the two equal)."""
    if app is None:
        app = create_app(ProducerApiSettings(stream_name=C.DEFAULT_STREAM_NAME), Clients())
    return app.get_openapi_json_schema() + "\n"


def create_handler(
    settings: ProducerApiSettings | None = None,
    clients: Clients | None = None,
    clock: Clock | None = None,
    *,
    producer: Producer | None = None,
    serve_docs: bool = False,
) -> Handler:
    """Build the handler; the local server and tests inject settings, clients and clock."""
    app = create_app(settings, clients, clock, producer=producer, serve_docs=serve_docs)

    def handle(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
        metrics.add_metric(METRIC_API_REQUESTS, MetricUnit.Count, 1)
        refusal = precheck(event)
        if refusal is not None:
            logger.info("request refused before parsing", status=refusal.status)
            return proxy_response(refusal)
        return app.resolve(with_canonical_media_type(event), context)

    return instrumented(handle, correlation_id_path=correlation_paths.API_GATEWAY_REST)


handler = LazyHandler(create_handler)
"""The Lambda entry point."""
