"""The shardlog CDK app: one stack (infra.stack) composed of one construct per domain."""
