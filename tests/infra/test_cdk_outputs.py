"""Stable output names: scripts and the CLI read them; renaming one breaks deployments."""

from __future__ import annotations

from infra import constants as IC
from tests.infra.cdk_synth import Synthesized


def test_outputs_have_their_stable_names(synth: Synthesized) -> None:
    names = {value for key, value in vars(IC).items() if key.startswith("OUTPUT_")}
    assert names
    assert names <= set(synth.json["Outputs"])
