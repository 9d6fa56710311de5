"""The embedded AWS keeps conditional writes atomic under concurrent requests."""

from __future__ import annotations

import threading

import pytest
from botocore.exceptions import ClientError

from tests.support.aws import AwsEnv


@pytest.mark.usefixtures("preemptive")
def test_if_none_match_create_has_exactly_one_winner(aws: AwsEnv) -> None:
    for round_number in range(20):
        key = f"events/p/{round_number:020d}"
        winners: list[int] = []
        barrier = threading.Barrier(4)

        def create(
            worker: int,
            key: str = key,
            barrier: threading.Barrier = barrier,
            winners: list[int] = winners,
        ) -> None:
            clients = aws.fresh_clients()
            barrier.wait(timeout=30)
            try:
                clients.s3.put_object(
                    Bucket=aws.config.bucket, Key=key, Body=f"{worker}".encode(), IfNoneMatch="*"
                )
                winners.append(worker)
            except ClientError as exc:
                assert exc.response["Error"]["Code"] in ("PreconditionFailed", "412")

        threads = [threading.Thread(target=create, args=(w,)) for w in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        assert len(winners) == 1, f"round {round_number}: {winners}"
        body = aws.clients.s3.get_object(Bucket=aws.config.bucket, Key=key)["Body"].read()
        assert body == f"{winners[0]}".encode(), "the winner's object is the one stored"
