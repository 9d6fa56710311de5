from shardlog.cli.main import main

main()
