"""Schemathesis hooks for the job API's bounded run
(server/tests/integration/http_api.rs): checks of the streamed results,
whose media types Schemathesis does not read itself.

- NDJSON: every line is a JSON object matching the document's
  ``ResultRecord`` schema;
- CSV: the header row the document names comes first, and every row has
  its six columns.
"""

import csv
import io
import json
import os
import urllib.request

import jsonschema
import schemathesis
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

with urllib.request.urlopen(os.environ["COLBALL_OPENAPI_URL"]) as _response:
    _DOCUMENT = json.load(_response)
_REGISTRY = Registry().with_resource("urn:colball", Resource.from_contents(_DOCUMENT, default_specification=DRAFT202012))
_RECORD = {"$ref": "urn:colball#/components/schemas/ResultRecord"}
_HEADER = ["id", "moves", "solution", "strategy", "time_us", "error"]


@schemathesis.check
def results_match_the_document(ctx, response, case):
    """Each streamed result matches the documented schema."""
    if response.status_code != 200:
        return None
    content_type = response.headers.get("content-type", [""])
    content_type = content_type[0] if isinstance(content_type, list) else content_type
    text = response.content.decode("utf-8")
    if content_type.startswith("application/x-ndjson"):
        for number, line in enumerate(text.splitlines(), 1):
            try:
                jsonschema.validate(json.loads(line), _RECORD, registry=_REGISTRY)
            except (ValueError, jsonschema.ValidationError) as e:
                raise AssertionError(f"NDJSON line {number} is off the document: {e}") from e
    elif content_type.startswith("text/csv"):
        rows = list(csv.reader(io.StringIO(text)))
        if not rows or rows[0] != _HEADER:
            raise AssertionError(f"CSV without its header row: {rows[:1]}")
        for number, row in enumerate(rows[1:], 2):
            if len(row) != len(_HEADER):
                raise AssertionError(f"CSV row {number} has {len(row)} columns: {row}")
    return None
