"""server/openapi.json against the app: every route documented with its methods, nothing
documented that is not a route, a valid OpenAPI 3.1 document, and the limits it restates equal to
the code's. (What the server answers is held to it by the fuzz test, tests/e2e/test_fuzz_api.py.)
"""

from __future__ import annotations

import json
import re
from typing import Any

import schemathesis
from starlette.routing import Mount, Route

from jobstream.server import batch_api, chat_request, events_api, validation
from jobstream.server.app import create_app
from jobstream.server.openapi import DOCUMENT
from jobstream.settings import Settings
from jobstream.types import JOB_STATUSES

HTTP_METHODS = {"get", "put", "post", "delete", "options", "head", "patch", "trace"}


def document() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DOCUMENT.read_text())
    return loaded


def routed() -> set[tuple[str, str]]:
    """(path, method) of every route of the app, in OpenAPI's spelling."""
    # create_app connects to nothing until its lifespan runs: no database is needed here.
    app = create_app(Settings(database_url="postgresql://nobody@127.0.0.1:1/none"))
    operations: set[tuple[str, str]] = set()
    for route in app.routes:
        if isinstance(route, Route):
            assert route.methods is not None
            # Starlette answers HEAD wherever it answers GET; OpenAPI documents the GET.
            # A parameter's convertor (`{chat_id:path}`) is the router's business, not the API's.
            path = re.sub(r"\{(\w+):\w+\}", r"{\1}", route.path)
            operations |= {(path, method.lower()) for method in route.methods - {"HEAD"}}
        elif isinstance(route, Mount):
            # StaticFiles serves any file under the mount, with GET (and HEAD).
            operations.add((f"{route.path}/{{path}}", "get"))
        else:
            raise AssertionError(f"a route of a kind this test does not know: {route!r}")
    return operations


def documented(doc: dict[str, Any]) -> set[tuple[str, str]]:
    return {
        (path, method)
        for path, item in doc["paths"].items()
        for method in item
        if method in HTTP_METHODS
    }


def test_every_route_is_documented_and_every_documented_operation_is_a_route() -> None:
    routes, doc = routed(), documented(document())
    assert routes - doc == set(), "routes missing from server/openapi.json"
    assert doc - routes == set(), "operations in server/openapi.json that no route serves"


def test_the_document_is_valid_openapi_3_1() -> None:
    doc = document()
    assert doc["openapi"].startswith("3.1.")
    schemathesis.openapi.from_dict(doc).validate()  # raises on any violation of the 3.1 schema


def test_operation_ids_are_unique_and_every_link_names_one() -> None:
    doc = document()
    operations = [
        item[method] for item in doc["paths"].values() for method in item if method in HTTP_METHODS
    ]
    ids = [operation["operationId"] for operation in operations]
    assert len(ids) == len(set(ids))
    for operation in operations:
        for response in operation["responses"].values():
            for link in response.get("links", {}).values():
                assert link["operationId"] in ids


def test_every_reference_resolves() -> None:
    doc = document()

    def refs(node: object) -> list[str]:
        if isinstance(node, dict):
            found = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
            return found + [ref for value in node.values() for ref in refs(value)]
        if isinstance(node, list):
            return [ref for value in node for ref in refs(value)]
        return []

    for ref in refs(doc):
        assert ref.startswith("#/"), ref
        node: Any = doc
        for part in ref[2:].split("/"):
            node = node[part.replace("~1", "/").replace("~0", "~")]


def test_the_limits_it_restates_are_the_codes() -> None:
    schemas = document()["components"]["schemas"]
    assert schemas["JobStatus"]["enum"] == list(JOB_STATUSES)
    assert schemas["BatchCreate"]["properties"]["jobs"]["maxItems"] == batch_api.MAX_ITEMS
    job = schemas["JobCreate"]["properties"]
    assert job["delay_s"]["maximum"] == validation.MAX_DELAY_S
    assert job["retain_s"]["maximum"] == validation.MAX_RETAIN_S
    assert job["prompt"]["maxLength"] == validation.INPUT_MAX_CHARS
    assert job["messages"]["maxItems"] == validation.MAX_MESSAGES
    assert schemas["Fault"]["properties"]["kind"]["enum"] == list(validation.FAULT_KINDS)
    assert (
        f"{validation.METADATA_MAX_BYTES:,} bytes"
        in (schemas["JobCreate"]["properties"]["metadata"]["description"])
    )
    [wait] = [
        p
        for p in document()["paths"]["/api/jobs/{job_id}/events"]["get"]["parameters"]
        if p.get("name") == "wait"
    ]
    assert wait["schema"]["maximum"] == events_api.MAX_WAIT_S
    chat = schemas["ChatCreate"]["properties"]
    assert chat["id"]["maxLength"] == chat_request.MAX_CHAT_ID_CHARS
    assert chat["messages"]["maxItems"] == validation.MAX_MESSAGES
    assert chat["trigger"]["enum"] == list(chat_request.TRIGGERS)
    assert schemas["UIMessage"]["properties"]["role"]["enum"] == list(chat_request.UI_ROLES)
