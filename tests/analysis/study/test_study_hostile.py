"""Hostile input for the study's rollout collection (gcpo_analysis.study.collect): a
part file with fewer rollouts than G is refused on resume."""

import pandas as pd
import pytest


def test_a_study_part_with_fewer_rollouts_than_g_is_refused(tmp_path):
    torch = pytest.importorskip("torch")
    from gcpo_analysis.study.collect import collect_rollouts
    from gcpo_analysis.tiny_models import tiny_causal_lm, tiny_tokenizer

    tok = tiny_tokenizer()
    tok.pad_token = tok.pad_token or tok.eos_token
    model = tiny_causal_lm("llama", vocab_size=len(tok)).eval()
    queries = pd.DataFrame(
        {
            "query_id": ["a", "b"],
            "prompt": ["who is the king ?", "the city"],
            "references": [["the king"], ["city"]],
            "task": "qa_f1",
        }
    )
    kw = dict(G=3, max_new_tokens=3, grad_var=False, out_dir=tmp_path, progress=False)
    torch.manual_seed(0)
    collect_rollouts(model, tok, queries, **kw)
    part = [p for p in (tmp_path / "parts").glob("00000_*.parquet") if ".groups" not in p.name][0]
    pd.read_parquet(part).iloc[:2].to_parquet(part)  # a part of 2 rollouts, G = 3
    with pytest.raises(ValueError, match="holds 2 rollouts, not G = 3"):
        collect_rollouts(model, tok, queries, **kw)
