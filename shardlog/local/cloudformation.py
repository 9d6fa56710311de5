"""Let moto's CloudFormation create the shardlog stack: the three resource types it lacks
that the code needs, and the list of the types it skips, each with why that is safe.

moto 5.2's CloudFormation creates a resource only for the types it has a model of; any
other type is skipped with a warning, and a stack output that reads an attribute of a
skipped resource fails the whole CreateStack. shardlog's template (``cdk synth``) holds
three such types the running system needs, so ``apply()`` registers a model for each,
created through the same moto backend its API uses:

- ``AWS::EMRServerless::Application``: the Spark application (``EmrApplicationId``);
- ``AWS::Glue::Database``: the lake table's database in the Glue catalog;
- ``AWS::Athena::WorkGroup``: the workgroup Athena queries of the lake run in;

and gives a FIFO queue without a name a generated one ending in ``.fifo``, as
CloudFormation does (moto's has no suffix, which SQS then refuses).

Every other type moto lacks is in ``SKIPPED_TYPES`` with the reason its absence changes
nothing the local deployment verifies; ``unsupported_types`` lists what a template holds
beyond moto's models, so a test can require each to be either created or explained.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from typing import Any, Final

from moto import backends
from moto.athena.models import athena_backends
from moto.core.common_models import CloudFormationModel
from moto.emrserverless.models import emrserverless_backends
from moto.glue.models import glue_backends

# What the embedded CloudFormation does not create, and why its absence is safe here.
SKIPPED_TYPES: Final[Mapping[str, str]] = {
    "AWS::ApiGateway::Account": "account-wide CloudWatch role for API stage logs; logs only",
    "AWS::ApiGateway::Model": "request body schema; the handler validates the same body itself",
    "AWS::ApiGateway::RequestValidator": "turns the body schema on; the handler validates too",
    "AWS::ApiGateway::Stage": "moto cannot invoke the API's Lambda (Docker); the local "
    "producer API serves the same handler, and ProducerApiUrl names no stage",
    "AWS::Athena::NamedQuery": "saved example queries for the console; nothing runs them",
    "AWS::CloudWatch::Alarm": "alarms only notify; nothing in the system reads them",
    "AWS::Lambda::EventInvokeConfig": "async retry and dead-letter settings of Lambdas moto "
    "cannot invoke; the local runtime applies the same semantics in-process",
    "AWS::Logs::MetricFilter": "counts API 429s for a dashboard and an alarm; metrics only",
    "AWS::S3::BucketPolicy": "TLS-only and write-once denies; moto enforces no policy "
    "(what IAM and policies allow is checked by the IAM replay)",
    "AWS::SNS::Subscription": "the alarm e-mail subscription",
    "AWS::SNS::TopicPolicy": "who may publish to the alarm topic; moto enforces no policy",
    "AWS::SQS::QueuePolicy": "TLS-only and sender rules; moto enforces no policy",
    "AWS::Scheduler::Schedule": "moto's Scheduler never fires; the local runtime starts the "
    "same trigger handler on its own clock",
    "AWS::Scheduler::ScheduleGroup": "the schedules' group (see AWS::Scheduler::Schedule)",
    "Custom::CDKBucketDeployment": "aws-cdk-lib's Lambda that copies spark_jobs/ to the "
    "artifacts bucket; moto would run it in Docker, so the deployer uploads the same asset "
    "to the same prefix itself",
    "Custom::ShardlogConsumerGroup": "a Lambda consumer group's registration at deploy; moto "
    "would run its Lambda in Docker, so the deployer calls the same handler in-process with "
    "the function's environment and the resource's properties (shardlog.local.deploy)",
}

_lock = threading.Lock()
_applied = False
_hooked = False


def _camel(value: Any) -> Any:
    """CloudFormation's PascalCase keys as the EMR Serverless API spells them (camelCase)."""
    if isinstance(value, dict):
        return {k[:1].lower() + k[1:]: _camel(v) for k, v in value.items()}
    return value


class _Created:
    """A resource made through a moto backend; its physical id and attributes. (moto finds
    models among CloudFormationModel's direct subclasses, so each model names both bases.)"""

    ATTRIBUTES: dict[str, str] = {}

    def __init__(self, physical_id: str, attributes: dict[str, str]) -> None:
        self.physical_id = physical_id
        self.attributes = attributes

    @property
    def physical_resource_id(self) -> str:
        return self.physical_id

    @classmethod
    def has_cfn_attr(cls, attr: str) -> bool:
        return attr in cls.ATTRIBUTES

    def get_cfn_attribute(self, attribute_name: str) -> Any:
        return self.attributes[attribute_name]

    @staticmethod
    def cloudformation_name_type() -> str:
        return "Name"

    @classmethod
    def create_from_cloudformation_json(
        cls,
        resource_name: str,
        cloudformation_json: dict[str, Any],
        account_id: str,
        region_name: str,
        **kwargs: Any,
    ) -> _Created:
        props = cloudformation_json["Properties"]
        return cls._create(resource_name, props, account_id, region_name)

    @classmethod
    def _create(
        cls, resource_name: str, props: dict[str, Any], account_id: str, region_name: str
    ) -> _Created:
        raise NotImplementedError


class EmrServerlessApplication(_Created, CloudFormationModel):
    ATTRIBUTES = {"ApplicationId": "", "Arn": ""}

    @staticmethod
    def cloudformation_type() -> str:
        return "AWS::EMRServerless::Application"

    @classmethod
    def _create(
        cls, resource_name: str, props: dict[str, Any], account_id: str, region_name: str
    ) -> _Created:
        application = emrserverless_backends[account_id][region_name].create_application(
            name=props.get("Name", resource_name),
            release_label=props["ReleaseLabel"],
            application_type=props["Type"],
            client_token=resource_name,
            initial_capacity=None,  # type: ignore[arg-type]
            maximum_capacity=_camel(props.get("MaximumCapacity")),
            tags={t["Key"]: t["Value"] for t in props.get("Tags", [])},
            auto_start_configuration=_camel(props.get("AutoStartConfiguration")),
            auto_stop_configuration=_camel(props.get("AutoStopConfiguration")),
            network_configuration=None,
        )
        return cls(application.id, {"ApplicationId": application.id, "Arn": application.arn})


class GlueDatabase(_Created, CloudFormationModel):
    @staticmethod
    def cloudformation_type() -> str:
        return "AWS::Glue::Database"

    @classmethod
    def _create(
        cls, resource_name: str, props: dict[str, Any], account_id: str, region_name: str
    ) -> _Created:
        database_input = dict(props["DatabaseInput"])
        name = database_input.setdefault("Name", resource_name)
        glue_backends[account_id][region_name].create_database(name, database_input)
        return cls(name, {})


class AthenaWorkGroup(_Created, CloudFormationModel):
    @staticmethod
    def cloudformation_type() -> str:
        return "AWS::Athena::WorkGroup"

    @classmethod
    def _create(
        cls, resource_name: str, props: dict[str, Any], account_id: str, region_name: str
    ) -> _Created:
        name = props.get("Name", resource_name)
        athena_backends[account_id][region_name].create_work_group(
            name,
            configuration=props.get("WorkGroupConfiguration", {}),
            description=props.get("Description", ""),
            tags=props.get("Tags", []),
        )
        return cls(name, {})


class _Recorded:
    """A skipped resource kept as a record: a physical id and placeholder attributes, so
    the references other resources make to it resolve (nothing is created)."""

    TYPE = ""

    def __init__(self, physical_id: str) -> None:
        self.physical_id = physical_id

    @property
    def physical_resource_id(self) -> str:
        return self.physical_id

    @classmethod
    def has_cfn_attr(cls, attr: str) -> bool:
        return True

    def get_cfn_attribute(self, attribute_name: str) -> Any:
        return f"{self.physical_id}:{attribute_name}"

    @staticmethod
    def cloudformation_name_type() -> str:
        return ""

    @classmethod
    def create_from_cloudformation_json(  # type: ignore[override]
        cls,
        resource_name: str,
        cloudformation_json: dict[str, Any],
        account_id: str,
        region_name: str,
        **kwargs: Any,
    ) -> _Recorded:
        return cls(resource_name)


def _recorded_model(resource_type: str) -> type[CloudFormationModel]:
    name = "Recorded" + resource_type.replace(":", "")
    return type(
        name,
        (_Recorded, CloudFormationModel),
        {"TYPE": resource_type, "cloudformation_type": staticmethod(lambda: resource_type)},
    )


def _recorded_or_moto(original: Any) -> Any:
    def resource_class_from_type(resource_type: str) -> Any:
        if resource_type in SKIPPED_TYPES:
            return _RECORDED[resource_type]
        return original(resource_type)

    return resource_class_from_type


_RECORDED: dict[str, type[CloudFormationModel]] = {}


def _fifo_names(original: Any) -> Any:
    """A FIFO queue without a QueueName gets a generated name ending in ``.fifo``, as
    CloudFormation gives it (moto's generated name has no suffix, and SQS refuses it)."""

    def create_from_cloudformation_json(
        cls: Any, resource_name: str, cloudformation_json: Any, *args: Any, **kwargs: Any
    ) -> Any:
        fifo = str(cloudformation_json["Properties"].get("FifoQueue", "")).lower() == "true"
        if fifo and not resource_name.endswith(".fifo"):
            resource_name = f"{resource_name[:75]}.fifo"  # 80 characters at most
        return original(resource_name, cloudformation_json, *args, **kwargs)

    return classmethod(create_from_cloudformation_json)


def supported_types() -> set[str]:
    """The resource types moto's CloudFormation creates (with this module's models)."""
    return set(_installed().get_model_map())


def unsupported_types(resource_types: Iterable[str]) -> set[str]:
    """Of these types, those the embedded CloudFormation skips."""
    supported = supported_types()
    return {
        t
        for t in resource_types
        if (t in SKIPPED_TYPES or t not in supported or t.startswith("Custom::"))
        and t not in _installed().NULL_MODELS
    }


def apply() -> None:
    """Register the models (idempotent) once moto's CloudFormation is first used: its parsing
    module imports the model of every service it can create (EC2's regions and instance
    types, Auto Scaling, API Gateway's OpenAPI validator), 1.4 s of CPU that every process
    starting the embedded AWS paid at import (``shardlog local up`` starts two), used only
    by a CreateStack."""
    global _hooked
    with _lock:
        if _hooked:
            return
        original = backends.get_backend

        def get_backend(name: Any) -> Any:
            if name == "cloudformation":
                _installed()
            return original(name)

        backends.get_backend = get_backend  # type: ignore[assignment]
        _hooked = True


def _installed() -> Any:
    """moto's CloudFormation parsing, with the models registered (idempotent)."""
    global _applied
    from moto.cloudformation import parsing
    from moto.sqs.models import Queue

    with _lock:
        if _applied:
            return parsing
        # moto lists its models from CloudFormationModel's subclasses, cached on first use:
        # importing this module defined ours, so forget any list made before.
        for resource_type in SKIPPED_TYPES:
            _RECORDED[resource_type] = _recorded_model(resource_type)
        # Custom resources are routed before the model map: a recorded one is never invoked
        # (moto would start its Lambda in Docker).
        parsing.resource_class_from_type = _recorded_or_moto(parsing.resource_class_from_type)
        Queue.create_from_cloudformation_json = _fifo_names(  # type: ignore[method-assign]
            Queue.create_from_cloudformation_json
        )
        parsing.get_model_list.cache_clear()
        parsing.get_model_map.cache_clear()
        parsing.get_name_type_map.cache_clear()
        _applied = True
        return parsing
