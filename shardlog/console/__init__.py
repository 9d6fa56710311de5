"""`shardlog console`: a read-only web UI of one deployment on 127.0.0.1 (docs/CONSOLE.md).

``source`` says where it reads (a stack's outputs or the local state file), ``queries`` what
each page reads (through the CLI's own code paths, each bounded in AWS requests), ``render``
the escaped HTML, ``server`` the loopback HTTP server, its token and its errors.
"""
