"""Unit tests of the checks on `accel launch` options."""

from __future__ import annotations

import pytest

from accel_launch.launch.options import LaunchOptions, LaunchOptionsError, check_script, parse_env_pairs


@pytest.mark.parametrize(
    ("kwargs", "flag"),
    [
        ({"num_processes": 0}, "--num_processes"),
        ({"num_machines": 0}, "--num_machines"),
        ({"num_machines": 2, "machine_rank": 2, "main_process_ip": "h"}, "--machine_rank"),
        ({"machine_rank": -1}, "--machine_rank"),
        ({"num_machines": 2}, "--main_process_ip"),
        ({"main_process_port": 70000}, "--main_process_port"),
        ({"mixed_precision": "fp17"}, "--mixed_precision"),
        ({"gradient_accumulation_steps": 0}, "--gradient_accumulation_steps"),
        ({"max_restarts": -1}, "--max_restarts"),
        ({"monitor_interval": 0.0}, "--monitor_interval"),
        ({"env": {"": "x"}}, "--env"),
    ],
)
def test_bad_option_names_its_flag_in_one_line(kwargs, flag):
    with pytest.raises(LaunchOptionsError) as info:
        LaunchOptions(**kwargs)
    message = str(info.value)
    assert flag in message
    assert "\n" not in message


def test_defaults_are_one_process_on_one_machine():
    options = LaunchOptions()
    assert (options.num_processes, options.num_machines, options.machine_rank) == (1, 1, 0)
    assert not options.is_multi_machine


def test_parse_env_pairs_keeps_equals_signs_in_values():
    assert parse_env_pairs(["A=1", "B=x=y", "C=", "A=2"]) == {"A": "2", "B": "x=y", "C": ""}


@pytest.mark.parametrize("pair", ["NOVALUE", "=x"])
def test_parse_env_pairs_rejects_malformed(pair):
    with pytest.raises(LaunchOptionsError, match="--env"):
        parse_env_pairs([pair])


def test_check_script_names_a_missing_file(tmp_path):
    missing = tmp_path / "nope.py"
    with pytest.raises(LaunchOptionsError, match="script not found: .*nope.py"):
        check_script(str(missing), module=False)


def test_check_script_rejects_a_folder(tmp_path):
    with pytest.raises(LaunchOptionsError, match="not a file"):
        check_script(str(tmp_path), module=False)


def test_check_script_leaves_modules_to_python(tmp_path):
    check_script("some.module", module=True)
    script = tmp_path / "ok.py"
    script.write_text("")
    check_script(str(script), module=False)
