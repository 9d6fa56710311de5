"""The synthesized stack deployed into the embedded AWS, and its Lambda code as shipped."""

from __future__ import annotations

import json
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

from shardlog.local.deploy import Deployment
from shardlog.stack import DeployedStack

# Runs in a fresh interpreter started with -I -S: no site-packages, no PYTHONPATH, no user
# site. The path is what Lambda gives a function: its code (/var/task), then the layer and
# the runtime's packages (/opt/python, the runtime's site-packages).
BOOTSTRAP = """
import importlib, json, sys, sysconfig
asset, runtime, entry, event, timeout_ms = sys.argv[1:6]
sys.path[:0] = [asset, runtime]
module, _, name = entry.rpartition(".")
handler = getattr(importlib.import_module(module), name)  # the cold start (settings built)

class Context:
    function_name = "shipped"
    function_version = "$LATEST"
    memory_limit_in_mb = 256
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:shipped"
    aws_request_id = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
    log_group_name = "/aws/lambda/shipped"
    log_stream_name = "2026/01/01/[$LATEST]0"
    def get_remaining_time_in_millis(self):
        return int(timeout_ms)

result = handler(json.loads(event), Context())
stdlib = (sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["platstdlib"])
outside = sorted(
    f"{m.__name__}: {m.__file__}"
    for m in list(sys.modules.values())
    if getattr(m, "__file__", None)
    and not m.__file__.startswith((asset, runtime, *stdlib))
)
print("SHIPPED-RESULT " + json.dumps({"result": result, "outside": outside}, default=str))
"""


def shardlog_asset_dirs(deployment: Deployment, assembly: Path) -> dict[str, Path]:
    """Each function of the template whose code is shardlog's asset -> that asset directory
    (as synth staged it: the directory cdk-assets zips and uploads)."""
    manifest = json.loads((assembly / f"{_template_stack(assembly)}.assets.json").read_text())
    by_key = {
        d["objectKey"]: assembly / entry["source"]["path"]
        for entry in manifest["files"].values()
        for d in entry["destinations"].values()
    }
    found = {}
    for logical_id, resource in deployment.template["Resources"].items():
        if resource["Type"] != "AWS::Lambda::Function":
            continue
        code = by_key.get(resource["Properties"]["Code"].get("S3Key", ""))
        if code is not None and (code / "lambdas").is_dir():
            found[logical_id] = code
    return found


def _template_stack(assembly: Path) -> str:
    (template,) = assembly.glob("*.assets.json")
    return template.name.removesuffix(".assets.json")


def run_shipped(
    asset: Path,
    runtime: Path,
    handler: str,
    event: dict[str, Any],
    environment: dict[str, str],
    timeout_ms: int,
) -> dict[str, Any]:
    """Import ``handler`` from the asset alone (cold start) and invoke it once."""
    done = subprocess.run(
        [
            sys.executable,
            "-I",
            "-S",
            "-c",
            BOOTSTRAP,
            str(asset),
            str(runtime),
            handler,
            json.dumps(event),
            str(timeout_ms),
        ],
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )
    for line in done.stdout.splitlines():
        if line.startswith("SHIPPED-RESULT "):
            return dict(json.loads(line.removeprefix("SHIPPED-RESULT ")))
    tail = (done.stderr or done.stdout)[-3000:]
    raise AssertionError(f"{handler} failed as shipped (exit {done.returncode}):\n{tail}")


def stdlib_paths() -> tuple[str, str]:
    paths = sysconfig.get_paths()
    return paths["stdlib"], paths["platstdlib"]


def put_foreign_records(stack: DeployedStack) -> int:
    """One record on each open shard of the deployed stream, as another producer's traffic
    (JSON with a key no test uses): tests on the shared deployment must look past them."""
    from shardlog.producer import Producer
    from shardlog.records import ProducerRecord
    from shardlog.shardsync import list_shards

    config = stack.config()
    clients = config.clients()
    open_shards = [
        s
        for s in list_shards(clients.kinesis, config.stream_name)
        if "EndingSequenceNumber" not in s["SequenceNumberRange"]
    ]
    data = json.dumps({"k": "another-producer", "n": 0}).encode()
    records = [
        ProducerRecord("another-producer", data, s["HashKeyRange"]["StartingHashKey"])
        for s in open_shards
    ]
    Producer(config.stream_name, clients).put_records(records)
    return len(records)
