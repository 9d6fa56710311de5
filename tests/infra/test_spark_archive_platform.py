"""The Spark archive's wheels run where the template's EMR Serverless application runs:
its architecture and release (Amazon Linux 2023's glibc, the Python the runs name)."""

from __future__ import annotations

import tarfile
from email.parser import Parser

import pytest

from shardlog.spark.archive import REPO_ROOT, EmrPlatform, build, emr_platform, wheel_runs_on
from shardlog.spark.jobs import ARCHIVE_NAME, EMR_PYTHON
from tests.infra.cdk_synth import Synthesized


def _application(synth: Synthesized) -> dict[str, str]:
    (app,) = synth.resources("AWS::EMRServerless::Application").values()
    return dict(app["Properties"])


def test_every_wheel_of_the_archive_runs_on_the_applications_platform(synth: Synthesized) -> None:
    props = _application(synth)
    platform = emr_platform(props["ReleaseLabel"], props["Architecture"])
    assert f"/usr/bin/python{platform.python}" == EMR_PYTHON
    archive = build(REPO_ROOT / "build" / "spark" / ARCHIVE_NAME)
    tags: dict[str, list[str]] = {}
    with tarfile.open(archive) as tar:
        for member in tar:
            if member.name.endswith(".dist-info/WHEEL"):
                meta = Parser().parsestr(tar.extractfile(member).read().decode())  # type: ignore[union-attr]
                tags[member.name.split("/")[0]] = meta.get_all("Tag") or []
    assert any(name.startswith("pyiceberg-") for name in tags)
    wrong = {
        name: found
        for name, found in tags.items()
        if not any(wheel_runs_on(tag, platform) for tag in found)
    }
    assert wrong == {}


def test_the_platform_check_can_fail() -> None:
    al2023 = emr_platform("emr-7.9.0", "X86_64")
    assert wheel_runs_on("cp311-cp311-manylinux_2_17_x86_64", al2023)
    assert wheel_runs_on("py3-none-any", al2023)
    assert not wheel_runs_on("cp312-cp312-manylinux_2_17_x86_64", al2023)  # another Python
    assert not wheel_runs_on("cp311-cp311-manylinux_2_39_x86_64", al2023)  # newer glibc
    assert not wheel_runs_on("cp311-cp311-manylinux_2_17_aarch64", al2023)  # another CPU
    assert not wheel_runs_on("cp311-cp311-macosx_11_0_arm64", EmrPlatform("x", (2, 34), "3.11"))
    for release, arch in (
        ("emr-6.15.0", "X86_64"),
        ("emr-7.0.0", "X86_64"),
        ("emr-7.9.0", "ARM64"),
    ):
        with pytest.raises(ValueError, match=r"built for emr-7\.1"):
            emr_platform(release, arch)
