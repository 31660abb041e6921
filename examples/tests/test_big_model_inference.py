"""The offloaded Llama generates the full model's tokens within its memory budget (1 process: no group)."""

from __future__ import annotations

import sys

import pytest

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads RssAnon from /proc"),
]


def test_big_model_inference_matches_the_full_model_within_its_budget(run_example):
    pytest.importorskip("transformers")
    metrics = run_example("big_model_inference.py", ["--new_tokens", "4"], num_processes=1)
    assert metrics["tokens_equal"] is True, metrics
    assert metrics["cpu_modules"] >= 2 and metrics["disk_modules"] >= 2, metrics
    # 40 MiB of weights on the CPU, the rest on disk: well under the 77.5 MiB model.
    assert metrics["peak_anon_growth_mib"] < 0.6 * metrics["model_mib"], metrics
