"""The mutation check's table stays true to the code: each mutation finds its text."""

from __future__ import annotations

from pathlib import Path

import click
import pytest

from scripts.mutants import MUTATIONS, ROOT, Mutation


@pytest.mark.parametrize("mutation", MUTATIONS, ids=lambda m: m.name)
def test_each_mutation_applies_to_exactly_one_place(mutation: Mutation, tmp_path: Path) -> None:
    source = (ROOT / mutation.path).read_text()
    assert source.count(mutation.old) == 1
    assert mutation.old != mutation.new
    for tests in (*mutation.tests, *mutation.models):
        assert (ROOT / tests).exists(), tests
    copy = tmp_path / mutation.path
    copy.parent.mkdir(parents=True)
    copy.write_text(source)
    mutation.apply(tmp_path)
    assert copy.read_text() != source and mutation.new in copy.read_text()


def test_a_mutation_whose_text_moved_fails_loudly(tmp_path: Path) -> None:
    file = tmp_path / MUTATIONS[0].path
    file.parent.mkdir(parents=True)
    file.write_text("nothing to break here\n")
    with pytest.raises(click.ClickException, match="occurs 0 times"):
        MUTATIONS[0].apply(tmp_path)


def test_every_mechanism_of_the_issue_has_a_mutation() -> None:
    names = {m.name for m in MUTATIONS}
    assert names >= {
        "commit-head-fence", "commit-lease-fence", "redelivery-filter", "conditional-create",
        "key-exists-handling", "adoption-check", "reader-density", "renew-fence", "take-fence",
        "parents-before-children", "watermark-condition", "lake-watermark-check",
        "compaction-file-check", "ingest-error-path", "analytics-totals-check",
        # the IAM replay: an action removed from each function's role
        "iam-ingest-commit", "iam-shard-sync-groups-scan", "iam-producer-put-records",
        "iam-waker-stream-read", "iam-runner-lease-create", "iam-trigger-pass-role",
        "iam-spark-lake-commit", "iam-worker-lease-batch-read",
        "lake-own-commit-recognition", "lake-commit-deletes-nothing",
        "compaction-removes-only-unreferenced", "orphan-reference-check",
        "expiry-keeps-watermark-chain", "glue-version-check",
    }  # fmt: skip
    assert len(names) == len(MUTATIONS)
