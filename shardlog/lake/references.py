"""Which files an Iceberg table references: what no cleanup may delete.

One walk of the table's metadata, its snapshots and their manifests, shared by the lake
commit (a file a failed commit wrote is deleted only when no snapshot references it),
maintenance (orphan removal) and compaction (its own leftovers).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyiceberg.table import Table


def referenced_files(table: Table) -> set[str]:
    """Every file a remaining snapshot or the metadata references (full ``s3://`` URIs):
    metadata files, manifest lists, manifests, data and delete files, and the statistics
    files another engine may have written."""
    io = table.io
    metadata = table.metadata
    files = {table.metadata_location}
    files |= {entry.metadata_file for entry in metadata.metadata_log}
    files |= {stats.statistics_path for stats in metadata.statistics}
    files |= {stats.statistics_path for stats in metadata.partition_statistics}
    for snapshot in table.snapshots():
        files.add(snapshot.manifest_list)
        for manifest in snapshot.manifests(io):
            files.add(manifest.manifest_path)
            for entry in manifest.fetch_manifest_entry(io, discard_deleted=False):
                files.add(entry.data_file.file_path)
    return files
