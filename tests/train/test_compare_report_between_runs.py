"""gcpo compare rewrites its tables after every finished run. A failure there (a file the report
reads, code changed under a comparison of hours) must not stop the runs still to train: it warns,
naming the run, and the final report raises it if it persists. Before, one failed table cancelled
every queued run of a `--workers` comparison while the running one finished."""

import pytest

from gcpo_train.compare.run import Comparison


def _comparison(tmp_path, arms=("none", "bot_rd")):
    from helpers.loop_setup import comparison, loop_config

    from gcpo_train.config import TrainConfig

    return comparison(TrainConfig(**loop_config(tmp_path, "unused")), tmp_path / "cmp", arms, (0,))


def _failing_tables(monkeypatch, times):
    """Comparison.report raising for its first ``times`` table-only calls (figures=False)."""
    real, calls = Comparison.report, []

    def report(self, figures=True):
        if not figures:
            calls.append(1)
            if len(calls) <= times:
                raise OSError("disk full (simulated)")
        return real(self, figures=figures)

    monkeypatch.setattr(Comparison, "report", report)
    return calls


def _done(tmp_path, arms=("none", "bot_rd")):
    return {arm: (tmp_path / "cmp" / "runs" / arm / "seed_0" / "done.json").exists() for arm in arms}


@pytest.mark.slow
@pytest.mark.parametrize("workers", [1, 2])
def test_a_failed_table_between_runs_warns_and_the_runs_go_on(tmp_path, monkeypatch, workers):
    calls = _failing_tables(monkeypatch, times=1)
    with pytest.warns(RuntimeWarning, match=r"report after (none|bot_rd) seed 0 failed \(OSError: disk full"):
        result = _comparison(tmp_path).run(progress=False, workers=workers)
    assert len(calls) == 2 and _done(tmp_path) == {"none": True, "bot_rd": True}
    assert list(result["table"]["arm"]) == ["none", "bot_rd"]  # the final report, with both arms


@pytest.mark.slow
def test_a_table_that_keeps_failing_is_raised_by_the_final_report_after_every_run(tmp_path, monkeypatch):
    real = Comparison.report

    def report(self, figures=True):
        raise OSError("disk full (simulated)")

    monkeypatch.setattr(Comparison, "report", report)
    with pytest.warns(RuntimeWarning, match="report after"), pytest.raises(OSError, match="disk full"):
        _comparison(tmp_path).run(progress=False)
    assert _done(tmp_path) == {"none": True, "bot_rd": True}  # both trained before the raise
    monkeypatch.setattr(Comparison, "report", real)
    assert list(_comparison(tmp_path).run(progress=False)["table"]["arm"]) == ["none", "bot_rd"]


def test_an_error_in_training_is_not_caught_as_a_table_failure(tmp_path, monkeypatch):
    def broken(self, arm, seed, progress=True):
        raise ValueError(f"{arm} broke")

    monkeypatch.setattr(Comparison, "train_arm", broken)
    monkeypatch.setattr(Comparison, "evaluate_base", lambda self, seed, progress=True: None)
    with pytest.raises(ValueError, match="none broke"):
        _comparison(tmp_path).run(progress=False)
