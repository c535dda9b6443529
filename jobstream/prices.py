"""The price catalogue: what a model call costs, per provider and model.

The package ships one (jobstream/prices.toml, its header says where each price comes from); an
operator's file (JOBSTREAM_PRICES_FILE, the same format) replaces its entries or adds to them.
Both are read and checked when the settings are (a malformed file stops start-up, naming the file
and the entry), and every amount of money the server and the worker compute comes from here: a
create's reservation, an unknown outcome's estimate, and each call's cost (the providers' `cost`).

A `Price` says how it was found (`source`): a shipped entry (`catalogue`), the operator's
(`operator`), or neither, the provider's `default` price. The attempt's row records it
(job_attempts.price_source), so that a cost made up from a default is never mistaken for a
list price. Amounts are Decimals throughout: TOML numbers are read as Decimals, never floats.
"""

from __future__ import annotations

import functools
import os
import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from importlib import resources
from typing import Any, Final, Literal

PriceSource = Literal["catalogue", "operator", "default"]

_MILLION: Final = Decimal(1_000_000)
# An attempt of several calls records its least certain price: a default makes the whole cost a
# guess, an operator's price is not the list's.
_CERTAINTY: Final[dict[PriceSource, int]] = {"catalogue": 0, "operator": 1, "default": 2}
# A snapshot's name is its model's with a date (OpenAI's -2024-08-06, Anthropic's -20250929, the
# clouds' @20250929) or `-latest` after it. Only these are cut: a looser prefix would price o3-pro
# (ten times o3's price) as o3.
_SNAPSHOT: Final = re.compile(r"(?:-\d{4}-\d{2}-\d{2}|-\d{8}|@\d{8}|-latest)$")
_ENTRY_KEYS: Final = frozenset({"input", "output", "cache_read", "cache_write", "aliases"})
_SECTION_KEYS: Final = frozenset(
    {"default", "models", "cache_read_of_input", "cache_write_of_input"}
)


class PricesError(ValueError):
    """A price file is missing, unreadable or malformed; the message names the file and entry."""


@dataclass(frozen=True, slots=True)
class Price:
    """USD per million tokens of each kind, and how the price was found."""

    input: Decimal
    output: Decimal
    cache_read: Decimal
    cache_write: Decimal
    source: PriceSource
    # The catalogue's name it was found under; None for a provider's default.
    model: str | None = None

    def cost(
        self,
        input_tokens: int,
        output_tokens: int,
        cache_read_tokens: int = 0,
        cache_write_tokens: int = 0,
    ) -> Decimal:
        """What the tokens cost, exactly. `input_tokens` are those at the input price: a
        provider whose count includes its cache's tokens takes them out first."""
        return (
            input_tokens * self.input
            + output_tokens * self.output
            + cache_read_tokens * self.cache_read
            + cache_write_tokens * self.cache_write
        ) / _MILLION


@dataclass(frozen=True)
class _Section:
    """A provider's prices: every name and alias (lower case) to its price, and the default."""

    default: Price
    names: Mapping[str, Price]
    entries: Mapping[str, Price]  # the models by their own names, aliases left out


class Prices:
    """The catalogue as loaded: `price_of(provider, model)`."""

    def __init__(self, sections: Mapping[str, _Section]) -> None:
        self._sections = dict(sections)

    def __repr__(self) -> str:
        counts = ", ".join(f"{p}: {len(s.entries)}" for p, s in self._sections.items())
        return f"Prices({counts})"

    @property
    def providers(self) -> tuple[str, ...]:
        return tuple(self._sections)

    def entries(self, provider: str) -> Mapping[str, Price]:
        """The provider's models by their own names (aliases left out)."""
        return self._section(provider).entries

    def default(self, provider: str) -> Price:
        return self._section(provider).default

    def price_of(self, provider: str, model: str) -> Price:
        """The price of a call to `model`: by its exact name or an alias, then by its name without
        a snapshot date or `-latest`; else the provider's default (source `default`)."""
        section = self._section(provider)
        key = model.strip().lower()
        found = section.names.get(key)
        if found is None:
            base = _SNAPSHOT.sub("", key)
            if base != key:
                found = section.names.get(base)
        return section.default if found is None else found

    def _section(self, provider: str) -> _Section:
        try:
            return self._sections[provider]
        except KeyError:
            raise LookupError(f"the price catalogue has no provider {provider!r}") from None


def least_certain(sources: Iterable[PriceSource | None]) -> PriceSource | None:
    """The source an attempt of several calls records: `default` if any call was priced by a
    default, else `operator` if any was by the operator's file; None when no call was priced."""
    known = [source for source in sources if source is not None]
    return max(known, key=_CERTAINTY.__getitem__, default=None)


def load(path: str | os.PathLike[str] | None = None) -> Prices:
    """The shipped catalogue, with the operator's file at `path` over it when one is given.

    Read once per version of the file (its path, size and modification time): the settings of
    every process are checked with it, and tests build many settings.
    """
    if path is None:
        return _shipped_only()
    try:
        stat = os.stat(path)
    except OSError as exc:
        raise PricesError(
            f"JOBSTREAM_PRICES_FILE {path}: cannot be read ({exc.strerror})"
        ) from None
    return _with_operator(os.fspath(path), stat.st_mtime_ns, stat.st_size)


@functools.cache
def _shipped() -> dict[str, _RawSection]:
    source = resources.files("jobstream").joinpath("prices.toml")
    where = f"the shipped price catalogue {source}"
    raw = _read(source.read_text(encoding="utf-8"), where)
    missing = [name for name, section in raw.items() if section.default is None]
    if missing:
        raise PricesError(f"{where}: [{missing[0]}] has no default price")
    return raw


@functools.cache
def _shipped_only() -> Prices:
    return _build(_shipped(), {})


@functools.lru_cache(maxsize=16)
def _with_operator(path: str, mtime_ns: int, size: int) -> Prices:
    where = f"JOBSTREAM_PRICES_FILE {path}"
    try:
        with open(path, encoding="utf-8") as file:
            text = file.read()
    except OSError as exc:
        raise PricesError(f"{where}: cannot be read ({exc.strerror})") from None
    except UnicodeDecodeError:
        raise PricesError(f"{where}: not UTF-8 text") from None
    shipped = _shipped()
    operator = _read(text, where)
    problems = []
    for provider, section in operator.items():
        if provider not in shipped:
            problems.append(
                f"[{provider}] is not a provider of the catalogue "
                f"(it has {', '.join(sorted(shipped))})"
            )
            continue
        names = set(shipped[provider].models) | set(section.models)
        for name, entry in section.models.items():
            for alias in entry.aliases:
                if alias in names:
                    problems.append(
                        f"{_entry_name(provider, name)} aliases: {alias!r} is a model of its "
                        f"own; give it an entry [{provider}.models.{_quoted(alias)}] instead"
                    )
    if problems:
        raise PricesError(f"{where}: " + "; ".join(problems))
    return _build(shipped, operator)


@dataclass(frozen=True)
class _RawEntry:
    input: Decimal
    output: Decimal
    cache_read: Decimal | None
    cache_write: Decimal | None
    aliases: tuple[str, ...]


@dataclass(frozen=True)
class _RawSection:
    default: _RawEntry | None
    models: dict[str, _RawEntry] = field(default_factory=dict)
    cache_read_of_input: Decimal | None = None
    cache_write_of_input: Decimal | None = None


def _read(text: str, where: str) -> dict[str, _RawSection]:
    """One file's sections, every problem in it reported at once."""
    try:
        # Decimals, not floats: 0.1 stays exactly 0.1.
        document = tomllib.loads(text, parse_float=Decimal)
    except tomllib.TOMLDecodeError as exc:
        raise PricesError(f"{where}: not valid TOML ({exc})") from None
    problems: list[str] = []
    sections: dict[str, _RawSection] = {}
    for provider, body in document.items():
        if not isinstance(body, dict):
            problems.append(f"{provider}: expected a table [{provider}]")
            continue
        section = _read_section(provider, body, problems)
        if section is not None:
            sections[provider] = section
    if problems:
        raise PricesError(f"{where}: " + "; ".join(problems))
    return sections


def _read_section(provider: str, body: dict[str, Any], problems: list[str]) -> _RawSection | None:
    before = len(problems)
    for key in sorted(set(body) - _SECTION_KEYS):
        problems.append(
            f"[{provider}] {key}: not a key of a provider's prices "
            f"(expected {', '.join(sorted(_SECTION_KEYS))})"
        )
    read_of, write_of = (
        _amount(body[key], f"[{provider}] {key}", problems) if key in body else None
        for key in ("cache_read_of_input", "cache_write_of_input")
    )
    default = None
    if "default" in body:
        default = _read_entry(f"[{provider}] default", body["default"], problems, aliases=False)
    models: dict[str, _RawEntry] = {}
    raw_models = body.get("models", {})
    if not isinstance(raw_models, dict):
        problems.append(f"[{provider}] models: expected a table [{provider}.models]")
        raw_models = {}
    # Names and aliases are matched in lower case: two that differ only in case are one model.
    seen: dict[str, str] = {}
    for name, raw in raw_models.items():
        label = _entry_name(provider, name)
        key = name.strip().lower()
        if not key:
            problems.append(f"[{provider}.models] an entry has an empty name")
            continue
        entry = _read_entry(label, raw, problems, aliases=True)
        if entry is None:
            continue
        for alias in (key, *entry.aliases):
            if alias in seen:
                problems.append(f"{label}: {alias!r} is also {seen[alias]}")
            seen[alias] = label
        models[key] = entry
    if len(problems) > before:
        return None
    return _RawSection(default, models, read_of, write_of)


def _read_entry(label: str, raw: object, problems: list[str], *, aliases: bool) -> _RawEntry | None:
    if not isinstance(raw, dict):
        problems.append(f"{label}: expected a table such as {{ input = 1.0, output = 2.0 }}")
        return None
    before = len(problems)
    allowed = _ENTRY_KEYS if aliases else _ENTRY_KEYS - {"aliases"}
    for key in sorted(set(raw) - allowed):
        problems.append(
            f"{label} {key}: not a key of a price (expected {', '.join(sorted(allowed))})"
        )
    for key in ("input", "output"):
        if key not in raw:
            problems.append(f"{label}: {key} is missing (USD per million tokens)")
    amounts = {
        key: _amount(raw[key], f"{label} {key}", problems)
        for key in ("input", "output", "cache_read", "cache_write")
        if key in raw
    }
    names: tuple[str, ...] = ()
    if "aliases" in raw and aliases:
        listed = raw["aliases"]
        if not isinstance(listed, list) or not all(
            isinstance(a, str) and a.strip() for a in listed
        ):
            problems.append(f"{label} aliases: expected a list of model names")
        else:
            names = tuple(a.strip().lower() for a in listed)
    if len(problems) > before:
        return None
    return _RawEntry(
        amounts["input"],
        amounts["output"],
        amounts.get("cache_read"),
        amounts.get("cache_write"),
        names,
    )


def _amount(value: object, label: str, problems: list[str]) -> Decimal:
    # bool is an int to Python, but `input = true` is a mistake, not a price.
    if isinstance(value, bool) or not isinstance(value, int | Decimal):
        problems.append(f"{label}: expected a number, got {value!r}")
        return Decimal(0)
    amount = Decimal(value)
    if not amount.is_finite() or amount < 0:
        problems.append(f"{label}: must be a finite number, at least 0, got {value}")
        return Decimal(0)
    return amount


def _build(shipped: dict[str, _RawSection], operator: dict[str, _RawSection]) -> Prices:
    sections = {}
    for provider, base in shipped.items():
        over = operator.get(provider)
        assert base.default is not None  # _shipped checked it
        default = _price(base.default, base, "default", None)
        entries = {name: _price(e, base, "catalogue", name) for name, e in base.models.items()}
        aliases = {a: name for name, e in base.models.items() for a in e.aliases}
        if over is not None:
            # The operator's multiples fill in the operator's entries; the shipped ones keep the
            # multiples they were written with.
            read_of, write_of = over.cache_read_of_input, over.cache_write_of_input
            multiples = _RawSection(
                None,
                cache_read_of_input=base.cache_read_of_input if read_of is None else read_of,
                cache_write_of_input=base.cache_write_of_input if write_of is None else write_of,
            )
            if over.default is not None:
                default = _price(over.default, multiples, "default", None)
            for name, entry in over.models.items():
                entries[name] = _price(entry, multiples, "operator", name)
                aliases.update(dict.fromkeys(entry.aliases, name))
        names = {**{a: entries[name] for a, name in aliases.items()}, **entries}
        sections[provider] = _Section(default, names, entries)
    return Prices(sections)


def _price(entry: _RawEntry, section: _RawSection, source: PriceSource, name: str | None) -> Price:
    read_of = _first(section.cache_read_of_input, Decimal(1))
    write_of = _first(section.cache_write_of_input, Decimal(1))
    return Price(
        input=entry.input,
        output=entry.output,
        cache_read=_first(entry.cache_read, entry.input * read_of),
        cache_write=_first(entry.cache_write, entry.input * write_of),
        source=source,
        model=name,
    )


def _first(value: Decimal | None, otherwise: Decimal) -> Decimal:
    return otherwise if value is None else value


def _entry_name(provider: str, name: str) -> str:
    return f"[{provider}.models.{_quoted(name)}]"


def _quoted(name: str) -> str:
    return '"' + name.replace("\\", "\\\\").replace('"', '\\"') + '"'
