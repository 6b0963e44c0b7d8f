"""Shared test set-up: results of check() go to a temporary file, never to the learner's."""

import os

import pytest

import helpers  # first: picks the device before any kernel is defined


def pytest_report_header(config):
    return f"course device: {helpers.describe()}"


@pytest.fixture(autouse=True, scope="session")
def _private_results_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("results") / "results.jsonl"
    old = os.environ.get("COURSE_RESULTS")
    os.environ["COURSE_RESULTS"] = str(path)
    yield path
    if old is None:
        os.environ.pop("COURSE_RESULTS", None)
    else:
        os.environ["COURSE_RESULTS"] = old
