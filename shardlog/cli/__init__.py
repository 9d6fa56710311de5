"""The `shardlog` command line."""
