"""The JSON report validates against shared/contract/report.schema.json for every bundle."""

import json

import jsonschema
import pytest

from tests.conftest import SHARED, shared_bundles

SCHEMA_PATH = SHARED / "contract" / "report.schema.json"


@pytest.mark.parametrize("bundle", shared_bundles(), ids=lambda p: p.name)
def test_report_validates(shared_case, bundle):
    if not SCHEMA_PATH.exists():
        pytest.skip("schema not available")
    schema = json.loads(SCHEMA_PATH.read_text())
    case, _ = shared_case(bundle.name)
    report = json.loads(case.to_json())
    jsonschema.validate(report, schema)
    assert report["schema"] == "forensics.report/1"
