#!/usr/bin/env python3
"""Load a checkpoint directory with transformers and compare its logits with a reference.json.

For a human checking that transformers loads what our Rust code wrote (e.g. a fine-tuned checkpoint
saved back in the Hugging Face layout):

    python scripts/hf_fixtures/check_checkpoint.py DIR --fixture mixtral
    python scripts/hf_fixtures/check_checkpoint.py DIR --reference path/to/reference.json --tol 1e-4

The prompts (their token ids) come from the reference; for each one this prints the logits of the last
position and the largest absolute difference, over every position, from the reference's logits. With
--tol it exits 1 when a difference exceeds it. It also exits 1 when transformers reports missing,
unexpected or mismatched tensors.
"""

import argparse
import json
import sys
from pathlib import Path

import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer

FIXTURES = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "hf"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir", type=Path, help="checkpoint directory (config.json + safetensors)")
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--fixture", help="name of a fixture under tests/fixtures/hf/ whose reference.json to use")
    src.add_argument("--reference", type=Path, help="a reference.json (fixture layout)")
    ap.add_argument("--tol", type=float, help="fail (exit 1) when a logit differs by more than this")
    args = ap.parse_args()

    ref_path = args.reference or FIXTURES / args.fixture / "reference.json"
    reference = json.loads(ref_path.read_text())
    made_by = reference.get("transformers", "")
    if made_by.split(".")[0] != transformers.__version__.split(".")[0]:
        # deepseek_v2's attention scale differs between 4.x and 5.x (scripts/hf_fixtures/README.md).
        print(f"note: the reference was made by transformers {made_by}, this is {transformers.__version__}")

    model, info = AutoModelForCausalLM.from_pretrained(
        args.dir, dtype=torch.float32, attn_implementation="eager", output_loading_info=True
    )
    model.eval()
    ok = True
    for kind, keys in info.items():
        if keys:
            print(f"{kind}: {sorted(keys)}")
            ok = False
    config = json.loads((args.dir / "config.json").read_text())
    stored = config.get("dtype", config.get("torch_dtype"))
    print(f"loaded {type(model).__name__} from {args.dir} (config dtype {stored}, computed in f32)")

    tokenizer = AutoTokenizer.from_pretrained(args.dir) if (args.dir / "tokenizer.json").exists() else None
    worst = 0.0
    for i, prompt in enumerate(reference["prompts"]):
        ids = prompt["ids"]
        if tokenizer is not None and tokenizer(prompt["text"])["input_ids"] != ids:
            print(f"prompt {i}: the directory's tokenizer encodes {prompt['text']!r} differently from the reference")
            ok = False
        with torch.no_grad():
            logits = model(torch.tensor([ids]), use_cache=False).logits[0]
        expected = torch.tensor(prompt["logits"], dtype=torch.float32)
        if logits.shape != expected.shape:
            print(f"prompt {i}: logits shape {tuple(logits.shape)} but the reference has {tuple(expected.shape)}")
            ok = False
            continue
        diff = float((logits - expected).abs().max())
        worst = max(worst, diff)
        last = logits[-1]
        print(f"prompt {i} {prompt['text']!r} ({len(ids)} tokens): max |logit - reference| = {diff:.3e}")
        print(f"  last position logits[:8] = {[round(x, 6) for x in last[:8].tolist()]}")
        print(f"  last position argmax {int(last.argmax())} (reference {int(expected[-1].argmax())})")
    print(f"max abs difference over all prompts: {worst:.3e}")
    if args.tol is not None and worst > args.tol:
        print(f"FAIL: exceeds --tol {args.tol}")
        ok = False
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
