"""Schema evolution of a declared lake table: its declared shape against its Iceberg schema.

When a declaration changes (``shardlog.lake.declared``), the typed table's Iceberg schema
follows, before any file of the new shape is written (typed compaction and backfill open
the table through ``evolve``). Compared field by field, by name, nested ones too:

- a property declared that the table lacks: **added** as an optional column
  (``update_schema().add_column``); the rows already in the table read it as null until a
  backfill (``shardlog.spark.backfill``) re-derives them from the log. A new property the
  declaration marks ``required`` is refused on a table with rows: those rows lack it;
- a type **widened**: int -> long, float -> double, decimal(P, S) -> decimal(P', S) with
  P' > P (``update_column``): every value already written reads the same;
- a column the table has and the declaration no longer names: kept (its old values stay;
  new rows have none). Dropping a column is for another engine: rows would be lost;
- anything else: **refused**, one ``LakeEvolutionError`` naming the table and every field:
  a narrowed type, a type changed to another (a string to a number, a scalar to an object),
  a decimal's scale changed, a log column changed.

A schema commit is metadata only (no snapshot: the watermarks are untouched) and is
idempotent: a commit that fails (refused by a concurrent commit, or its answer lost) is
followed by reading the table again and planning again from what it has, so a change that
landed is not applied twice and two runs evolving at once both end on the declared shape.
The table's name mapping (the executors' files carry no field ids) follows the added
columns: pyiceberg updates it in the same commit.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from shardlog.lake.declared import JsonField, LakeTableDeclaration, column_name
from shardlog.lake.exceptions import LakeCommitUnknownError, LakeSchemaError

if TYPE_CHECKING:  # pragma: no cover
    from pyiceberg.schema import Schema
    from pyiceberg.table import Table
    from pyiceberg.table.update.schema import UpdateSchema
    from pyiceberg.types import IcebergType

MAX_EVOLVE_ATTEMPTS = 5


class LakeEvolutionError(LakeSchemaError):
    """A declaration change the table's schema cannot follow: names the table and fields."""


@dataclass(frozen=True)
class Change:
    """One schema change: a column added (optional) or a column's type widened."""

    kind: Literal["add", "widen"]
    path: tuple[str, ...]
    type: IcebergType
    doc: str = ""

    def describe(self) -> str:
        return f"{self.kind} {'.'.join(self.path)} {self.type}"

    def apply(self, update: UpdateSchema) -> None:
        if self.kind == "add":
            update.add_column(self.path, self.type, doc=self.doc or None)
        else:
            update.update_column(self.path, field_type=self.type)


def plan_changes(
    current: Schema, declared: LakeTableDeclaration, table: str, *, has_rows: bool
) -> list[Change]:
    """The changes that bring ``current`` to the declared shape, or ``LakeEvolutionError``
    naming every field that cannot follow (see the module docstring)."""
    from pyiceberg.types import StructType

    plan = _Plan(frozenset(_required_paths(declared.payload)), has_rows)
    wanted = declared.typed_schema().iceberg()
    plan.struct((), StructType(*current.fields), StructType(*wanted.fields))
    if plan.problems:
        raise LakeEvolutionError(
            f"lake table {table}: schema change refused: {'; '.join(plan.problems)}"
        )
    return plan.changes


def evolve(
    table: Table, declared: LakeTableDeclaration, *, max_attempts: int = MAX_EVOLVE_ATTEMPTS
) -> list[Change]:
    """Bring the table's schema to the declared shape; the changes this call committed."""
    from shardlog.lake.commit import commit_failures

    name = ".".join(table.name())
    failure = ""
    for _ in range(max_attempts):
        changes = plan_changes(
            table.schema(), declared, name, has_rows=table.current_snapshot() is not None
        )
        if not changes:
            return []
        try:
            with table.update_schema() as update:
                for change in changes:
                    change.apply(update)
            return changes
        except commit_failures() as exc:  # landed or not: read again, plan from what it has
            failure = f"{type(exc).__name__}: {exc}"
            table.refresh()
    raise LakeCommitUnknownError(
        f"lake table {name}: schema change not confirmed after {max_attempts} commits "
        f"({failure}); the next run reads the table and plans again"
    )


@dataclass
class _Plan:
    required: frozenset[tuple[str, ...]]
    has_rows: bool
    changes: list[Change] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def struct(self, path: tuple[str, ...], have: IcebergType, want: IcebergType) -> None:
        from pyiceberg.types import StructType

        assert isinstance(have, StructType) and isinstance(want, StructType)
        found = {f.name: f for f in have.fields}
        for new in want.fields:
            where = (*path, new.name)
            old = found.get(new.name)
            if old is None:
                self._add(where, new.field_type, new.doc or "", new.required)
            elif old.required != new.required:
                self.problems.append(
                    f"{_dotted(where)}: required {old.required} cannot become {new.required}"
                )
            else:
                self.type(where, old.field_type, new.field_type)

    def type(self, where: tuple[str, ...], have: IcebergType, want: IcebergType) -> None:
        from pyiceberg.types import ListType, StructType

        if isinstance(have, StructType) and isinstance(want, StructType):
            self.struct(where, have, want)
        elif isinstance(have, ListType) and isinstance(want, ListType):
            self.type((*where, "element"), have.element_type, want.element_type)
        elif have == want:
            return
        elif widens(have, want):
            self.changes.append(Change("widen", where, want))
        else:
            how = "narrowing" if widens(want, have) else "a type change"
            self.problems.append(
                f"{_dotted(where)}: {have} cannot become {want} ({how}; only adding an "
                "optional property and widening int->long, float->double, decimal precision "
                "up are allowed)"
            )

    def _add(self, where: tuple[str, ...], kind: IcebergType, doc: str, required: bool) -> None:
        if required or (self.has_rows and where in self.required):
            self.problems.append(
                f"{_dotted(where)}: a new property must be optional (the table's rows lack it)"
            )
            return
        self.changes.append(Change("add", where, kind, doc))


def widens(have: IcebergType, want: IcebergType) -> bool:
    """Whether every value of ``have`` reads unchanged as ``want`` (Iceberg's promotions)."""
    from pyiceberg.types import DecimalType, DoubleType, FloatType, IntegerType, LongType

    if isinstance(have, DecimalType) and isinstance(want, DecimalType):
        return have.scale == want.scale and want.precision > have.precision
    return (type(have), type(want)) in ((IntegerType, LongType), (FloatType, DoubleType))


def _required_paths(node: JsonField, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """Column paths of the properties the declaration marks required (nested ones too)."""
    for key, child in node.properties.items():
        where = (*path, column_name(key))
        if key in node.required:
            yield where
        yield from _required_paths(child, where)


def _dotted(path: tuple[str, ...]) -> str:
    return ".".join(path)
