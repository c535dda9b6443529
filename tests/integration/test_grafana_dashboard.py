"""deploy/grafana/jobstream.json queries only what /metrics exports: every metric name in every
PromQL expression is a family a live server's /metrics declares (with the suffix its type
gives its samples: a histogram's `_bucket`, `_sum`, `_count`), and every
label a selector names is one that family's samples carry.

Read from a real server's scrape, not from a list: a metric renamed in server/metrics.py fails
this test until the dashboard follows.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx

from tests.support.api import create
from tests.support.polling import eventually

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "jobstream.json"
METRIC = re.compile(r"\bjobstream_[a-zA-Z0-9_]+")
SELECTOR = re.compile(r"(jobstream_[a-zA-Z0-9_]+)\{([^}]*)\}")
BY = re.compile(r"\bby \(([^)]*)\)")
SUFFIXES = {"histogram": ("_bucket", "_sum", "_count")}


def expressions() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    assert exprs, "the dashboard has no queries"
    return exprs


def declared(text: str) -> dict[str, str]:
    """Every family /metrics declares, with its type (`# TYPE name type`)."""
    return dict(
        (line.split()[2], line.split()[3]) for line in text.splitlines()
        if line.startswith("# TYPE ")
    )  # fmt: skip


def labels(text: str) -> dict[str, set[str]]:
    """The label names each sample name carries."""
    found: dict[str, set[str]] = {}
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        name, _, rest = line.partition("{")
        if not rest:
            name = line.split()[0]
        found.setdefault(name, set()).update(re.findall(r'(\w+)="', rest.partition("}")[0]))
    return found


def family(name: str, types: dict[str, str]) -> str | None:
    """The family a sample name belongs to, if /metrics declares one."""
    if name in types and types[name] != "histogram":
        return name  # a gauge, or a counter as text format 0.0.4 names it (with `_total`)
    for kind, suffixes in SUFFIXES.items():
        for suffix in suffixes:
            base = name.removesuffix(suffix)
            if name.endswith(suffix) and types.get(base) == kind:
                return base
    return None


async def test_every_query_of_the_dashboard_names_what_metrics_exports(
    client: httpx.AsyncClient,
) -> None:
    # A job that ran: the per-provider families have samples, so their labels can be checked.
    job = await create(client, simulate={"tokens": 3, "tokens_per_second": 0})
    assert job["status"] == "queued"

    async def scrape() -> str:
        return (await client.get("/metrics")).text

    text = await eventually(scrape, lambda t: "jobstream_jobs_created_total 1.0" in t,
                            what="the create is counted")  # fmt: skip
    types, carried = declared(text), labels(text)
    for expr in expressions():
        for name in METRIC.findall(expr):
            assert family(name, types) is not None, f"{name} (in {expr!r}) is not exported"
        for name, selector in SELECTOR.findall(expr):
            for label in re.findall(r"(\w+)\s*[!=~]", selector):
                assert label in carried.get(name, set()) or not carried.get(name), (
                    f"{name} has no label {label} (in {expr!r})"
                )
        names = METRIC.findall(expr)
        for grouped in BY.findall(expr):
            for label in (g.strip() for g in grouped.split(",")):
                assert any(label in carried.get(n, set()) for n in names), (
                    f"no metric of {expr!r} carries {label}"
                )
