"""gcpo_analysis.theory.proofs: exact claims hold, approximate ones report a finite gap."""

from __future__ import annotations

import numpy as np
import pytest

from gcpo_analysis.theory import proofs

APPROX = (
    "regime",
    "bound V_inter",
    "'≈'",
    "Monte Carlo",
    "varying in",
    "breaks the invariance",
)  # the last two: AdamW's measured gaps


@pytest.fixture(scope="module")
def table():
    return proofs.check_all(n_instances=400, seed=0)


def test_schema_and_every_claim_present(table):
    assert list(table.columns) == [
        "claim",
        "where",
        "instances",
        "worst_violation",
        "holds",
        "note",
        "worst_ratio",
        "median",
    ]
    assert len(table) == 19  # 15 + the four AdamW checks
    assert (table.instances > 0).all()
    assert np.isfinite(table.worst_violation).all()


def test_exact_claims_hold(table):
    exact = table[~table.claim.str.contains("|".join(APPROX), regex=True)]
    assert len(exact) == 9  # 8 + AdamW ignores a constant rescaling
    assert exact.holds.all(), exact[~exact.holds]
    assert (exact.worst_violation <= 1e-9).all()


def test_approximate_claims_report_finite_gaps(table):
    approx = table[table.claim.str.contains("|".join(APPROX), regex=True)]
    assert len(approx) == 10  # 7 + the three AdamW gaps
    assert np.isfinite(approx.worst_violation).all()
    slack = approx[approx.claim.str.contains("regime")]
    assert slack.holds.all()  # within the derived eps bounds
    gap = approx[approx.claim.str.contains("'≈'")].worst_violation.iloc[0]
    assert 0 < gap < 5  # the cross term is real but bounded on these instances


def test_helpers_against_hand_values():
    p = np.array([[0.5, 0.5], [1.0, 0.0]])
    assert proofs.shannon(p) == pytest.approx([np.log(2), 0.0])
    assert proofs.gini(p) == pytest.approx([0.5, 0.0])


def test_a_broken_identity_would_be_caught(monkeypatch):
    # if Gini were computed wrongly (1 - sum p), Gini <= H would fail and the row would say so
    monkeypatch.setattr(proofs, "gini", lambda p: 1.0 + 0 * p.sum(-1))
    row = proofs.check_gini_entropy(np.random.default_rng(0), 200)
    assert not row["holds"] and row["worst_violation"] > 0


def test_main_prints_markdown(capsys):
    from gcpo_analysis.cli import main

    assert main(["proofs", "--instances", "100", "--seed", "1"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("| claim") and "RD_max" in out
