"""What IAM authorizes for one API call: actions, resource ARNs and the request context.

One API call is one or more authorizations. Besides the call's own action, AWS checks
implicitly (each rule below is one function, named in the report as the reason):

- ``TransactWriteItems`` / ``TransactGetItems``: the per-item actions (``PutItem``,
  ``UpdateItem``, ``DeleteItem``, ``ConditionCheckItem``, ``GetItem``) on each item's table,
  with that item's ``dynamodb:LeadingKeys``; the batch operations are their own actions;
- a GetObject or HeadObject that answered 404: S3 answers 404 only to a caller that may
  ``s3:ListBucket`` the bucket (else 403). The check carries no ``s3:prefix`` (the request
  has none): a prefix-conditioned ListBucket is taken as not enough, the stricter reading;
- a resource encrypted with a customer managed key: ``kms:Decrypt`` to read it and
  ``kms:GenerateDataKey`` to write it (SQS and SNS sends need both), as the caller, through
  the service (``kms:ViaService``), allowed by the key policy and the caller's policies:
  S3 objects, DynamoDB tables (every item request, and the table's stream), Kinesis
  records, SQS messages, SNS messages;
- ``PutObjectTagging``: ``s3:PutObjectTagging`` (``...VersionTagging`` with a version id),
  and no KMS: a tag is the object's metadata, not its data;
- ``StartJobRun``: ``iam:PassRole`` of the execution role to EMR Serverless;
- Glue: a table request is authorized on the catalog, the database and the table.

Every request carries ``aws:SecureTransport`` = true (every AWS SDK speaks HTTPS to AWS; only
the embedded AWS is plain HTTP), ``s3:TlsVersion`` = 1.2 on S3, ``aws:PrincipalArn`` and
``aws:PrincipalAccount``. An operation missing from ``_TRANSLATORS`` raises: a call the
replay does not understand is never taken as allowed.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlparse

from tests.support.iam.calls import Call
from tests.support.iam.deployment import Deployment
from tests.support.iam.policy import ContextValue


class UnknownOperation(ValueError):
    """A call the replay has no IAM mapping for."""


@dataclass(frozen=True)
class Need:
    """One authorization a call needs."""

    action: str
    resource: str
    context: dict[str, ContextValue] = field(default_factory=dict)
    why: str = ""  # empty: the call's own action; else the implicit rule
    key_policy: bool = False  # a KMS key: the key policy must allow too


@dataclass(frozen=True)
class Scope:
    """What the translators need besides the call."""

    deployment: Deployment
    principal_arn: str

    @property
    def account(self) -> str:
        return self.deployment.account


def needs(call: Call, scope: Scope) -> list[Need]:
    translate = _TRANSLATORS.get((call.service, call.operation))
    if translate is None:
        raise UnknownOperation(
            f"{call.name} has no IAM mapping in tests/support/iam/authorize.py: add what AWS "
            "authorizes for it"
        )
    base = {
        "aws:SecureTransport": "true",
        "aws:PrincipalArn": scope.principal_arn,
        "aws:PrincipalAccount": scope.account,
        "aws:RequestedRegion": call.region,
    }
    found = []
    for need in translate(call, scope):
        context = {**base, **need.context}
        if need.action.startswith("s3:"):
            context.setdefault("s3:TlsVersion", "1.2")
        found.append(Need(need.action, need.resource, context, need.why, need.key_policy))
    return found


# --- KMS ----------------------------------------------------------------------------------
def _kms(
    scope: Scope,
    resource: str,
    actions: tuple[str, ...],
    service: str,
    encryption_context: dict[str, str],
) -> Iterator[Need]:
    """The key's actions a request on ``resource`` needs, when a customer managed key
    encrypts it (``encryption_context``: what the service puts there)."""
    key = scope.deployment.key_for(resource)
    if key is None:
        return
    region = scope.deployment.region
    context: dict[str, ContextValue] = {
        "kms:ViaService": f"{service}.{region}.amazonaws.com",
        "kms:CallerAccount": scope.account,
        **{f"kms:EncryptionContext:{k}": v for k, v in encryption_context.items()},
    }
    for action in actions:
        yield Need(
            action,
            key,
            context,
            why=f"{resource} is encrypted with a customer managed key",
            key_policy=True,
        )


DECRYPT = ("kms:Decrypt",)
GENERATE = ("kms:GenerateDataKey",)
SEND = ("kms:GenerateDataKey", "kms:Decrypt")


# --- DynamoDB -----------------------------------------------------------------------------
def _dynamodb_kms(scope: Scope, table: str) -> Iterator[Need]:
    """Every item request of a table under a customer managed key (and its stream's reads)
    needs kms:Decrypt of the table's key, as the caller."""
    name = table.split("/", 1)[1]
    context = {"aws:dynamodb:tableName": name, "aws:dynamodb:subscriberId": scope.account}
    yield from _kms(scope, table, DECRYPT, "dynamodb", context)


def _table(scope: Scope, name: str) -> str:
    return scope.deployment.arn("dynamodb", f"table/{name}")


def _key_value(value: dict[str, Any]) -> str:
    (kind, text), *_ = value.items()
    return str(text) if kind in ("S", "N") else base64.b64encode(str(text).encode()).decode()


def _leading_keys(scope: Scope, table: str, *items: dict[str, Any]) -> dict[str, ContextValue]:
    hash_key = scope.deployment.hash_key(table)
    if hash_key is None:
        return {}
    values = sorted({_key_value(item[hash_key]) for item in items if hash_key in item})
    return {"dynamodb:LeadingKeys": values} if values else {}


def _item_need(scope: Scope, action: str, table_name: str, item: dict[str, Any], why: str) -> Need:
    table = _table(scope, table_name)
    return Need(f"dynamodb:{action}", table, _leading_keys(scope, table, item), why)


def _dynamodb_item(action: str, item_param: str) -> Callable[[Call, Scope], Iterator[Need]]:
    def translate(call: Call, scope: Scope) -> Iterator[Need]:
        yield _item_need(scope, action, call.params["TableName"], call.params[item_param], "")
        yield from _dynamodb_kms(scope, _table(scope, call.params["TableName"]))

    return translate


def _query_leading_key(scope: Scope, table: str, params: dict[str, Any]) -> dict[str, Any]:
    hash_key = scope.deployment.hash_key(table)
    expression = params.get("KeyConditionExpression", "")
    if hash_key is None or not expression:
        return {}
    names = {v: k for k, v in params.get("ExpressionAttributeNames", {}).items()}
    placeholder = names.get(hash_key, hash_key)
    found = re.search(rf"(?:^|\s|\(){re.escape(placeholder)}\s*=\s*(:\w+)", expression)
    if found is None:
        return {}
    value = params["ExpressionAttributeValues"][found.group(1)]
    return {"dynamodb:LeadingKeys": [_key_value(value)]}


def _index(table: str, params: dict[str, Any]) -> str | None:
    """The ARN of the index a Query or Scan reads (IAM authorizes it, not the table), if any."""
    index = params.get("IndexName")
    return f"{table}/index/{index}" if index else None


def _dynamodb_query(call: Call, scope: Scope) -> Iterator[Need]:
    table = _table(scope, call.params["TableName"])
    index = _index(table, call.params)
    if index is not None:
        yield Need("dynamodb:Query", index)
    else:
        yield Need("dynamodb:Query", table, _query_leading_key(scope, table, call.params))
    yield from _dynamodb_kms(scope, table)


def _dynamodb_scan(call: Call, scope: Scope) -> Iterator[Need]:
    table = _table(scope, call.params["TableName"])
    yield Need("dynamodb:Scan", _index(table, call.params) or table)
    yield from _dynamodb_kms(scope, table)


_TRANSACT_WRITE = {
    "Put": ("PutItem", "Item"),
    "Update": ("UpdateItem", "Key"),
    "Delete": ("DeleteItem", "Key"),
    "ConditionCheck": ("ConditionCheckItem", "Key"),
}


def _transact_write(call: Call, scope: Scope) -> Iterator[Need]:
    tables = set()
    for item in call.params["TransactItems"]:
        ((kind, body),) = item.items()
        action, key = _TRANSACT_WRITE[kind]
        tables.add(body["TableName"])
        yield _item_need(
            scope, action, body["TableName"], body[key], "TransactWriteItems checks each item"
        )
    for name in sorted(tables):
        yield from _dynamodb_kms(scope, _table(scope, name))


def _transact_get(call: Call, scope: Scope) -> Iterator[Need]:
    tables = set()
    for item in call.params["TransactItems"]:
        body = item["Get"]
        tables.add(body["TableName"])
        yield _item_need(
            scope, "GetItem", body["TableName"], body["Key"], "TransactGetItems checks each item"
        )
    for name in sorted(tables):
        yield from _dynamodb_kms(scope, _table(scope, name))


def _batch_get(call: Call, scope: Scope) -> Iterator[Need]:
    for name, request in call.params["RequestItems"].items():
        table = _table(scope, name)
        yield Need("dynamodb:BatchGetItem", table, _leading_keys(scope, table, *request["Keys"]))
        yield from _dynamodb_kms(scope, table)


def _stream_arn(call: Call) -> str:
    if "StreamArn" in call.params:
        return str(call.params["StreamArn"])
    # A shard iterator of the embedded AWS starts with its stream's ARN.
    return str(call.params["ShardIterator"]).split("|", 1)[0]


def _table_of_stream(stream_arn: str) -> str:
    return stream_arn.split("/stream/", 1)[0]


def _dynamodb_streams(action: str, decrypt: bool) -> Callable[[Call, Scope], Iterator[Need]]:
    def translate(call: Call, scope: Scope) -> Iterator[Need]:
        stream = _stream_arn(call)
        yield Need(f"dynamodb:{action}", stream)
        if decrypt:
            table = _table_of_stream(stream)
            yield from _dynamodb_kms(scope, table)

    return translate


def _list_streams(call: Call, scope: Scope) -> Iterator[Need]:
    yield Need("dynamodb:ListStreams", "*")


# --- Kinesis ------------------------------------------------------------------------------
def _kinesis_stream(call: Call, scope: Scope) -> str:
    if "StreamARN" in call.params:
        return str(call.params["StreamARN"])
    if "StreamName" in call.params:
        return scope.deployment.arn("kinesis", f"stream/{call.params['StreamName']}")
    if "ShardIterator" in call.params:
        from moto.kinesis.utils import decompose_shard_iterator

        # An iterator of the embedded AWS names its stream (moto's format).
        name = decompose_shard_iterator(call.params["ShardIterator"])[0]
        return scope.deployment.arn("kinesis", f"stream/{name}")
    raise UnknownOperation(f"{call.name}: no stream in {sorted(call.params)}")


def _kinesis(action: str, kms: tuple[str, ...] = ()) -> Callable[[Call, Scope], Iterator[Need]]:
    def translate(call: Call, scope: Scope) -> Iterator[Need]:
        stream = _kinesis_stream(call, scope)
        yield Need(f"kinesis:{action}", stream)
        yield from _kms(scope, stream, kms, "kinesis", {"aws:kinesis:arn": stream})

    return translate


# --- S3 -----------------------------------------------------------------------------------
def _object(call: Call) -> str:
    return f"arn:aws:s3:::{call.params['Bucket']}/{call.params['Key']}"


def _bucket(call: Call) -> str:
    return f"arn:aws:s3:::{call.params['Bucket']}"


def _s3_kms(scope: Scope, bucket: str, resource: str, actions: tuple[str, ...]) -> Iterator[Need]:
    # With an S3 Bucket Key the key's encryption context is the bucket's ARN.
    arn = bucket if scope.deployment.bucket_key_enabled(bucket) else resource
    yield from _kms(scope, resource, actions, "s3", {"aws:s3:arn": arn})


def _get_object(call: Call, scope: Scope) -> Iterator[Need]:
    action = "s3:GetObjectVersion" if call.params.get("VersionId") else "s3:GetObject"
    yield Need(action, _object(call))
    if call.status == 404:
        yield Need(
            "s3:ListBucket",
            _bucket(call),
            {},
            why="a missing key answers 404 only with s3:ListBucket (else 403)",
        )
    elif call.operation == "GetObject" and call.status < 300:
        yield from _s3_kms(scope, _bucket(call), _object(call), DECRYPT)


def _put_object(call: Call, scope: Scope) -> Iterator[Need]:
    context: dict[str, ContextValue] = {"s3:ObjectCreationOperation": "true"}
    for header, key in (("if-none-match", "s3:if-none-match"), ("if-match", "s3:if-match")):
        if header in call.headers:
            context[key] = call.headers[header]
    yield Need("s3:PutObject", _object(call), context)
    yield from _s3_kms(scope, _bucket(call), _object(call), GENERATE)


def _multipart(creation: str) -> Callable[[Call, Scope], Iterator[Need]]:
    def translate(call: Call, scope: Scope) -> Iterator[Need]:
        yield Need("s3:PutObject", _object(call), {"s3:ObjectCreationOperation": creation})
        yield from _s3_kms(scope, _bucket(call), _object(call), SEND)

    return translate


def _list_objects(call: Call, scope: Scope) -> Iterator[Need]:
    context: dict[str, ContextValue] = {}
    for param, key in (("Prefix", "s3:prefix"), ("Delimiter", "s3:delimiter")):
        if param in call.params:
            context[key] = str(call.params[param])
    yield Need("s3:ListBucket", _bucket(call), context)


def _delete_object(call: Call, scope: Scope) -> Iterator[Need]:
    action = "s3:DeleteObjectVersion" if call.params.get("VersionId") else "s3:DeleteObject"
    yield Need(action, _object(call))


def _delete_objects(call: Call, scope: Scope) -> Iterator[Need]:
    for entry in call.params["Delete"]["Objects"]:
        yield Need(
            "s3:DeleteObject",
            f"{_bucket(call)}/{entry['Key']}",
            why="DeleteObjects checks s3:DeleteObject for each key",
        )


def _put_object_tagging(call: Call, scope: Scope) -> Iterator[Need]:
    # Tags are the object's metadata, not its data: no KMS, no s3:PutObject.
    versioned = call.params.get("VersionId")
    action = "s3:PutObjectVersionTagging" if versioned else "s3:PutObjectTagging"
    yield Need(action, _object(call))


def _head_bucket(call: Call, scope: Scope) -> Iterator[Need]:
    yield Need("s3:ListBucket", _bucket(call))


# --- SQS and SNS --------------------------------------------------------------------------
def _queue_arn(scope: Scope, url: str) -> str:
    account, name = urlparse(url).path.strip("/").split("/")[-2:]
    return f"arn:aws:sqs:{scope.deployment.region}:{account}:{name}"


def _sqs(action: str, kms: tuple[str, ...] = ()) -> Callable[[Call, Scope], Iterator[Need]]:
    def translate(call: Call, scope: Scope) -> Iterator[Need]:
        queue = _queue_arn(scope, call.params["QueueUrl"])
        yield Need(f"sqs:{action}", queue)
        yield from _kms(scope, queue, kms, "sqs", {"aws:sqs:arn": queue})

    return translate


def _get_queue_url(call: Call, scope: Scope) -> Iterator[Need]:
    account = call.params.get("QueueOwnerAWSAccountId") or scope.account
    name = call.params["QueueName"]
    yield Need("sqs:GetQueueUrl", f"arn:aws:sqs:{scope.deployment.region}:{account}:{name}")


def _publish(call: Call, scope: Scope) -> Iterator[Need]:
    topic = str(call.params["TopicArn"])
    yield Need("sns:Publish", topic)
    yield from _kms(scope, topic, SEND, "sns", {"aws:sns:topicArn": topic})


# --- Glue, EMR Serverless, Lambda ---------------------------------------------------------
def _glue(action: str, database_param: str, table_param: str | None):  # type: ignore[no-untyped-def]
    def translate(call: Call, scope: Scope) -> Iterator[Need]:
        d = scope.deployment
        database = _param(call.params, database_param)
        why = f"glue:{action} is authorized on the catalog, the database and the table"
        yield Need(f"glue:{action}", d.arn("glue", "catalog"), why=why)
        yield Need(f"glue:{action}", d.arn("glue", f"database/{database}"), why=why)
        if table_param is not None:
            table = _param(call.params, table_param)
            yield Need(f"glue:{action}", d.arn("glue", f"table/{database}/{table}"))

    return translate


def _param(params: dict[str, Any], path: str) -> str:
    value: Any = params
    for step in path.split("."):
        value = value[step]
    return str(value)


def _application(scope: Scope, application_id: str) -> str:
    return scope.deployment.arn("emr-serverless", f"/applications/{application_id}")


def _start_job_run(call: Call, scope: Scope) -> Iterator[Need]:
    yield Need("emr-serverless:StartJobRun", _application(scope, call.params["applicationId"]))
    yield Need(
        "iam:PassRole",
        str(call.params["executionRoleArn"]),
        {"iam:PassedToService": "emr-serverless.amazonaws.com"},
        why="StartJobRun passes its execution role to EMR Serverless",
    )


def _job_run(action: str) -> Callable[[Call, Scope], Iterator[Need]]:
    def translate(call: Call, scope: Scope) -> Iterator[Need]:
        application = _application(scope, call.params["applicationId"])
        yield Need(f"emr-serverless:{action}", f"{application}/jobruns/{call.params['jobRunId']}")

    return translate


def _list_job_runs(call: Call, scope: Scope) -> Iterator[Need]:
    yield Need("emr-serverless:ListJobRuns", _application(scope, call.params["applicationId"]))


def _invoke(call: Call, scope: Scope) -> Iterator[Need]:
    name = str(call.params["FunctionName"])
    if not name.startswith("arn:"):
        name = scope.deployment.arn("lambda", f"function:{name}")
    if call.params.get("Qualifier"):
        name = f"{name}:{call.params['Qualifier']}"
    yield Need("lambda:InvokeFunction", name)


Translator = Callable[[Call, Scope], Iterator[Need]]
_TRANSLATORS: dict[tuple[str, str], Translator] = {
    ("dynamodb", "GetItem"): _dynamodb_item("GetItem", "Key"),
    ("dynamodb", "PutItem"): _dynamodb_item("PutItem", "Item"),
    ("dynamodb", "UpdateItem"): _dynamodb_item("UpdateItem", "Key"),
    ("dynamodb", "DeleteItem"): _dynamodb_item("DeleteItem", "Key"),
    ("dynamodb", "Query"): _dynamodb_query,
    ("dynamodb", "Scan"): _dynamodb_scan,
    ("dynamodb", "TransactWriteItems"): _transact_write,
    ("dynamodb", "TransactGetItems"): _transact_get,
    ("dynamodb", "BatchGetItem"): _batch_get,
    ("dynamodbstreams", "DescribeStream"): _dynamodb_streams("DescribeStream", decrypt=False),
    ("dynamodbstreams", "GetShardIterator"): _dynamodb_streams("GetShardIterator", decrypt=False),
    ("dynamodbstreams", "GetRecords"): _dynamodb_streams("GetRecords", decrypt=True),
    ("dynamodbstreams", "ListStreams"): _list_streams,
    ("kinesis", "ListShards"): _kinesis("ListShards"),
    ("kinesis", "DescribeStream"): _kinesis("DescribeStream"),
    ("kinesis", "DescribeStreamSummary"): _kinesis("DescribeStreamSummary"),
    ("kinesis", "GetShardIterator"): _kinesis("GetShardIterator"),
    ("kinesis", "GetRecords"): _kinesis("GetRecords", DECRYPT),
    ("kinesis", "PutRecord"): _kinesis("PutRecord", GENERATE),
    ("kinesis", "PutRecords"): _kinesis("PutRecords", GENERATE),
    ("s3", "GetObject"): _get_object,
    ("s3", "HeadObject"): _get_object,
    ("s3", "PutObject"): _put_object,
    ("s3", "CreateMultipartUpload"): _multipart("false"),
    ("s3", "UploadPart"): _multipart("false"),
    ("s3", "CompleteMultipartUpload"): _multipart("true"),
    ("s3", "ListObjectsV2"): _list_objects,
    ("s3", "ListObjects"): _list_objects,
    ("s3", "DeleteObject"): _delete_object,
    ("s3", "DeleteObjects"): _delete_objects,
    ("s3", "HeadBucket"): _head_bucket,
    ("s3", "PutObjectTagging"): _put_object_tagging,
    ("sqs", "SendMessage"): _sqs("SendMessage", SEND),
    ("sqs", "SendMessageBatch"): _sqs("SendMessage", SEND),
    ("sqs", "ReceiveMessage"): _sqs("ReceiveMessage", DECRYPT),
    ("sqs", "DeleteMessage"): _sqs("DeleteMessage"),
    ("sqs", "DeleteMessageBatch"): _sqs("DeleteMessage"),
    ("sqs", "ChangeMessageVisibility"): _sqs("ChangeMessageVisibility"),
    ("sqs", "ChangeMessageVisibilityBatch"): _sqs("ChangeMessageVisibility"),
    ("sqs", "GetQueueAttributes"): _sqs("GetQueueAttributes"),
    ("sqs", "GetQueueUrl"): _get_queue_url,
    ("sns", "Publish"): _publish,
    ("glue", "GetDatabase"): _glue("GetDatabase", "Name", None),
    ("glue", "CreateDatabase"): _glue("CreateDatabase", "DatabaseInput.Name", None),
    ("glue", "GetTable"): _glue("GetTable", "DatabaseName", "Name"),
    ("glue", "GetTables"): _glue("GetTables", "DatabaseName", None),
    ("glue", "CreateTable"): _glue("CreateTable", "DatabaseName", "TableInput.Name"),
    ("glue", "UpdateTable"): _glue("UpdateTable", "DatabaseName", "TableInput.Name"),
    ("glue", "DeleteTable"): _glue("DeleteTable", "DatabaseName", "Name"),
    ("emr-serverless", "StartJobRun"): _start_job_run,
    ("emr-serverless", "GetJobRun"): _job_run("GetJobRun"),
    ("emr-serverless", "CancelJobRun"): _job_run("CancelJobRun"),
    ("emr-serverless", "ListJobRuns"): _list_job_runs,
    ("lambda", "Invoke"): _invoke,
}
