"""Accelerate's plugin keywords: one plugin at most, under the keyword of the type it runs."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from accel.options.plugin_arguments import PLUGIN_ARGUMENTS, chosen_plugin, plugin_of_run
from accel_state import DistributedType


def _plugin(kind):
    return SimpleNamespace(distributed_type=kind)


def test_no_plugin_asks_for_no_type():
    assert chosen_plugin(dict.fromkeys(PLUGIN_ARGUMENTS)) == (None, None)


def test_the_plugin_given_runs_its_keywords_type():
    plugin = _plugin(DistributedType.DEEPSPEED)
    assert chosen_plugin({"deepspeed_plugin": plugin, "fsdp_plugin": None}) == (
        plugin,
        DistributedType.DEEPSPEED,
    )
    untyped = object()
    assert chosen_plugin({"fsdp_plugin": untyped}) == (untyped, DistributedType.FSDP)


def test_two_plugins_are_refused_naming_both_keywords():
    given = {
        "deepspeed_plugin": _plugin(DistributedType.DEEPSPEED),
        "fsdp_plugin": _plugin(DistributedType.FSDP),
    }
    with pytest.raises(ValueError, match="pass one of deepspeed_plugin, fsdp_plugin, not several"):
        chosen_plugin(given)


def test_a_plugin_under_another_types_keyword_names_the_right_one():
    with pytest.raises(
        ValueError,
        match=r"Accelerator\(deepspeed_plugin=...\): a SimpleNamespace runs FSDP, not DEEPSPEED; "
        "pass it as fsdp_plugin=",
    ):
        chosen_plugin({"deepspeed_plugin": _plugin(DistributedType.FSDP)})


def test_a_property_returns_the_backends_plugin_only_on_a_run_of_its_type():
    plugin = object()
    assert plugin_of_run("fsdp_plugin", DistributedType.FSDP, plugin) is plugin
    assert plugin_of_run("deepspeed_plugin", DistributedType.FSDP, plugin) is None
