"""A view of a lake table whose FileIO cannot delete, for commits (``shardlog.lake.commit``).

pyiceberg deletes the manifests and manifest list of a commit when the catalog refuses it.
A refusal is not proof that the commit did not land: Glue refuses the resend of an
``UpdateTable`` it applied but whose answer was lost, and the files pyiceberg would delete
are then those of the table's current snapshot. Through this view nothing is deleted; the
files of a commit that truly did not land are orphans that ``shardlog.lake.maintenance``
removes once no snapshot references them.
"""

from __future__ import annotations

from typing import Any

from pyiceberg.io import FileIO
from pyiceberg.table import Table


class KeepingFileIO(FileIO):
    """A table's FileIO minus deletes, for the commit: pyiceberg deletes a commit's manifests
    when the catalog refuses it, which after a refused resend of an applied ``UpdateTable``
    are the manifests of the table's current snapshot. What a commit that did not land
    wrote is left to maintenance, which removes only what no snapshot references."""

    def __init__(self, io: FileIO) -> None:
        super().__init__(io.properties)
        self._io = io
        self.kept: list[str] = []  # what pyiceberg asked to delete

    def new_input(self, location: str) -> Any:
        return self._io.new_input(location)

    def new_output(self, location: str) -> Any:
        return self._io.new_output(location)

    def delete(self, location: Any) -> None:
        self.kept.append(location if isinstance(location, str) else location.location)


def keeping_view(table: Table) -> Table:
    """The same table (metadata, catalog) through a FileIO that cannot delete."""
    io = table.io if isinstance(table.io, KeepingFileIO) else KeepingFileIO(table.io)
    return Table(table.name(), table.metadata, table.metadata_location, io, table.catalog)
