"""The local runtime: embedded AWS (moto server), event-source poller, resources."""
