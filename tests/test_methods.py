"""The method table (dara.methods) is the one list of methods: everything that names methods agrees with it."""

import json

import numpy as np

import pytest

from dara import methods
from dara.advantages import compute_advantages
from dara.analysis import palette
from dara.experiments import schema


def test_the_schema_enum_is_the_table():
    assert schema()["$defs"]["method"]["enum"] == list(methods.METHODS)
    # the file on disk holds no list of its own that could drift from the table
    from importlib import resources

    raw = json.loads(resources.files("dara.schemas").joinpath("experiment.schema.json").read_text())
    assert raw["$defs"]["method"]["enum"] == []


def test_palette_labels_and_colours_come_from_the_table():
    for method in methods.TABLE:
        assert palette.label(method.name) == method.label and palette.color(method.name) == method.color
    assert palette.ordered(reversed(methods.METHODS)) == list(methods.METHODS)
    assert len({method.color for method in methods.TABLE}) == len(methods.TABLE)
    assert len({method.marker for method in methods.TABLE}) == len(methods.TABLE)
    # "base" (the model before RL) is drawn beside the methods in the evaluation figures
    assert palette.BASE["color"].lower() not in {method.color.lower() for method in methods.TABLE}
    assert palette.BASE["marker"] not in {method.marker for method in methods.TABLE}


def test_verl_names_are_the_tables_and_do_not_clash_with_verls_own():
    from dara.verl_plugin.estimators import ESTIMATORS, VERL_ESTIMATOR_NAMES

    assert VERL_ESTIMATOR_NAMES == {method.name: method.verl_name for method in methods.TABLE}
    assert set(ESTIMATORS) == {method.verl_name for method in methods.TABLE}
    assert not {"grpo", "gdpo"} & set(ESTIMATORS)


@pytest.mark.parametrize("method", methods.TABLE, ids=lambda m: m.name)
def test_each_rows_properties_are_what_the_estimator_does(method):
    # two channels, two groups: channel 0 dense, channel 1 varies in one group only
    rewards = np.array([[1.0, 0.0], [0.0, 0.0], [1.0, 1.0], [0.0, 0.0]])
    index = [0, 0, 1, 1]
    options = {"static_weights": [1.0, 3.0]} if method.needs_static_weights else {}
    with pytest.raises(ValueError, match="static_weights"):
        compute_advantages(method.name, rewards, index, static_weights=None if options else [1.0, 3.0])
    result = compute_advantages(method.name, rewards, index, **options)
    weights = result.weights.tolist()
    if method.weights == "density":  # pi = (1, 0.5): w = sqrt(2) on the sparse channel
        assert weights == pytest.approx([1.0, 2 ** 0.5])
    elif method.weights == "static":
        assert weights == pytest.approx([1.0, 3.0])
    else:
        assert weights == [1.0, 1.0]
    # a response whose channels disagree in sign (row 0 of a group where channel 1 is higher in the other row)
    conflict = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [0.0, 0.0]])
    dropped = compute_advantages(method.name, conflict, index, **options).loss_weights.tolist()
    assert (dropped == [0.0, 0.0, 1.0, 1.0]) == method.drops_conflicts


def test_an_unknown_method_is_named_with_the_known_ones():
    with pytest.raises(ValueError, match="unknown method 'dara'; known methods: grpo, gdpo"):
        methods.get_method("dara")
