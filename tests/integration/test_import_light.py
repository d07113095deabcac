"""gcpo_analysis.measures works with numpy/scipy/pandas alone; heavy parts say what to install."""

import subprocess
import sys
import textwrap

import pytest


def _run(code: str) -> subprocess.CompletedProcess:
    # torch, transformers and sentence_transformers made unimportable, as on a light install
    prelude = textwrap.dedent("""
        import importlib.abc, sys
        class Block(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path, target=None):
                if name.split(".")[0] in ("torch", "transformers", "sentence_transformers"):
                    raise ImportError(f"No module named {name!r} (blocked by the test)")
        sys.meta_path.insert(0, Block())
    """)
    return subprocess.run(
        [sys.executable, "-c", prelude + textwrap.dedent(code)], capture_output=True, text=True, timeout=120
    )


@pytest.mark.slow
def test_measures_import_and_compute_without_torch():
    proc = _run("""
        import numpy as np
        import gcpo_analysis.measures as M
        e = np.eye(3)
        assert abs(M.cosine_dispersion(e) - 6 / 9) < 1e-12
        assert M.barycentric_transport(e, [0, 0, 1]) > 0
        assert M.semantic_entropy([0, 1]) > 0 and M.rd_max(4) == 4.0
        from gcpo_analysis.measures.score import score_groups
        from gcpo_analysis import stats, rewards, frames
        from gcpo_analysis.theory import proofs
        assert not any(m.split(".")[0] in ("torch", "transformers") for m in sys.modules)
        print("ok")
    """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


def test_embedder_without_torch_says_what_to_install():
    proc = _run("""
        from gcpo_analysis.measures import Embedder
        Embedder().encode(["a"])
    """)
    assert proc.returncode != 0
    assert "pip install" in proc.stderr and "is needed here but is not installed" in proc.stderr
