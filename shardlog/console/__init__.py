"""`shardlog console`: a read-only web UI of one deployment on 127.0.0.1 (docs/CONSOLE.md).

``source`` says where it reads (a stack's outputs or the local state file); ``queries`` (the
overview and each page's bound in AWS requests), ``messages``, ``groups`` and ``lake`` what
the pages read, through the CLI's own code paths; ``render`` the escaped HTML; ``server`` the
loopback HTTP server, its token and its errors.
"""
