"""Deploy a synthesized cloud assembly (``cdk synth``'s output) into the embedded AWS.

What ``cdk deploy`` does against an account, done here with boto3 against moto:

1. the bootstrap's part: the SSM parameter the template's ``BootstrapVersion`` rule reads
   and the assets bucket (``cdk-hnb659fds-assets-<account>-<region>``);
2. ``cdk-assets``' part: every file asset of ``<stack>.assets.json`` uploaded to its
   destination key; a directory asset (the Lambda code) zipped first, as cdk-assets zips it;
3. CloudFormation's part: CreateStack of the template as synthesized, waited for; the
   resource types moto lacks are created or recorded by ``shardlog.local.cloudformation``;
4. the custom resources the embedded CloudFormation records without running, done as
   their handlers do it: ``Custom::CDKBucketDeployment`` (the source zips unpacked under the
   destination bucket and prefix) and ``Custom::ShardlogConsumerGroup`` (shardlog's own
   registration handler, called in-process with its function's environment: the Lambda
   consumer groups are created at their start positions).

The stack's outputs are returned; everything else is found from them, as on AWS.
"""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from botocore.exceptions import ClientError

from shardlog.aws import Clients
from shardlog.exceptions import aws_error_code

BOOTSTRAP_QUALIFIER = "hnb659fds"  # the CDK's default qualifier
BOOTSTRAP_VERSION = "30"  # at least the version the template's CheckBootstrapVersion rule wants
BUCKET_DEPLOYMENT = "Custom::CDKBucketDeployment"
GROUP_REGISTRATION = "Custom::ShardlogConsumerGroup"
CAPABILITIES = ["CAPABILITY_IAM", "CAPABILITY_NAMED_IAM", "CAPABILITY_AUTO_EXPAND"]


@dataclass(frozen=True)
class Deployment:
    stack_name: str
    template: dict[str, Any]
    outputs: dict[str, str]
    assets_bucket: str


def zip_directory(directory: Path) -> bytes:
    """A directory asset as cdk-assets uploads it: its files, sorted, in one zip."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(p for p in directory.rglob("*") if p.is_file()):
            archive.write(path, path.relative_to(directory).as_posix())
    return buffer.getvalue()


def _substitute(text: str, account: str, region: str) -> str:
    return (
        text.replace("${AWS::AccountId}", account)
        .replace("${AWS::Region}", region)
        .replace("${AWS::Partition}", "aws")
    )


def _create_bucket(clients: Clients, bucket: str) -> None:
    try:
        if clients.region == "us-east-1":
            clients.s3.create_bucket(Bucket=bucket)
        else:
            clients.s3.create_bucket(
                Bucket=bucket, CreateBucketConfiguration={"LocationConstraint": clients.region}
            )
    except ClientError as exc:
        if aws_error_code(exc) not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
            raise


def publish_assets(clients: Clients, assembly: Path, stack_name: str, account: str) -> str:
    """Bootstrap's and cdk-assets' part; returns the assets bucket."""
    clients.client("ssm").put_parameter(
        Name=f"/cdk-bootstrap/{BOOTSTRAP_QUALIFIER}/version",
        Value=BOOTSTRAP_VERSION,
        Type="String",
        Overwrite=True,
    )
    manifest = json.loads((assembly / f"{stack_name}.assets.json").read_text())
    buckets = set()
    for entry in manifest.get("files", {}).values():
        source = assembly / entry["source"]["path"]
        body = zip_directory(source) if source.is_dir() else source.read_bytes()
        for destination in entry["destinations"].values():
            bucket = _substitute(destination["bucketName"], account, clients.region)
            if bucket not in buckets:
                _create_bucket(clients, bucket)
                buckets.add(bucket)
            clients.s3.put_object(Bucket=bucket, Key=destination["objectKey"], Body=body)
    return f"cdk-{BOOTSTRAP_QUALIFIER}-assets-{account}-{clients.region}"


def run_bucket_deployments(clients: Clients, template: Mapping[str, Any], stack_name: str) -> int:
    """Do what each Custom::CDKBucketDeployment's handler does; returns the files copied."""
    cfn = clients.client("cloudformation")
    copied = 0
    for resource in template["Resources"].values():
        if resource["Type"] != BUCKET_DEPLOYMENT:
            continue
        props = resource["Properties"]
        destination = _physical_id(cfn, stack_name, props["DestinationBucketName"]["Ref"])
        prefix = props.get("DestinationBucketKeyPrefix", "")
        account = clients.client("sts").get_caller_identity()["Account"]
        sources = zip(props["SourceBucketNames"], props["SourceObjectKeys"], strict=True)
        for bucket_expr, key in sources:
            bucket = _substitute(bucket_expr["Fn::Sub"], account, clients.region)
            body = clients.s3.get_object(Bucket=bucket, Key=key)["Body"].read()
            with zipfile.ZipFile(io.BytesIO(body)) as archive:
                for name in archive.namelist():
                    if name.endswith("/"):
                        continue
                    clients.s3.put_object(
                        Bucket=destination, Key=f"{prefix}{name}", Body=archive.read(name)
                    )
                    copied += 1
    return copied


def run_group_registrations(
    clients: Clients, template: Mapping[str, Any], stack_name: str
) -> list[str]:
    """Do what each Custom::ShardlogConsumerGroup's service token does: call the registration
    handler (in-process) with a Create request; returns the groups registered."""
    from lambdas.group_registration.handler import create_handler
    from shardlog.function_settings import RegistrationSettings
    from shardlog.local.lambda_context import LambdaContext

    cfn, lam = clients.client("cloudformation"), clients.client("lambda")
    registered = []
    for logical_id, resource in template["Resources"].items():
        if resource["Type"] != GROUP_REGISTRATION:
            continue
        function_id = resource["Properties"]["ServiceToken"]["Fn::GetAtt"][0]
        function = lam.get_function_configuration(
            FunctionName=_physical_id(cfn, stack_name, function_id)
        )
        settings = RegistrationSettings.from_env(function["Environment"]["Variables"])
        answers: list[dict[str, Any]] = []
        handler = create_handler(settings, clients, respond=_collect(answers))
        event = {
            "RequestType": "Create",
            "ResponseURL": "local:",
            "StackId": stack_name,
            "RequestId": f"deploy-{logical_id}",
            "LogicalResourceId": logical_id,
            "ResourceType": GROUP_REGISTRATION,
            "ResourceProperties": resource["Properties"],
        }
        handler(event, LambdaContext(function["FunctionName"], region=clients.region))
        if answers[-1]["Status"] != "SUCCESS":
            raise RuntimeError(f"{logical_id}: {answers[-1].get('Reason')}")
        registered.append(answers[-1]["PhysicalResourceId"])
    return registered


def _collect(answers: list[dict[str, Any]]) -> Any:
    """A ResponseURL stand-in: the answers the handler PUTs, kept in ``answers``."""
    return lambda _url, body: answers.append(body)


def _physical_id(cfn: Any, stack_name: str, logical_id: str) -> str:
    response = cfn.describe_stack_resource(StackName=stack_name, LogicalResourceId=logical_id)
    return str(response["StackResourceDetail"]["PhysicalResourceId"])


def stack_outputs(clients: Clients, stack_name: str) -> dict[str, str]:
    stack = clients.client("cloudformation").describe_stacks(StackName=stack_name)["Stacks"][0]
    return {o["OutputKey"]: o["OutputValue"] for o in stack.get("Outputs", [])}


def deploy(
    clients: Clients, assembly: Path, stack_name: str, as_name: str | None = None
) -> Deployment:
    """Deploy ``<assembly>/<stack_name>.template.json`` with its assets (as ``as_name``, by
    default the same name); wait until done."""
    account = clients.client("sts").get_caller_identity()["Account"]
    assets_bucket = publish_assets(clients, assembly, stack_name, account)
    template = json.loads((assembly / f"{stack_name}.template.json").read_text())
    stack_name = as_name or stack_name
    cfn = clients.client("cloudformation")
    cfn.create_stack(
        StackName=stack_name, TemplateBody=json.dumps(template), Capabilities=CAPABILITIES
    )
    cfn.get_waiter("stack_create_complete").wait(
        StackName=stack_name, WaiterConfig={"Delay": 1, "MaxAttempts": 120}
    )
    run_bucket_deployments(clients, template, stack_name)
    run_group_registrations(clients, template, stack_name)
    return Deployment(stack_name, template, stack_outputs(clients, stack_name), assets_bucket)
