"""Who makes each request to the embedded AWS: the local stand-ins for the stack's roles.

On AWS every deployed function runs under a role of its own, the Spark jobs under the EMR
Serverless execution role, and a consumer group's workers under whatever role their owner
attaches the group's managed policy to. Locally the runtime gives each of them clients signed
with an access key id that names it (``shardlog.config.principal_key``), so the embedded AWS
can tell who made every request (``shardlog.local.request_log``) and the requests can be
checked against the synthesized policies of the one that made them.

A principal name says which identity of the synthesized stack it stands for:

- ``function:<handler>`` : the Lambda function whose ``Handler`` is ``<handler>`` (the module
  path of ``lambdas/`` + ``.handler``); ``function:<handler>#<instance>`` when the stack has
  one function per instance of that handler (a Lambda consumer group's runner: the group);
- ``emr-serverless-job`` : the execution role EMR Serverless runs the Spark jobs with;
- ``consumer-group:<group>`` : a role holding the group's managed policy (its workers);
- ``scheduler`` : the role EventBridge Scheduler invokes the Spark trigger with.

Its own event sources (Kinesis, SQS, a DynamoDB stream) read with the function's clients:
on AWS the event source mapping reads with the function's role.
"""

from __future__ import annotations

from types import ModuleType

FUNCTION = "function:"
SPARK_JOBS = "emr-serverless-job"
CONSUMER_GROUP = "consumer-group:"
SCHEDULER = "scheduler"


def function(handler_module: ModuleType | str, instance: str | None = None) -> str:
    """The principal of the function whose handler module is ``handler_module``."""
    module = handler_module if isinstance(handler_module, str) else handler_module.__name__
    name = f"{FUNCTION}{module}.handler"
    return f"{name}#{instance}" if instance is not None else name


def consumer_group(group: str) -> str:
    """The principal of a consumer group's workers (the group's managed policy)."""
    return f"{CONSUMER_GROUP}{group}"
