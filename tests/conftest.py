"""Shared test set-up: results of check() go to a temporary file, never to the learner's."""

import os

import pytest

import helpers  # first: picks the device before any kernel is defined


def pytest_report_header(config):
    return f"course device: {helpers.describe()}"


@pytest.fixture(autouse=True, scope="session")
def _private_results_file(tmp_path_factory):
    """check() results and the review schedule go to temporary files, never the learner's."""
    folder = tmp_path_factory.mktemp("course")
    path = folder / "results.jsonl"
    old = {name: os.environ.get(name) for name in ("COURSE_RESULTS", "COURSE_STATE")}
    os.environ["COURSE_RESULTS"] = str(path)
    os.environ["COURSE_STATE"] = str(folder / "review.json")
    yield path
    for name, value in old.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
