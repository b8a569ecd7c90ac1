"""Collection checks the whole suite relies on: each test has a node id of its own."""

from __future__ import annotations

from collections import Counter

import pytest


def one_id_per_test(items: list[pytest.Item]) -> None:
    """Give each test a node id of its own, or fail the collection.

    pytest-xdist hands its workers tests by node id: of two tests under one id, one runs and
    the other runs nowhere, unreported. pytest 9.2 builds a test's id from its function's name
    and its pytest parameters; schemathesis 4.32 names each operation's test
    `test_x[POST /settle]` but gives it no parameters, so all of a fuzzing test's operations
    shared the function's id, and under xdist 26 of tests/facilitator/test_fuzz.py's 127 tests
    never ran. A test whose name has a bracket its id lacks takes it into its id, as before
    pytest 9.2; then any id still shared stops the run.
    """
    for item in items:
        _, bracket, params = item.name.partition("[")
        if bracket and not item.nodeid.endswith(f"::{item.name}") and item._id.params is None:
            item._id = item._id.with_params(params.removesuffix("]"))
    shared = [nodeid for nodeid, n in Counter(item.nodeid for item in items).items() if n > 1]
    if shared:
        raise pytest.UsageError(f"tests share a node id, so xdist would drop them: {shared}")
