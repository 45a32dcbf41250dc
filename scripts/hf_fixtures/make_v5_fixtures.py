#!/usr/bin/env python3
"""The fixture files transformers 5.x makes (scripts/hf_fixtures/requirements-v5.txt). Run it AFTER
make_fixtures.py (transformers 4.57.1), whose checkpoints it reads:

    python scripts/hf_fixtures/make_v5_fixtures.py                   # all three steps
    python scripts/hf_fixtures/make_v5_fixtures.py deepseek_v2       # or some

- `qwen3_moe_fused`: the qwen3_moe fixture's weights as transformers 5.x writes them when asked not to
  convert back to the published layout (`save_pretrained(save_original_format=False)`). 5.x holds MoE
  experts fused in memory, and that is the layout it writes then:
    model.layers.N.mlp.experts.gate_up_proj  [E, 2*F, H]  = per expert e: cat([gate_proj_e, up_proj_e], dim 0)
    model.layers.N.mlp.experts.down_proj     [E, H, F]    = per expert e: down_proj_e
  (by default `save_pretrained` converts back to the per-expert names, which is what the other fixtures
  have). Its tokenizer files are saved by 5.x too (tokenizer_config.json differs from 4.57.1's).
- `deepseek_v2`: only reference.json is rewritten, from make_fixtures.py's checkpoint (left byte for byte
  as 4.57.1 wrote it). transformers 4.57.1's DeepSeek-V2 omits the YaRN mscale^2 from the attention
  softmax scale; DeepSeek's own modeling code (which the V2 checkpoints were published with) and
  transformers 5.x apply it, so the reference is 5.x's. The script checks that with the 4.57.1 scale
  forced back, 5.x reproduces make_fixtures.py's 4.57.1 reference: the scale is the only difference.
- `deepseek_configs`: `deepseek_v2/config.v5.json` and `deepseek_v3/config.v5.json`, each fixture's
  config.json as 5.x writes it (`rope_parameters` instead of `rope_theta`/`rope_scaling`, V3's
  `num_nextn_predict_layers: 1` with no weights for that layer, ...). Only the config: the other files
  stay 4.57.1's. The script checks that 5.x loads each fixture's weights under it with nothing missing or
  unexpected and reproduces the fixture's reference.json.

Each reference.json is computed exactly as make_fixtures.py does (f32, eager, the directory loaded back).
"""

import json
import math
import shutil
import sys
import tempfile
from pathlib import Path

import torch
import transformers
from tokenizers import Tokenizer
from transformers import (
    AutoConfig,
    AutoTokenizer,
    DeepseekV2ForCausalLM,
    DeepseekV3ForCausalLM,
    Qwen3MoeForCausalLM,
)

import make_fixtures as mf

# Same weights run by two transformers/torch versions: the f32 logits may differ by rounding only.
CROSS_VERSION_TOL = 1e-4


def reference_prompts(model, tok_dir: Path) -> list:
    """make_fixtures.py's prompts through `model`: ids, logits of every position, greedy tokens, margin."""
    hf_tok = AutoTokenizer.from_pretrained(tok_dir)
    raw_tok = Tokenizer.from_file(str(tok_dir / "tokenizer.json"))
    prompts = []
    for text in mf.PROMPTS:
        ids = hf_tok(text)["input_ids"]
        assert raw_tok.encode(text).ids == ids, text
        with torch.no_grad():
            logits = model(torch.tensor([ids]), use_cache=False).logits[0]
        tokens, margin = mf.greedy(model, ids)
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
    return prompts


def compare(new: list, old: list) -> tuple:
    """Whether the greedy tokens agree, and the largest logit difference; the prompts must be the same."""
    same_greedy = True
    worst = 0.0
    for n, o in zip(new, old, strict=True):
        assert n["text"] == o["text"] and n["ids"] == o["ids"], (n["text"], n["ids"], o["ids"])
        same_greedy &= n["greedy"] == o["greedy"]
        worst = max(worst, float((torch.tensor(n["logits"]) - torch.tensor(o["logits"])).abs().max()))
    return same_greedy, worst


def write_reference(out: Path, prompts: list) -> dict:
    reference = {"transformers": transformers.__version__, "torch": torch.__version__.split("+")[0], "prompts": prompts}
    (out / "reference.json").write_text(json.dumps(reference, separators=(",", ":")) + "\n")
    return reference


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


def build_fused(out: Path) -> None:
    src = mf.OUT / "qwen3_moe"
    model = Qwen3MoeForCausalLM.from_pretrained(src, dtype="auto").eval()
    assert model.dtype == torch.float16, model.dtype
    model.save_pretrained(out, save_original_format=False)
    AutoTokenizer.from_pretrained(src).save_pretrained(out)

    stored = mf.stored_tensors(out)
    expected = expected_fused(mf.stored_tensors(src))
    assert set(stored) == set(expected), set(stored) ^ set(expected)
    for k, v in expected.items():
        assert stored[k].dtype == v.dtype and torch.equal(stored[k], v), k
    mf.check_saved(model, out)

    prompts = reference_prompts(mf.load_reference_model(Qwen3MoeForCausalLM, out), out)
    source = json.loads((src / "reference.json").read_text())
    same_greedy, worst = compare(prompts, source["prompts"])
    assert same_greedy and worst <= CROSS_VERSION_TOL, f"differs from qwen3_moe's reference: {same_greedy=}, {worst=}"
    print(f"qwen3_moe_fused: agrees with qwen3_moe's reference ({source['transformers']}): "
          f"same ids and greedy tokens, logits within {worst:.2e}")
    mf.check_generate({"cls": Qwen3MoeForCausalLM}, out, write_reference(out, prompts))


def make_fused() -> None:
    dest = mf.OUT / "qwen3_moe_fused"
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / dest.name
        build_fused(out)
        if dest.exists():
            shutil.rmtree(dest)
        shutil.copytree(out, dest)
    print(f"{dest.name}: {sorted(f.name for f in dest.iterdir())}, {mf.dir_size(dest) / 1024:.0f} KiB")


def deepseek_v2_scales(config: dict) -> tuple:
    """(4.57.1's softmax scale, DeepSeek's): qk_head_dim^-0.5, and that times yarn_get_mscale(factor,
    mscale_all_dim)^2 with yarn_get_mscale(s, m) = 0.1 * m * ln(s) + 1 (s > 1), as in DeepSeek's code."""
    rope = config["rope_scaling"]
    plain = (config["qk_nope_head_dim"] + config["qk_rope_head_dim"]) ** -0.5
    assert rope["factor"] > 1 and rope["mscale_all_dim"], rope
    mscale = 0.1 * rope["mscale_all_dim"] * math.log(rope["factor"]) + 1.0
    return plain, plain * mscale * mscale


def make_deepseek_v2_reference() -> None:
    out = mf.OUT / "deepseek_v2"
    old = json.loads((out / "reference.json").read_text())
    if not old["transformers"].startswith("4."):
        sys.exit(
            f"deepseek_v2/reference.json was made by transformers {old['transformers']}: this step needs "
            "make_fixtures.py's 4.57.1 one to compare with; run `make_fixtures.py deepseek_v2` "
            "(requirements.txt) first"
        )
    plain, scaled = deepseek_v2_scales(json.loads((out / "config.json").read_text()))

    model = mf.load_reference_model(DeepseekV2ForCausalLM, out)
    attns = [layer.self_attn for layer in model.model.layers]
    for attn in attns:
        assert math.isclose(attn.scaling, scaled, rel_tol=1e-12), (attn.scaling, scaled)
    prompts = reference_prompts(model, out)
    same_greedy, diff = compare(prompts, old["prompts"])
    assert diff > 1e-2, f"the mscale^2 changes the logits by only {diff}: the fixture would not tell"

    for attn in attns:
        attn.scaling = plain
    old_scale = reference_prompts(model, out)
    old_greedy, worst = compare(old_scale, old["prompts"])
    assert old_greedy and worst <= CROSS_VERSION_TOL, (
        f"with 4.57.1's scale forced, 5.x differs from the 4.57.1 reference: {old_greedy=}, {worst=}"
    )

    spec = {"cls": DeepseekV2ForCausalLM}
    mf.check_matters(spec, out, prompts, mf.ungroup_routing, "group-limited routing (n_group/topk_group)")
    reference = write_reference(out, prompts)
    gen = mf.check_generate(spec, out, reference)
    margins = ", ".join(f"{p['min_margin']:.4g}" for p in prompts)
    print(
        f"deepseek_v2: softmax scale {scaled!r} (4.57.1: {plain!r}); logits differ from the "
        f"{old['transformers']} reference by up to {diff:.3g}, greedy tokens {'same' if same_greedy else 'differ'}; "
        f"with the 4.57.1 scale forced: same greedy tokens, logits within {worst:.2e}; "
        f"min margins {margins}; "
        f"generate agrees (compared up to {[g[1] for g in gen]} tokens)"
    )


def make_deepseek_configs() -> None:
    for name, cls in [("deepseek_v2", DeepseekV2ForCausalLM), ("deepseek_v3", DeepseekV3ForCausalLM)]:
        src = mf.OUT / name
        with tempfile.TemporaryDirectory() as tmp:
            AutoConfig.from_pretrained(src).save_pretrained(tmp)
            config = json.loads((Path(tmp) / "config.json").read_text())
            # The 5.x layout the Rust side must read, stated so that a transformers that writes
            # otherwise stops here.
            assert "rope_theta" not in config and "rope_scaling" not in config, config
            assert config["rope_parameters"]["rope_type"] == "yarn", config["rope_parameters"]
            assert name == "deepseek_v2" or config["num_nextn_predict_layers"] == 1, config

            # The fixture's weights under this config: 5.x builds no MTP layer for V3 (none stored).
            out = Path(tmp) / name
            shutil.copytree(src, out)
            shutil.copy(Path(tmp) / "config.json", out / "config.json")
            model = mf.load_reference_model(cls, out)
            # Saving the model writes the same config as saving the config alone.
            model.save_pretrained(Path(tmp) / "resaved")
            assert json.loads((Path(tmp) / "resaved" / "config.json").read_text()) == config, name
            prompts = reference_prompts(model, out)
            reference = json.loads((src / "reference.json").read_text())
            same_greedy, worst = compare(prompts, reference["prompts"])
            assert same_greedy and worst <= CROSS_VERSION_TOL, (
                f"{name} under its 5.x config differs from its reference: {same_greedy=}, {worst=}"
            )
            shutil.copy(Path(tmp) / "config.json", src / "config.v5.json")
        print(
            f"{name}/config.v5.json: reproduces the {reference['transformers']} reference "
            f"(same greedy tokens, logits within {worst:.2e})"
        )


STEPS = {
    "qwen3_moe_fused": make_fused,
    "deepseek_v2": make_deepseek_v2_reference,
    "deepseek_configs": make_deepseek_configs,
}


def main(names: list) -> None:
    if not transformers.__version__.startswith("5."):
        sys.exit(f"needs transformers 5.x (requirements-v5.txt), found {transformers.__version__}")
    for name in names or list(STEPS):
        STEPS[name]()


if __name__ == "__main__":
    main(sys.argv[1:])
