"""read_json_object: one object from a JSON file, or a one-line reason it cannot be used."""

from __future__ import annotations

import pytest

from accel_state.environment.json_object import JsonObjectError, json_object_problem, read_json_object


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('{"a": 1,}', "invalid JSON at line 1, column 9: Expecting property name enclosed in double quotes"),
        ('{"a": 1, "a": 2}', "key 'a' is given twice"),
        ("[1, 2]", "must hold a JSON object, got list"),
    ],
)
def test_unusable_files_say_why_in_one_line(tmp_path, text, problem):
    path = tmp_path / "config.json"
    path.write_text(text)
    assert json_object_problem(path) == problem
    with pytest.raises(JsonObjectError, match=problem[:20]):
        read_json_object(path)


def test_a_usable_file_gives_its_object_and_missing_paths_are_named(tmp_path):
    path = tmp_path / "config.json"
    path.write_text('{"zero_optimization": {"stage": 2}}')
    assert read_json_object(path) == {"zero_optimization": {"stage": 2}}
    assert json_object_problem(tmp_path / "absent.json") == "file not found"
    assert json_object_problem(tmp_path) == "not a file"
