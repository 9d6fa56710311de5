"""Logs, metrics and traces of every handler: one Powertools Logger, Metrics and Tracer.

The service name and the metric namespace come from shardlog/constants.py, the names the
stack's dashboard and alarms read. A handler module takes the three from here::

    from lambdas.observability import logger, metrics, tracer

and wraps its handler with ``instrumented`` (metrics flushed, a trace segment and the Lambda
context in every log line; a fresh metric set per invocation).
"""

from __future__ import annotations

import functools
from typing import Any

from aws_lambda_powertools import Logger, Metrics, Tracer

from lambdas.entry import Handler
from shardlog import constants as C

logger = Logger(service=C.POWERTOOLS_SERVICE_NAME)
metrics = Metrics(namespace=C.METRICS_NAMESPACE, service=C.POWERTOOLS_SERVICE_NAME)
tracer = Tracer(service=C.POWERTOOLS_SERVICE_NAME)


def instrumented(handle: Handler, *, correlation_id_path: str | None = None) -> Handler:
    """``handle`` with Powertools around it: metrics flushed after every invocation (also
    when it raises), the invocation traced (never its response: it may hold user data), and
    the Lambda context, plus the correlation id at ``correlation_id_path``, in every log line.
    """

    @metrics.log_metrics
    @tracer.capture_lambda_handler(capture_response=False)
    @logger.inject_lambda_context(correlation_id_path=correlation_id_path, clear_state=True)
    @functools.wraps(handle)
    def run(event: dict[str, Any], context: Any) -> dict[str, Any]:
        # With POWERTOOLS_METRICS_DISABLED (the local runtime) nothing flushes the metric
        # set, so it would grow across invocations: start each one empty.
        metrics.clear_metrics()
        return handle(event, context)

    return run
