"""The WAL one batch of statements writes, and where it goes: bench.queue_wal's meter.

The work runs on a pool of one connection (one backend); an observer connection around it reads
two accounts of the same WAL, which must agree:
- the backend's own counters (pg_stat_get_backend_wal, PostgreSQL 18): records, full-page
  images, bytes, whoever else writes meanwhile;
- the records themselves between the insert positions before and after (pg_walinspect), each
  put to the relation of its first block (a table, an index, a catalog) or, without blocks, to
  its kind (a commit). Records the bgwriter logs on its own (Standby RUNNING_XACTS) are left out.
And the tables' row counters (pg_stat_user_tables): rows inserted, updated (HOT), deleted; and
the CPU the backend spent on the batch, from Linux's /proc/<pid>/schedstat (nanoseconds on a
core, where /proc/<pid>/stat counts ticks of 10 ms, longer than a batch), when the server runs
on this machine.

A backend publishes its counters when it goes idle, at most once a second unless asked:
pg_stat_force_next_flush() on the worker's connection before each reading makes them current.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import astuple, dataclass, field
from pathlib import Path

import asyncpg

# Per record: its relation (the first block's; NULL without blocks), that relation's kind, its
# fork when not the main one, and how many of its blocks carry a full-page image. Tablespace 0
# is how pg_filenode_relation names the database's default one.
RECORDS = """
WITH blocks AS (
    SELECT start_lsn,
           (array_agg(CASE WHEN relfilenode IS NULL THEN NULL
                           ELSE pg_filenode_relation(
                                  CASE WHEN reltablespace = (SELECT dattablespace FROM pg_database
                                                              WHERE datname = current_database())
                                       THEN 0 ELSE reltablespace END, relfilenode) END
                      ORDER BY block_id))[1] AS rel,
           (array_agg(relfilenode ORDER BY block_id))[1] AS filenode,
           (array_agg(relforknumber ORDER BY block_id))[1] AS fork,
           count(*) FILTER (WHERE block_fpi_length > 0) AS fpi
      FROM pg_get_wal_block_info($1::text::pg_lsn, $2::text::pg_lsn, false)
     GROUP BY start_lsn
)
SELECT CASE WHEN b.start_lsn IS NULL THEN r.resource_manager || ' ' || r.record_type
            WHEN b.rel IS NULL THEN 'filenode ' || b.filenode
            ELSE b.rel::regclass::text END
       || CASE WHEN b.fork > 0 THEN ' (' || (ARRAY['fsm', 'vm', 'init'])[b.fork] || ')' ELSE '' END
         AS place,
       c.relkind::text AS kind, r.resource_manager AS rmgr,
       split_part(r.record_type, '+', 1) AS record_type,
       count(*) AS records, coalesce(sum(b.fpi), 0)::bigint AS fpi,
       sum(r.record_length)::bigint AS bytes, sum(r.fpi_length)::bigint AS fpi_bytes
  FROM pg_get_wal_records_info($1::text::pg_lsn, $2::text::pg_lsn) r
  LEFT JOIN blocks b ON b.start_lsn = r.start_lsn
  LEFT JOIN pg_class c ON c.oid = b.rel
 WHERE NOT (r.resource_manager = 'Standby' AND r.record_type = 'RUNNING_XACTS')
 GROUP BY 1, 2, 3, 4
"""
FLUSH = "SELECT pg_logical_emit_message(false, 'queue_wal', '', true)"
BACKEND = "SELECT wal_records, wal_fpi, wal_bytes FROM pg_stat_get_backend_wal($1)"
TABLES = """
SELECT relname, n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_newpage_upd, n_tup_del
  FROM pg_stat_user_tables
"""
# The btree records that put an entry in a leaf page: the insert's, a posting-list split's,
# and a page split's (which carries the new entry). Upper-level inserts are the splits' upkeep.
INDEX_ENTRY_RECORDS = frozenset({"INSERT_LEAF", "INSERT_POST", "SPLIT_L", "SPLIT_R"})


@dataclass
class Place:
    """The WAL that went to one relation (or, with no block, one kind of record)."""

    kind: str | None = None  # pg_class.relkind: 'r' table, 'i' index; None without a relation
    records: int = 0
    fpi: int = 0
    bytes: int = 0
    fpi_bytes: int = 0
    types: Counter[str] = field(default_factory=Counter)  # "Heap HOT_UPDATE" -> records

    @property
    def index_entries(self) -> int:
        if self.kind != "i":
            return 0
        return sum(n for t, n in self.types.items() if t.split()[-1] in INDEX_ENTRY_RECORDS)

    def add(self, other: Place) -> None:
        self.kind = self.kind or other.kind
        self.records += other.records
        self.fpi += other.fpi
        self.bytes += other.bytes
        self.fpi_bytes += other.fpi_bytes
        self.types.update(other.types)


@dataclass(frozen=True)
class Rows:
    """A table's row counters: inserted, updated, of which HOT, of which moved to another page
    (its old version then takes a Heap LOCK record as well), deleted."""

    ins: int = 0
    upd: int = 0
    hot: int = 0
    moved: int = 0
    dele: int = 0

    def __add__(self, other: Rows) -> Rows:
        return Rows(*(a + b for a, b in zip(astuple(self), astuple(other), strict=True)))

    def __sub__(self, other: Rows) -> Rows:
        return Rows(*(a - b for a, b in zip(astuple(self), astuple(other), strict=True)))


@dataclass(frozen=True)
class Counts:
    """WAL by the backend's own counters."""

    records: int = 0
    fpi: int = 0
    bytes: int = 0

    def __add__(self, other: Counts) -> Counts:
        return Counts(self.records + other.records, self.fpi + other.fpi, self.bytes + other.bytes)

    def __sub__(self, other: Counts) -> Counts:
        return Counts(self.records - other.records, self.fpi - other.fpi, self.bytes - other.bytes)


@dataclass
class Sample:
    """What one or more measured batches wrote, for `jobs` jobs."""

    jobs: int = 0
    places: dict[str, Place] = field(default_factory=dict)
    backend: Counts = Counts()
    tables: dict[str, Rows] = field(default_factory=dict)
    # Seconds the backend ran on a core; None when its /proc is not this machine's.
    cpu_s: float | None = 0.0

    @property
    def records(self) -> int:
        return sum(p.records for p in self.places.values())

    @property
    def fpi(self) -> int:
        return sum(p.fpi for p in self.places.values())

    @property
    def bytes(self) -> int:
        return sum(p.bytes for p in self.places.values())

    @property
    def fpi_bytes(self) -> int:
        return sum(p.fpi_bytes for p in self.places.values())

    @property
    def index_entries(self) -> int:
        return sum(p.index_entries for p in self.places.values())

    @property
    def rows(self) -> Rows:
        return sum(self.tables.values(), Rows())

    @property
    def agrees(self) -> bool:
        """Do the records found add up to the backend's own counts? No when another process
        (autovacuum, a checkpoint's end) wrote between the two readings."""
        return Counts(self.records, self.fpi, self.bytes) == self.backend

    def add(self, other: Sample) -> None:
        self.jobs += other.jobs
        for name, place in other.places.items():
            self.places.setdefault(name, Place()).add(place)
        self.backend = self.backend + other.backend
        for name, rows in other.tables.items():
            self.tables[name] = self.tables.get(name, Rows()) + rows
        if self.cpu_s is None or other.cpu_s is None:
            self.cpu_s = None
        else:
            self.cpu_s += other.cpu_s

    @classmethod
    def total(cls, samples: Iterable[Sample]) -> Sample:
        whole = cls()
        for sample in samples:
            whole.add(sample)
        return whole


def _cpu_ns(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0])
    except (OSError, ValueError, IndexError):  # another machine's backend, or no /proc
        return None


class Meter:
    """Measures batches of work on `pool`, a pool of one connection, from its own connection."""

    def __init__(
        self, observer: asyncpg.Connection, pool: asyncpg.Pool, pid: int, *, checkpoint: bool
    ) -> None:
        self._observer = observer
        self._pool = pool
        self._pid = pid
        self._checkpoint = checkpoint

    @classmethod
    async def open(cls, url: str, pool: asyncpg.Pool, *, checkpoint: bool = True) -> Meter:
        """`checkpoint`: a CHECKPOINT before every batch (measure's docstring says why); off,
        a batch pays full-page images only for pages no batch touched since the last one
        PostgreSQL made of its own accord, as a server under steady load does."""
        if pool.get_max_size() != 1:
            raise ValueError("the meter reads one backend's counters: a pool of one connection")
        observer = await asyncpg.connect(url)
        await observer.execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
        pid = await pool.fetchval("SELECT pg_backend_pid()")
        return cls(observer, pool, pid, checkpoint=checkpoint)

    async def close(self) -> None:
        await self._observer.close()

    async def measure(self, jobs: int, work: Callable[[], Awaitable[object]]) -> Sample:
        """Run `work` (on the pool) and return what it wrote. A CHECKPOINT first (unless the
        meter was opened without), so that every batch pays for the full-page images of the
        pages it touches first: the same for every batch, whatever ran before it."""
        if self._checkpoint:
            await self._observer.execute("CHECKPOINT")
        await self._flush()
        # The LSN last before and first after: the observer's own reads of the catalogs may
        # write (hint bits after a checkpoint, in full pages), and must land outside the range.
        tables, counts = await self._tables(), await self._counts()
        lsn = await self._lsn()
        cpu_before = _cpu_ns(self._pid)
        await work()
        cpu_after = _cpu_ns(self._pid)
        await self._flush()
        lsn_after = await self._lsn()
        counts_after, tables_after = await self._counts(), await self._tables()
        # pg_walinspect reads only WAL already flushed, and a janitor's commit does not wait for
        # that: a record of the observer's own, after the range, flushed at once (PostgreSQL 17).
        await self._observer.fetchval(FLUSH)
        rows = await self._observer.fetch(RECORDS, lsn, lsn_after)
        places: dict[str, Place] = {}
        for r in rows:
            place = places.setdefault(r["place"], Place(kind=r["kind"]))
            place.add(
                Place(
                    kind=r["kind"],
                    records=r["records"],
                    fpi=r["fpi"],
                    bytes=r["bytes"],
                    fpi_bytes=r["fpi_bytes"],
                    types=Counter({f"{r['rmgr']} {r['record_type']}": r["records"]}),
                )
            )
        changed = {
            name: delta
            for name, after in tables_after.items()
            if (delta := after - tables.get(name, Rows())) != Rows()
        }
        cpu_s = None
        if cpu_before is not None and cpu_after is not None:
            cpu_s = (cpu_after - cpu_before) / 1e9
        return Sample(jobs, places, counts_after - counts, changed, cpu_s)

    async def _flush(self) -> None:
        # Flushed when the backend next goes idle: right after this statement.
        await self._pool.execute("SELECT pg_stat_force_next_flush()")

    async def _lsn(self) -> str:
        lsn = await self._observer.fetchval("SELECT pg_current_wal_insert_lsn()::text")
        assert isinstance(lsn, str)
        return lsn

    async def _counts(self) -> Counts:
        wal = await self._observer.fetchrow(BACKEND, self._pid)
        assert wal is not None
        return Counts(wal["wal_records"], wal["wal_fpi"], int(wal["wal_bytes"]))

    async def _tables(self) -> dict[str, Rows]:
        return {
            r["relname"]: Rows(
                r["n_tup_ins"],
                r["n_tup_upd"],
                r["n_tup_hot_upd"],
                r["n_tup_newpage_upd"],
                r["n_tup_del"],
            )
            for r in await self._observer.fetch(TABLES)
        }
