"""The gate against each kind of drift, on copies of the example repo.

Each mutation must make the gate refuse with the right row; the applied
registry must stay byte-for-byte the same; the unmutated repo must apply.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from schema_helpers import Repo, drop_lines, edit, failed

from featureflow.errors import SchemaMismatchError
from featureflow.schema import check_repo, validate
from featureflow.schema.report import Status


def test_unmutated_repo_passes_every_check(fresh: Repo) -> None:
    report = validate(fresh.repo, fresh.schemas)
    assert report.ok_strict, report.to_table(only_problems=True)
    checks = {r.check for r in report.rows}
    assert {"entity key", "event timestamp", "field", "aggregation", "version"} <= checks
    # 18 rolling aggregates of user_txn_stats + 4 session aggregates of user_sessions
    assert len([r for r in report.rows if r.check == "aggregation"]) == 22


def retyped_field(repo: Repo) -> None:
    edit(repo.schema, "var sum_amount_600s: Float64", "var sum_amount_600s: Int64")


def renamed_field(repo: Repo) -> None:
    edit(repo.schema, "var max_amount_600s:", "var maximum_amount_600s:")


def removed_field(repo: Repo) -> None:
    drop_lines(repo.schema, "var min_amount_3600s")


def extra_field(repo: Repo) -> None:
    edit(repo.schema, "    var user_id:", "    var risk_score: Float64\n    var user_id:")


def missing_event_timestamp(repo: Repo) -> None:
    drop_lines(repo.schema, "var event_timestamp")


def wrong_entity_key_type(repo: Repo) -> None:
    edit(repo.schema, "EntityKey[Int64]", "EntityKey[String]")


def version_mismatch(repo: Repo) -> None:
    edit(repo.schema, 'VERSION = "1.0.0"', 'VERSION = "1.0.1"')


def aggregation_missing(repo: Repo) -> None:
    # The Feast view stops declaring std outputs and so does the schema: only
    # the aggregation check still knows they are produced.
    edit(
        repo.features,
        "for agg in _TXN_AGGREGATIONS\n    ]",
        'for agg in _TXN_AGGREGATIONS if agg.function != "std"\n    ]',
    )
    drop_lines(repo.schema, "var std_amount_")


def feast_side_retype(repo: Repo) -> None:
    edit(
        repo.features,
        "from feast.types import Float64, Int64",
        "from feast.types import Float32, Float64, Int64",
    )
    edit(repo.features, '"sum": Float64', '"sum": Float32')


MUTATIONS: dict[str, tuple[Callable[[Repo], None], str, str]] = {
    # name: (mutation, check that must fail, field it must name)
    "re-typed field": (retyped_field, "field", "sum_amount_600s"),
    "renamed field (new name)": (renamed_field, "field", "maximum_amount_600s"),
    "renamed field (old name)": (renamed_field, "field", "max_amount_600s"),
    "removed field": (removed_field, "field", "min_amount_3600s"),
    "removed field (count)": (removed_field, "feature count", ""),
    "extra field": (extra_field, "field", "risk_score"),
    "missing event timestamp": (missing_event_timestamp, "event timestamp", "event_timestamp"),
    "wrong entity key type": (wrong_entity_key_type, "entity key", "user_id"),
    "version mismatch": (version_mismatch, "version", "schema_version"),
    "aggregation output missing": (aggregation_missing, "aggregation", "std_amount_86400s"),
    "re-typed on the Feast side": (feast_side_retype, "field", "sum_amount_3600s"),
}


@pytest.mark.parametrize("name", MUTATIONS)
def test_mutation_is_refused_with_the_right_row(name: str, fresh: Repo) -> None:
    mutate, check, field = MUTATIONS[name]
    mutate(fresh)
    report = validate(fresh.repo, fresh.schemas)
    assert not report.ok
    rows = failed(report, check, field)
    assert rows, report.to_table(only_problems=True)
    assert all(r.detail for r in rows), "a failing row must say what to do"


def test_aggregation_missing_passes_the_plain_field_checks(fresh: Repo) -> None:
    aggregation_missing(fresh)
    report = validate(fresh.repo, fresh.schemas)
    assert not failed(report, "field") and not failed(report, "feature count")
    assert len(failed(report, "aggregation")) == 3


def incompatible_minor_bump(repo: Repo) -> None:
    """Drop the std aggregations from view and schema, as a minor bump 1.0.0 -> 1.1.0."""
    edit(
        repo.features,
        'TXN_FUNCTIONS = ("count", "sum", "mean", "min", "max", "std")',
        'TXN_FUNCTIONS = ("count", "sum", "mean", "min", "max")',
    )
    edit(repo.features, '"schema_version": "1.0.0"', '"schema_version": "1.1.0"')
    edit(repo.schema, 'VERSION = "1.0.0"', 'VERSION = "1.1.0"')
    drop_lines(repo.schema, "var std_amount_")


def test_incompatible_minor_bump_is_refused(applied: Repo) -> None:
    incompatible_minor_bump(applied)
    report = validate(applied.repo, applied.schemas)
    rows = failed(report, "compatibility")
    assert {r.field for r in rows} == {"std_amount_600s", "std_amount_3600s", "std_amount_86400s"}
    assert "major" in rows[0].detail
    # Everything else agrees: only the version rule refuses.
    assert {r.check for r in report.failures} == {"compatibility"}


def test_major_bump_may_remove_fields(applied: Repo) -> None:
    incompatible_minor_bump(applied)
    edit(applied.features, '"schema_version": "1.1.0"', '"schema_version": "2.0.0"')
    edit(applied.schema, 'VERSION = "1.1.0"', 'VERSION = "2.0.0"')
    assert validate(applied.repo, applied.schemas).ok


def test_changed_fields_without_bump_are_refused(applied: Repo) -> None:
    feast_side_retype(applied)
    edit(applied.schema, "var sum_amount_600s: Float64", "var sum_amount_600s: Float32")
    report = validate(applied.repo, applied.schemas)
    assert failed(report, "compatibility", "sum_amount_600s")


@pytest.mark.parametrize(
    "name", ["re-typed field", "missing event timestamp", "aggregation output missing"]
)
def test_refused_apply_leaves_the_registry_byte_for_byte(name: str, applied: Repo) -> None:
    from featureflow.cli.apply import run

    before = applied.registry.read_bytes()
    MUTATIONS[name][0](applied)
    status = run(_args(applied))
    assert status == 1
    assert applied.registry.read_bytes() == before


def test_refused_apply_creates_no_registry(fresh: Repo, capsys: pytest.CaptureFixture[str]) -> None:
    from featureflow.cli.apply import run

    retyped_field(fresh)
    assert run(_args(fresh)) == 1
    out = capsys.readouterr()
    assert "sum_amount_600s" in out.out and "❌" in out.out
    assert "registry was not touched" in out.err
    assert not fresh.registry.exists() and not (fresh.repo / "data").exists()


def test_incompatible_bump_apply_is_refused(applied: Repo) -> None:
    from featureflow.cli.apply import run

    before = applied.registry.read_bytes()
    incompatible_minor_bump(applied)
    assert run(_args(applied)) == 1
    assert applied.registry.read_bytes() == before


def _args(repo: Repo) -> argparse.Namespace:
    return argparse.Namespace(repo=repo.repo, schemas=repo.schemas, strict=False)


def test_clean_apply_then_feast_lists_the_view(
    fresh: Repo, capsys: pytest.CaptureFixture[str]
) -> None:
    from featureflow.cli.apply import run

    assert run(_args(fresh)) == 0
    assert "schema gate: 61 ✅, 0 ⚠️, 0 ❌" in capsys.readouterr().out
    feast = Path(sys.executable).parent / "feast"
    listed = subprocess.run(
        [str(feast), "-c", str(fresh.repo), "stream-feature-views", "list"],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    assert "user_txn_stats" in listed.stdout
    # The stream job's guard accepts the live registry it produced.
    report = check_repo(fresh.repo, fresh.schemas)
    assert report.ok and all(r.status is Status.PASS for r in report.rows)


def test_stream_guard_refuses_a_drifted_registry(applied: Repo) -> None:
    retyped_field(applied)
    with pytest.raises(SchemaMismatchError) as caught:
        check_repo(applied.repo, applied.schemas)
    assert "sum_amount_600s" in str(caught.value)
    assert failed(caught.value.report, "field", "sum_amount_600s")


def test_validate_takes_a_feast_view_object(fresh: Repo) -> None:
    import importlib.util

    from featureflow.schema.feast_repo import _repo_imports

    retyped_field(fresh)
    with _repo_imports(fresh.repo):
        spec = importlib.util.spec_from_file_location("ff_test_features", fresh.features)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    report = validate(module.user_txn_stats, fresh.schema)
    assert failed(report, "field", "sum_amount_600s")
    assert not failed(report, "compatibility")  # no registry: nothing to compare
