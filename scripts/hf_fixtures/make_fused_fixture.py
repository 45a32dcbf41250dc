#!/usr/bin/env python3
"""Write tests/fixtures/hf/qwen3_moe_fused/: the qwen3_moe fixture's weights as transformers 5.x writes
them when asked not to convert back to the published layout (`save_pretrained(save_original_format=False)`).

transformers 5.x holds MoE experts fused in memory, and that is the layout it writes then:
  model.layers.N.mlp.experts.gate_up_proj  [E, 2*F, H]  = per expert e: cat([gate_proj_e, up_proj_e], dim 0)
  model.layers.N.mlp.experts.down_proj     [E, H, F]    = per expert e: down_proj_e
(by default `save_pretrained` converts back to the per-expert names, which is what the other fixtures have).

Needs transformers 5.x (scripts/hf_fixtures/requirements-fused.txt); make_fixtures.py needs 4.57.1:

    python scripts/hf_fixtures/make_fused_fixture.py

The tokenizer is saved by 5.x as well (its tokenizer_config.json differs from 4.57.1's), and
reference.json is computed by 5.x exactly as make_fixtures.py does (f32, eager, the saved directory
loaded back); the script also checks it agrees with qwen3_moe's 4.57.1 reference.
"""

import json
import shutil
import sys
import tempfile
from pathlib import Path

import torch
import transformers
from tokenizers import Tokenizer
from transformers import AutoTokenizer, Qwen3MoeForCausalLM

import make_fixtures as mf

SRC = mf.OUT / "qwen3_moe"
DEST = mf.OUT / "qwen3_moe_fused"
# Same weights run by two transformers/torch versions: the f32 logits may differ by rounding only.
CROSS_VERSION_TOL = 1e-4


def expected_fused(per_expert: dict) -> dict:
    """The fused tensors built from the per-expert ones: the layout this fixture is for, stated independently."""
    fused = {}
    experts = {}
    for name, t in per_expert.items():
        if ".mlp.experts." not in name:
            fused[name] = t
            continue
        prefix, rest = name.split(".mlp.experts.")
        e, proj, _ = rest.split(".")
        experts.setdefault(prefix, {}).setdefault(int(e), {})[proj] = t
    for prefix, by_e in experts.items():
        order = sorted(by_e)
        assert order == list(range(len(order))), (prefix, order)
        fused[f"{prefix}.mlp.experts.gate_up_proj"] = torch.stack(
            [torch.cat([by_e[e]["gate_proj"], by_e[e]["up_proj"]], dim=0) for e in order]
        )
        fused[f"{prefix}.mlp.experts.down_proj"] = torch.stack([by_e[e]["down_proj"] for e in order])
    return fused


def check_against_source(prompts: list) -> None:
    source = json.loads((SRC / "reference.json").read_text())["prompts"]
    worst = 0.0
    for new, old in zip(prompts, source, strict=True):
        assert new["text"] == old["text"] and new["ids"] == old["ids"], new["text"]
        assert new["greedy"] == old["greedy"], (new["text"], new["greedy"], old["greedy"])
        worst = max(worst, float((torch.tensor(new["logits"]) - torch.tensor(old["logits"])).abs().max()))
    assert worst <= CROSS_VERSION_TOL, f"logits differ from qwen3_moe's reference by {worst}"
    print(f"agrees with qwen3_moe's reference ({json.loads((SRC / 'reference.json').read_text())['transformers']}): "
          f"same ids and greedy tokens, logits within {worst:.2e}")


def build(out: Path) -> dict:
    model = Qwen3MoeForCausalLM.from_pretrained(SRC, dtype="auto").eval()
    assert model.dtype == torch.float16, model.dtype
    model.save_pretrained(out, save_original_format=False)
    AutoTokenizer.from_pretrained(SRC).save_pretrained(out)

    stored = mf.stored_tensors(out)
    expected = expected_fused(mf.stored_tensors(SRC))
    assert set(stored) == set(expected), set(stored) ^ set(expected)
    for k, v in expected.items():
        assert stored[k].dtype == v.dtype and torch.equal(stored[k], v), k
    mf.check_saved(model, out)

    ref_model = mf.load_reference_model(Qwen3MoeForCausalLM, out)
    hf_tok = AutoTokenizer.from_pretrained(out)
    raw_tok = Tokenizer.from_file(str(out / "tokenizer.json"))
    prompts = []
    for text in mf.PROMPTS:
        ids = hf_tok(text)["input_ids"]
        assert raw_tok.encode(text).ids == ids, text
        with torch.no_grad():
            logits = ref_model(torch.tensor([ids]), use_cache=False).logits[0]
        tokens, margin = mf.greedy(ref_model, ids)
        assert margin >= mf.MIN_MARGIN, (text, margin)
        prompts.append(
            dict(
                text=text,
                ids=ids,
                logits=[[mf.compact(x) for x in row] for row in logits.tolist()],
                greedy=tokens,
                min_margin=mf.compact(margin),
            )
        )
    check_against_source(prompts)
    reference = {"transformers": transformers.__version__, "torch": torch.__version__.split("+")[0], "prompts": prompts}
    mf.check_generate({"cls": Qwen3MoeForCausalLM}, out, reference)
    (out / "reference.json").write_text(json.dumps(reference, separators=(",", ":")) + "\n")
    return reference


def main() -> None:
    if not transformers.__version__.startswith("5."):
        sys.exit(f"needs transformers 5.x (requirements-fused.txt), found {transformers.__version__}")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / DEST.name
        build(out)
        if DEST.exists():
            shutil.rmtree(DEST)
        shutil.copytree(out, DEST)
    print(f"{DEST.name}: {sorted(f.name for f in DEST.iterdir())}, {mf.dir_size(DEST) / 1024:.0f} KiB")


if __name__ == "__main__":
    main()
