"""CDK app tests. Set before any test imports aws_cdk, which starts the jsii node runtime:
it prints a large banner on node releases it considers end-of-life."""

import os

os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "18,20")
os.environ.setdefault("JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION", "1")
