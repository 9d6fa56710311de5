"""The synthesized template as AWS would hold it once deployed in one account and region.

The template names resources by logical id and computes their names and ARNs with intrinsic
functions (Ref, Fn::GetAtt, Fn::Join, Fn::Sub and the pseudo parameters). ``Deployment``
resolves them against a fixed account and region and the physical names a binding gives (the
embedded AWS's bucket, tables, stream and queues), so the policies' ARNs and the ARNs of the
recorded requests are comparable. It answers what the replay needs of the template:

- the identity policy statements of each principal (``shardlog.local.principals`` names
  them: a function by its handler, the Spark jobs' execution role, a consumer group's managed
  policy, the scheduler's role) and the role ARN it acts as;
- the resource policies that apply to a resource ARN (bucket, key, queue and topic policies,
  Lambda permissions);
- the KMS key that encrypts a resource (bucket, table and its stream, Kinesis stream, queue,
  topic), and a table's partition key attribute.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from shardlog.local import principals
from tests.support.iam.policy import Statement, as_list

DEFAULT_ACCOUNT = "123456789012"  # moto's, and the test stacks' ARNs
DEFAULT_REGION = "us-east-1"

# The property that holds a resource's physical name, when the template sets one.
_NAME_PROPERTIES = {
    "AWS::S3::Bucket": "BucketName",
    "AWS::DynamoDB::Table": "TableName",
    "AWS::Kinesis::Stream": "Name",
    "AWS::SQS::Queue": "QueueName",
    "AWS::SNS::Topic": "TopicName",
    "AWS::Lambda::Function": "FunctionName",
    "AWS::IAM::Role": "RoleName",
}
# What "encrypted with key K" looks like in each resource type's properties.
_KEY_PATHS = {
    "AWS::DynamoDB::Table": ("SSESpecification", "KMSMasterKeyId"),
    "AWS::Kinesis::Stream": ("StreamEncryption", "KeyId"),
    "AWS::SQS::Queue": ("KmsMasterKeyId",),
    "AWS::SNS::Topic": ("KmsMasterKeyId",),
}


class TemplateError(ValueError):
    """The template has something the replay cannot resolve or find."""


@dataclass(frozen=True)
class Identity:
    """A principal as the template defines it."""

    principal: str
    arn: str  # the role ARN its requests carry (aws:PrincipalArn)
    statements: tuple[Statement, ...]
    role_id: str | None  # the role's logical id (None: a managed policy a user attaches)


@dataclass
class Deployment:
    template: Mapping[str, Any]
    names: Mapping[str, str] = field(default_factory=dict)  # logical id -> physical name
    attributes: Mapping[tuple[str, str], str] = field(default_factory=dict)  # (id, attr) -> value
    account: str = DEFAULT_ACCOUNT
    region: str = DEFAULT_REGION
    stack_name: str = "Shardlog"

    @property
    def resources(self) -> Mapping[str, Any]:
        return dict(self.template.get("Resources", {}))

    def of_type(self, resource_type: str) -> dict[str, Mapping[str, Any]]:
        return {k: v for k, v in self.resources.items() if v.get("Type") == resource_type}

    # --- intrinsic functions ------------------------------------------------------------
    def resolve(self, value: Any) -> Any:
        if isinstance(value, list):
            return [r for r in (self.resolve(v) for v in value) if r is not _NO_VALUE]
        if not isinstance(value, dict):
            return value
        if len(value) == 1:
            (name, argument), *_ = value.items()
            if name == "Ref":
                return self.ref(str(argument))
            if name == "Fn::GetAtt":
                logical, attribute = (
                    argument if isinstance(argument, list) else str(argument).split(".", 1)
                )
                return self.get_att(logical, attribute)
            if name == "Fn::Join":
                separator, parts = argument
                return str(separator).join(str(p) for p in self.resolve(parts))
            if name == "Fn::Sub":
                return self._sub(argument)
            if name.startswith("Fn::"):
                raise TemplateError(f"intrinsic {name} is not implemented")
        return {k: self.resolve(v) for k, v in value.items()}

    def _sub(self, argument: Any) -> str:
        text, variables = (argument, {}) if isinstance(argument, str) else argument
        resolved = {k: self.resolve(v) for k, v in variables.items()}

        def replace(found: re.Match[str]) -> str:
            name = found.group(1)
            if name in resolved:
                return str(resolved[name])
            if "." in name:
                logical, attribute = name.split(".", 1)
                return str(self.get_att(logical, attribute))
            return str(self.ref(name))

        return re.sub(r"\$\{([^}!]+)\}", replace, text)

    def ref(self, logical: str) -> Any:
        pseudo = {
            "AWS::Partition": "aws",
            "AWS::Region": self.region,
            "AWS::AccountId": self.account,
            "AWS::URLSuffix": "amazonaws.com",
            "AWS::StackName": self.stack_name,
            "AWS::NoValue": _NO_VALUE,
        }
        if logical in pseudo:
            return pseudo[logical]
        parameters = self.template.get("Parameters", {})
        if logical in parameters:
            return parameters[logical].get("Default", logical)
        kind = self._type(logical)
        name = self.name(logical)
        refs = {
            "AWS::SQS::Queue": lambda: self.queue_url(name),
            "AWS::SNS::Topic": lambda: self.arn("sns", name),
            "AWS::IAM::ManagedPolicy": lambda: f"arn:aws:iam::{self.account}:policy/{name}",
        }
        return refs[kind]() if kind in refs else name

    def get_att(self, logical: str, attribute: str) -> str:
        if (logical, attribute) in self.attributes:
            return self.attributes[(logical, attribute)]
        kind, name = self._type(logical), self.name(logical)
        if attribute == "Arn":
            return self._arn_of(kind, logical, name)
        table = f"arn:aws:dynamodb:{self.region}:{self.account}:table/{name}"
        known = {
            ("AWS::DynamoDB::Table", "StreamArn"): f"{table}/stream/local",
            ("AWS::SQS::Queue", "QueueName"): name,
            ("AWS::SQS::Queue", "QueueUrl"): self.queue_url(name),
            ("AWS::EMRServerless::Application", "ApplicationId"): name,
            ("AWS::S3::Bucket", "DomainName"): f"{name}.s3.amazonaws.com",
            ("AWS::S3::Bucket", "RegionalDomainName"): f"{name}.s3.{self.region}.amazonaws.com",
        }
        if (kind, attribute) not in known:
            return f"{logical}.{attribute}"  # an attribute no policy of shardlog's compares
        return known[(kind, attribute)]

    def _arn_of(self, kind: str, logical: str, name: str) -> str:
        arns = {
            "AWS::S3::Bucket": f"arn:aws:s3:::{name}",
            "AWS::DynamoDB::Table": self.arn("dynamodb", f"table/{name}"),
            "AWS::Kinesis::Stream": self.arn("kinesis", f"stream/{name}"),
            "AWS::SQS::Queue": self.arn("sqs", name),
            "AWS::SNS::Topic": self.arn("sns", name),
            "AWS::KMS::Key": self.arn("kms", f"key/{name}"),
            "AWS::Lambda::Function": self.arn("lambda", f"function:{name}"),
            "AWS::IAM::Role": f"arn:aws:iam::{self.account}:role/{name}",
            "AWS::Events::Rule": self.arn("events", f"rule/{name}"),
            "AWS::Scheduler::ScheduleGroup": self.arn("scheduler", f"schedule-group/{name}"),
            "AWS::EMRServerless::Application": self.arn(
                "emr-serverless", f"/applications/{self.get_att(logical, 'ApplicationId')}"
            ),
        }
        return arns.get(kind, self.arn(kind.split("::")[1].lower(), logical))

    def arn(self, service: str, resource: str) -> str:
        return f"arn:aws:{service}:{self.region}:{self.account}:{resource}"

    def queue_url(self, name: str) -> str:
        return f"https://sqs.{self.region}.amazonaws.com/{self.account}/{name}"

    def name(self, logical: str) -> str:
        if logical in self.names:
            return self.names[logical]
        resource = self.resources.get(logical, {})
        prop = _NAME_PROPERTIES.get(resource.get("Type", ""))
        properties = resource.get("Properties", {})
        if prop and isinstance(properties.get(prop), str):
            return str(properties[prop])
        fifo = resource.get("Type") == "AWS::SQS::Queue" and properties.get("FifoQueue")
        return f"{logical}.fifo" if fifo else logical

    def _type(self, logical: str) -> str:
        resource = self.resources.get(logical)
        if resource is None:
            raise TemplateError(f"no resource {logical!r} in the template")
        return str(resource["Type"])

    # --- principals ---------------------------------------------------------------------
    def identity(self, principal: str) -> Identity:
        if principal.startswith(principals.FUNCTION):
            return self._role_identity(principal, self._function_role(principal))
        if principal == principals.SPARK_JOBS:
            return self._role_identity(principal, self._role_trusting("emr-serverless"))
        if principal == principals.SCHEDULER:
            return self._role_identity(principal, self._role_trusting("scheduler"))
        if principal.startswith(principals.CONSUMER_GROUP):
            return self._consumer_group_identity(principal)
        raise TemplateError(f"unknown principal {principal!r}")

    def functions(self) -> dict[str, str]:
        """Every Lambda function: logical id -> handler."""
        return {
            logical: str(resource["Properties"].get("Handler"))
            for logical, resource in self.of_type("AWS::Lambda::Function").items()
        }

    def _function_role(self, principal: str) -> str:
        handler, _, instance = principal.removeprefix(principals.FUNCTION).partition("#")
        candidates = [lid for lid, h in self.functions().items() if h == handler]
        if instance:
            candidates = [lid for lid in candidates if self._names_instance(lid, instance)]
        if len(candidates) != 1:
            raise TemplateError(
                f"{principal}: {len(candidates)} functions of the template match (handler "
                f"{handler!r}{', instance ' + repr(instance) if instance else ''})"
            )
        role = self.resources[candidates[0]]["Properties"]["Role"]
        return str(role["Fn::GetAtt"][0])

    def _names_instance(self, function: str, instance: str) -> bool:
        """Whether an output maps ``instance`` to something naming this function (the
        Lambda consumer groups' output: {group: {..., "runner": <function name>}})."""
        name = self.name(function)
        for value in self.output_json().values():
            entry = value.get(instance) if isinstance(value, dict) else None
            if isinstance(entry, dict) and name in entry.values():
                return True
        return False

    def output_json(self) -> dict[str, Any]:
        """The outputs whose resolved value is a JSON object."""
        found = {}
        for name, output in self.template.get("Outputs", {}).items():
            text = self.resolve(output.get("Value"))
            if isinstance(text, str) and text.startswith("{"):
                found[name] = json.loads(text)
        return found

    def _role_trusting(self, service: str) -> str:
        found = [
            logical
            for logical, role in self.of_type("AWS::IAM::Role").items()
            if f"{service}.amazonaws.com"
            in json.dumps(role["Properties"].get("AssumeRolePolicyDocument", {}))
        ]
        if len(found) != 1:
            raise TemplateError(f"{len(found)} roles trust {service}.amazonaws.com")
        return found[0]

    def _role_identity(self, principal: str, role: str) -> Identity:
        return Identity(principal, self.get_att(role, "Arn"), self.role_statements(role), role)

    def role_statements(self, role: str) -> tuple[Statement, ...]:
        found: list[Statement] = []
        reference = {"Ref": role}
        for logical, policy in self.of_type("AWS::IAM::Policy").items():
            if reference in policy["Properties"].get("Roles", []):
                found += self._statements(policy["Properties"]["PolicyDocument"], logical)
        for logical, policy in self.of_type("AWS::IAM::ManagedPolicy").items():
            if reference in policy["Properties"].get("Roles", []):
                found += self._statements(policy["Properties"]["PolicyDocument"], logical)
        properties = self.resources[role]["Properties"]
        for inline in properties.get("Policies", []):
            found += self._statements(inline["PolicyDocument"], f"{role}/{inline['PolicyName']}")
        for arn in self.resolve(properties.get("ManagedPolicyArns", [])):
            found += self._managed_policy(arn)
        return tuple(found)

    def _managed_policy(self, arn: str) -> list[Statement]:
        for logical, policy in self.of_type("AWS::IAM::ManagedPolicy").items():
            if self.ref(logical) == arn:
                return self._statements(policy["Properties"]["PolicyDocument"], logical)
        raise TemplateError(f"managed policy {arn} is not in the template")

    def _consumer_group_identity(self, principal: str) -> Identity:
        group = principal.removeprefix(principals.CONSUMER_GROUP)
        for value in self.output_json().values():
            arn = value.get(group) if isinstance(value, dict) else None
            if isinstance(arn, str) and arn.startswith("arn:aws:iam::"):
                worker_role = f"arn:aws:iam::{self.account}:role/{group}-workers"
                return Identity(principal, worker_role, tuple(self._managed_policy(arn)), None)
        raise TemplateError(f"no consumer group policy for {group!r} in the outputs")

    def _statements(self, document: Mapping[str, Any], source: str) -> list[Statement]:
        statements = as_list(self.resolve(document).get("Statement"))
        return [Statement(s, f"{source}#{i}") for i, s in enumerate(statements)]

    # --- resources ----------------------------------------------------------------------
    @cached_property
    def _resource_policies(self) -> list[tuple[str, str, list[Statement]]]:
        """(kind, resource ARN or bucket ARN, statements) of every resource policy."""
        found: list[tuple[str, str, list[Statement]]] = []
        for logical, policy in self.of_type("AWS::S3::BucketPolicy").items():
            bucket = f"arn:aws:s3:::{self.resolve(policy['Properties']['Bucket'])}"
            found.append(
                (
                    "bucket",
                    bucket,
                    self._statements(policy["Properties"]["PolicyDocument"], logical),
                )
            )
        for kind, policy_type, targets in (
            ("queue", "AWS::SQS::QueuePolicy", "Queues"),
            ("topic", "AWS::SNS::TopicPolicy", "Topics"),
        ):
            for logical, policy in self.of_type(policy_type).items():
                statements = self._statements(policy["Properties"]["PolicyDocument"], logical)
                for target in policy["Properties"][targets]:
                    found.append((kind, self._arn_for_reference(target), statements))
        for logical, key in self.of_type("AWS::KMS::Key").items():
            statements = self._statements(key["Properties"]["KeyPolicy"], f"{logical} key policy")
            found.append(("key", self.get_att(logical, "Arn"), statements))
        for logical, permission in self.of_type("AWS::Lambda::Permission").items():
            found.append(("function", *self._permission(logical, permission)))
        return found

    def _arn_for_reference(self, reference: Any) -> str:
        logical = reference.get("Ref") if isinstance(reference, dict) else None
        if logical is None:
            raise TemplateError(f"a policy target that is not a Ref: {reference!r}")
        return self.get_att(str(logical), "Arn")

    def _permission(self, logical: str, permission: Mapping[str, Any]) -> tuple[str, list[Any]]:
        properties = self.resolve(permission["Properties"])
        principal = str(properties["Principal"])
        function = str(properties["FunctionName"])
        statement: dict[str, Any] = {
            "Effect": "Allow",
            "Principal": {"Service": principal}
            if principal.endswith(".amazonaws.com")
            else {"AWS": principal},
            "Action": properties["Action"],
            "Resource": function,
        }
        conditions: dict[str, Any] = {}
        if "SourceArn" in properties:
            conditions["ArnLike"] = {"aws:SourceArn": properties["SourceArn"]}
        if "SourceAccount" in properties:
            conditions["StringEquals"] = {"aws:SourceAccount": properties["SourceAccount"]}
        if conditions:
            statement["Condition"] = conditions
        return function, [Statement(statement, logical)]

    def resource_policy(self, resource: str) -> tuple[str | None, list[Statement]]:
        """(kind, statements) of the policies that apply to ``resource``."""
        kind: str | None = None
        statements: list[Statement] = []
        for policy_kind, target, found in self._resource_policies:
            applies = (
                resource == target or resource.startswith(target + "/")
                if policy_kind == "bucket"
                else resource == target or resource.startswith(target + ":")
            )
            if applies:
                kind = policy_kind
                statements += found
        return kind, statements

    def key_for(self, resource: str) -> str | None:
        """The ARN of the customer managed key encrypting ``resource``, if any."""
        for logical, found in self._encrypted_resources():
            if resource == found or resource.startswith(found + "/"):
                return self._key_of(logical)
        return None

    def _encrypted_resources(self) -> Iterator[tuple[str, str]]:
        for kind in ("AWS::S3::Bucket", *_KEY_PATHS):
            for logical in self.of_type(kind):
                yield logical, self.get_att(logical, "Arn")

    def _key_of(self, logical: str) -> str | None:
        resource = self.resources[logical]
        properties = resource.get("Properties", {})
        if resource["Type"] == "AWS::S3::Bucket":
            rules = properties.get("BucketEncryption", {}).get("ServerSideEncryptionConfiguration")
            default = (rules or [{}])[0].get("ServerSideEncryptionByDefault", {})
            if default.get("SSEAlgorithm") != "aws:kms" or "KMSMasterKeyID" not in default:
                return None
            return str(self.resolve(default["KMSMasterKeyID"]))
        value: Any = properties
        for step in _KEY_PATHS[resource["Type"]]:
            value = value.get(step, {}) if isinstance(value, dict) else {}
        return str(self.resolve(value)) if value else None

    def bucket_key_enabled(self, bucket_arn: str) -> bool:
        for logical in self.of_type("AWS::S3::Bucket"):
            if self.get_att(logical, "Arn") == bucket_arn:
                rules = (
                    self.resources[logical]["Properties"]
                    .get("BucketEncryption", {})
                    .get("ServerSideEncryptionConfiguration", [{}])
                )
                return bool(rules[0].get("BucketKeyEnabled"))
        return False

    def hash_key(self, table_arn: str) -> str | None:
        """The partition key attribute of a table of the template."""
        for logical, table in self.of_type("AWS::DynamoDB::Table").items():
            if self.get_att(logical, "Arn") == table_arn:
                for key in table["Properties"]["KeySchema"]:
                    if key["KeyType"] == "HASH":
                        return str(key["AttributeName"])
        return None


class _NoValue:
    def __repr__(self) -> str:
        return "AWS::NoValue"


_NO_VALUE: Any = _NoValue()
