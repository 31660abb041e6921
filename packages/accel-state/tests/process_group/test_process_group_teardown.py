"""The exit teardown: releases registered by engines run first, then the group goes."""

from __future__ import annotations

from accel_state.process_group import group as process_group


def test_releases_run_before_the_group_is_destroyed_even_if_one_fails(monkeypatch):
    order: list[str] = []
    monkeypatch.setattr(process_group, "_before_teardown", [])
    monkeypatch.setattr(process_group, "destroy_process_group", lambda group=None: order.append("destroy"))

    def failing() -> None:
        order.append("failing")
        raise RuntimeError("engine already gone")

    process_group.before_teardown(lambda: order.append("first"))
    process_group.before_teardown(failing)
    process_group._teardown_at_exit()
    assert order == ["failing", "first", "destroy"]
