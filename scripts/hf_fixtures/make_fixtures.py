#!/usr/bin/env python3
"""Make the tiny Hugging Face MoE checkpoints under tests/fixtures/hf/ and record transformers' outputs.

Run by hand (CI has no Python; it reads the committed fixtures):

    python scripts/hf_fixtures/make_fixtures.py            # all fixtures
    python scripts/hf_fixtures/make_fixtures.py mixtral    # only some

Each fixture is a randomly initialised checkpoint, briefly trained on src/moe/corpus.txt (`train`) and
written by transformers' own `save_pretrained`, a byte-level BPE tokenizer trained on the same text with
the family's special tokens, and
`reference.json`: the logits of every prompt position and a 32-token greedy continuation, computed by
loading the SAVED directory back in f32 (weights upcast from their stored dtype), eval mode, eager
attention. Everything is seeded, so a re-run reproduces the same files.

deepseek_v2's reference.json written here is 4.57.1's, whose DeepSeek-V2 attention lacks the YaRN mscale^2
of DeepSeek's own code: make_v5_fixtures.py (transformers 5.x) then replaces it (see README.md).
"""

import json
import math
import shutil
import sys
import tempfile
from pathlib import Path

import torch
import transformers
from safetensors import safe_open
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    DeepseekV2Config,
    DeepseekV2ForCausalLM,
    DeepseekV3Config,
    DeepseekV3ForCausalLM,
    GenerationConfig,
    MixtralConfig,
    MixtralForCausalLM,
    PreTrainedTokenizerFast,
    Qwen2MoeConfig,
    Qwen2MoeForCausalLM,
    Qwen3MoeConfig,
    Qwen3MoeForCausalLM,
)

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "src" / "moe" / "corpus.txt"
OUT = ROOT / "tests" / "fixtures" / "hf"

# Learned BPE vocabulary, the 256 byte tokens included; the special tokens come on top.
BPE_VOCAB = 300
# Model vocabulary: larger than every tokenizer (as published checkpoints pad theirs).
VOCAB = 320
GREEDY_TOKENS = 32
# The Rust side compares greedy tokens exactly: every argmax must win by at least this much.
MIN_MARGIN = 1e-3
# Seeds tried in order per fixture until every greedy step clears MIN_MARGIN.
SEED_TRIES = 20

PROMPTS = [
    "The sea was",
    "café: 42 boats",  # bytes outside ASCII: byte-level pieces
    "The wind came from the west.",
]

# Weight init std, which training (below) starts from.
INIT_STD = 0.15

# Training (`train`): every fixture is trained briefly before it is saved, so that its next-token
# distributions are peaked as a real checkpoint's are (a random model's are nearly flat: rounding alone,
# bf16 against f32, then changes its top-1 token, which no quantization bound could be measured
# against). Next-token loss with AdamW, f32, on one CPU thread (a thread count changes the sums' order
# and so the bits), windows of TRAIN_SEQ tokens drawn by a generator seeded with the fixture's seed:
# about 30-60 s per fixture.
TRAIN_STEPS = 2000
TRAIN_BATCH = 8
TRAIN_SEQ = 64
TRAIN_LR = 3e-3
TRAIN_WEIGHT_DECAY = 0.1
# The document trained on: the shipped text (src/moe/corpus.txt, which the Rust tests measure perplexity
# on), then a line that starts with the prompt the text has nothing like (bytes outside ASCII, digits);
# encoded as the family's tokenizer encodes a prompt (BOS where it adds one) and followed by its EOS, so
# a fixture ends a text with EOS as a real checkpoint does.
DOMAIN_TEXT = "café: 42 boats, 12 ships and 7 men."

YARN = {
    "type": "yarn",
    "factor": 4.0,
    "original_max_position_embeddings": 128,
    "beta_fast": 32.0,
    "beta_slow": 1.0,
    # mscale != mscale_all_dim: the rope attention factor is != 1 (V2 and V3), and V3's softmax
    # scale gets mscale(factor, mscale_all_dim)^2 != 1, so a test sees both.
    "mscale": 1.0,
    "mscale_all_dim": 0.707,
}

COMMON = dict(
    vocab_size=VOCAB,
    hidden_size=64,
    max_position_embeddings=512,
    initializer_range=INIT_STD,
    tie_word_embeddings=False,
    pad_token_id=None,
)

# Special tokens per tokenizer style: `first` are trained first (ids 0..), `last` are appended after
# the learned vocabulary (as Qwen's are); `add_bos` says whether every encoding starts with BOS.
STYLES = {
    "llama": dict(first=["<unk>", "<s>", "</s>"], last=[], bos="<s>", eos="</s>", unk="<unk>", pad=None, add_bos=True),
    "qwen": dict(
        first=[],
        last=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        bos=None,
        eos=None,  # set per fixture
        unk=None,
        pad="<|endoftext|>",
        add_bos=False,
    ),
    "deepseek": dict(
        first=["<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"],
        last=[],
        bos="<｜begin▁of▁sentence｜>",
        eos="<｜end▁of▁sentence｜>",
        unk=None,
        pad="<｜end▁of▁sentence｜>",
        add_bos=True,
    ),
}


def fixture_specs():
    """name -> model class, tokenizer style (and eos token where the style leaves it open), dtype stored
    on disk, shard size (None: one file), config from the special token ids, generation_config's eos,
    and whether the router has an e_score_correction_bias to randomise."""
    return {
        "mixtral": dict(
            cls=MixtralForCausalLM,
            style="llama",
            dtype=torch.float32,
            max_shard_size="200KB",
            config=lambda ids: MixtralConfig(
                **COMMON,
                intermediate_size=32,
                num_hidden_layers=2,
                num_attention_heads=4,
                num_key_value_heads=2,
                num_local_experts=4,
                num_experts_per_tok=2,
                rms_norm_eps=1e-5,
                rope_theta=1e6,
                sliding_window=None,
                bos_token_id=ids["<s>"],
                eos_token_id=ids["</s>"],
            ),
            generation_eos=lambda ids: ids["</s>"],
        ),
        "qwen2_moe": dict(
            cls=Qwen2MoeForCausalLM,
            style="qwen",
            eos="<|endoftext|>",
            dtype=torch.bfloat16,
            max_shard_size=None,
            config=lambda ids: Qwen2MoeConfig(
                **COMMON,
                intermediate_size=96,
                moe_intermediate_size=32,
                shared_expert_intermediate_size=48,
                num_hidden_layers=3,
                num_attention_heads=4,
                num_key_value_heads=2,
                num_experts=8,
                num_experts_per_tok=2,
                norm_topk_prob=False,
                decoder_sparse_step=1,
                mlp_only_layers=[1],
                qkv_bias=True,
                rms_norm_eps=1e-6,
                rope_theta=1e6,
                bos_token_id=ids["<|endoftext|>"],
                eos_token_id=ids["<|endoftext|>"],
            ),
            generation_eos=lambda ids: ids["<|endoftext|>"],
        ),
        "qwen3_moe": dict(
            cls=Qwen3MoeForCausalLM,
            style="qwen",
            eos="<|im_end|>",
            dtype=torch.float16,
            max_shard_size=None,
            config=lambda ids: Qwen3MoeConfig(
                **COMMON,
                intermediate_size=96,
                moe_intermediate_size=32,
                num_hidden_layers=2,
                num_attention_heads=4,
                num_key_value_heads=2,
                head_dim=24,
                num_experts=8,
                num_experts_per_tok=2,
                norm_topk_prob=True,
                decoder_sparse_step=1,
                mlp_only_layers=[],
                attention_bias=False,
                rms_norm_eps=1e-6,
                rope_theta=1e6,
                bos_token_id=ids["<|endoftext|>"],
                eos_token_id=ids["<|im_end|>"],
            ),
            # As Qwen3 chat checkpoints ship it: a list of stop ids.
            generation_eos=lambda ids: [ids["<|im_end|>"], ids["<|endoftext|>"]],
        ),
        "deepseek_v2": dict(
            cls=DeepseekV2ForCausalLM,
            style="deepseek",
            dtype=torch.float32,
            max_shard_size=None,
            config=lambda ids: DeepseekV2Config(
                **COMMON,
                intermediate_size=96,
                moe_intermediate_size=32,
                num_hidden_layers=2,
                num_attention_heads=4,
                num_key_value_heads=4,
                kv_lora_rank=32,
                q_lora_rank=None,
                qk_nope_head_dim=16,
                qk_rope_head_dim=8,
                v_head_dim=16,
                n_routed_experts=8,
                n_shared_experts=2,
                num_experts_per_tok=2,
                first_k_dense_replace=1,
                topk_method="group_limited_greedy",
                n_group=2,
                topk_group=1,
                routed_scaling_factor=1.5,
                norm_topk_prob=False,
                rope_theta=10000.0,
                rope_scaling=dict(YARN),
                rms_norm_eps=1e-6,
                bos_token_id=ids["<｜begin▁of▁sentence｜>"],
                eos_token_id=ids["<｜end▁of▁sentence｜>"],
            ),
            generation_eos=lambda ids: ids["<｜end▁of▁sentence｜>"],
            # Trained with the softmax scale its reference is computed with (make_v5_fixtures.py).
            train_softmax_scale=deepseek_softmax_scale,
        ),
        "deepseek_v3": dict(
            cls=DeepseekV3ForCausalLM,
            style="deepseek",
            dtype=torch.float32,
            max_shard_size=None,
            config=lambda ids: DeepseekV3Config(
                **COMMON,
                intermediate_size=96,
                moe_intermediate_size=32,
                num_hidden_layers=2,
                num_attention_heads=4,
                num_key_value_heads=4,
                kv_lora_rank=32,
                q_lora_rank=24,
                qk_nope_head_dim=16,
                qk_rope_head_dim=8,
                v_head_dim=16,
                n_routed_experts=8,
                n_shared_experts=1,
                num_experts_per_tok=2,
                first_k_dense_replace=1,
                n_group=2,
                topk_group=1,
                routed_scaling_factor=2.5,
                norm_topk_prob=True,
                rope_interleave=True,
                rope_theta=10000.0,
                rope_scaling=dict(YARN),
                rms_norm_eps=1e-6,
                bos_token_id=ids["<｜begin▁of▁sentence｜>"],
                eos_token_id=ids["<｜end▁of▁sentence｜>"],
            ),
            generation_eos=lambda ids: ids["<｜end▁of▁sentence｜>"],
            correction_bias=True,
        ),
    }


def train_tokenizer(style: dict) -> Tokenizer:
    """Byte-level BPE on the corpus; `first` specials get ids 0.., `last` ones follow the learned vocab."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=BPE_VOCAB + len(style["first"]),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=style["first"],
        min_frequency=2,
        show_progress=False,
    )
    tok.train([str(CORPUS)], trainer)
    if style["last"]:
        tok.add_special_tokens(style["last"])
    if style["add_bos"]:
        bos = style["bos"]
        tok.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, tok.token_to_id(bos))]
        )
    else:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    return tok


def save_tokenizer(tok: Tokenizer, style: dict, eos: str, out: Path) -> None:
    kwargs = dict(
        tokenizer_object=tok,
        bos_token=style["bos"],
        eos_token=eos,
        model_max_length=512,
        clean_up_tokenization_spaces=False,
        add_bos_token=style["add_bos"],
        add_eos_token=False,
    )
    if style["unk"]:
        kwargs["unk_token"] = style["unk"]
    if style["pad"]:
        kwargs["pad_token"] = style["pad"]
    PreTrainedTokenizerFast(**kwargs).save_pretrained(out)


def perturb(model: torch.nn.Module, spec: dict) -> None:
    """Give the parameters transformers initialises to constants random values, so a test sees them."""
    with torch.no_grad():
        for name, module in model.named_modules():
            kind = type(module).__name__
            if "RMSNorm" in kind:
                # A norm weight of all ones would hide a missing multiply.
                module.weight.copy_(1.0 + 0.2 * torch.randn_like(module.weight))
            elif isinstance(module, torch.nn.Linear) and module.bias is not None:
                module.bias.copy_(INIT_STD * torch.randn_like(module.bias))
        if spec.get("correction_bias"):
            for name, buf in model.named_buffers():
                if name.endswith("e_score_correction_bias"):
                    # A zero bias would hide both a missing bias and one wrongly applied to the weights.
                    buf.copy_(torch.empty_like(buf).uniform_(-0.3, 0.3))


def train_documents() -> list:
    # One document, not one per paragraph: a fixture's prompts start where the text starts (after BOS,
    # and "The"), and as many documents starting alike would leave the first tokens nearly tied.
    return [CORPUS.read_text().strip() + "\n\n" + DOMAIN_TEXT]


def deepseek_softmax_scale(config) -> float:
    """DeepSeek's attention softmax scale: qk_head_dim^-0.5 * yarn_get_mscale(factor, mscale_all_dim)^2,
    yarn_get_mscale(s, m) = 0.1 * m * ln(s) + 1. transformers 4.57.1's DeepSeek-V2 leaves out the
    mscale^2 (README.md), so deepseek_v2 is trained with this scale set on its attention layers: trained
    as the model its 5.x reference runs."""
    rope = config.rope_scaling
    mscale = 0.1 * rope["mscale_all_dim"] * math.log(rope["factor"]) + 1.0
    return (config.qk_nope_head_dim + config.qk_rope_head_dim) ** -0.5 * mscale * mscale


def train(model: torch.nn.Module, tok: Tokenizer, eos_id: int, seed: int, softmax_scale=None) -> tuple:
    """Next-token training on `train_documents()` (see TRAIN_*), with each attention layer's softmax
    scale set to `softmax_scale(config)` meanwhile if given; returns the first and last losses."""
    stream = []
    for doc in train_documents():
        stream += tok.encode(doc).ids + [eos_id]
    # Cyclic, so that every token is in as many windows as any other (the last document too).
    stream = torch.tensor(stream + stream[:TRAIN_SEQ])
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=TRAIN_LR, weight_decay=TRAIN_WEIGHT_DECAY)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    attns = [layer.self_attn for layer in model.model.layers] if softmax_scale else []
    scales = [attn.scaling for attn in attns]
    for attn in attns:
        attn.scaling = softmax_scale(model.config)
    model.train()
    losses = []
    try:
        for _ in range(TRAIN_STEPS):
            starts = torch.randint(0, len(stream) - TRAIN_SEQ, (TRAIN_BATCH,), generator=gen)
            batch = torch.stack([stream[s : s + TRAIN_SEQ] for s in starts.tolist()])
            # The models shift the labels themselves: the loss is over each next token.
            loss = model(input_ids=batch, labels=batch, use_cache=False).loss
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(float(loss))
    finally:
        torch.set_num_threads(threads)
        for attn, scale in zip(attns, scales):
            attn.scaling = scale
    model.eval()
    return losses[0], losses[-1]


def stored_tensors(out: Path) -> dict:
    index = out / "model.safetensors.index.json"
    files = sorted(set(json.loads(index.read_text())["weight_map"].values())) if index.exists() else ["model.safetensors"]
    tensors = {}
    for f in files:
        with safe_open(out / f, framework="pt") as st:
            for k in st.keys():
                assert k not in tensors, f"{k} stored twice"
                tensors[k] = st.get_tensor(k)
    return tensors


def check_saved(model: torch.nn.Module, out: Path) -> None:
    """Every state_dict entry is stored, bit for bit, and nothing else."""
    state = model.state_dict()
    stored = stored_tensors(out)
    assert set(state) == set(stored), (set(state) ^ set(stored))
    for k, v in state.items():
        assert stored[k].dtype == v.dtype and torch.equal(stored[k], v), k


def load_reference_model(cls, out: Path):
    model, info = cls.from_pretrained(
        out, dtype=torch.float32, attn_implementation="eager", output_loading_info=True
    )
    bad = {k: v for k, v in info.items() if v}
    assert not bad, f"loading {out}: {bad}"
    return model.eval()


def greedy(model, ids: list) -> tuple:
    seq = list(ids)
    margin = math.inf
    with torch.no_grad():
        for _ in range(GREEDY_TOKENS):
            logits = model(torch.tensor([seq]), use_cache=False).logits[0, -1]
            top = torch.topk(logits, 2).values
            margin = min(margin, float(top[0] - top[1]))
            seq.append(int(torch.argmax(logits)))
    return seq[len(ids):], margin


def compact(x: float) -> float:
    # 8 significant digits: within 1e-7 relative of the f32 value, a third of repr's size.
    return float(f"{x:.8g}")


def build(name: str, spec: dict, seed: int, out: Path) -> dict:
    style = dict(STYLES[spec["style"]])
    eos = spec.get("eos", style["eos"])
    tok = train_tokenizer(style)
    ids = {t: tok.token_to_id(t) for t in style["first"] + style["last"]}
    assert tok.get_vocab_size() <= VOCAB

    config = spec["config"](ids)
    torch.manual_seed(seed)
    model = spec["cls"](config)
    perturb(model, spec)
    first_loss, last_loss = train(model, tok, ids[eos], seed, spec.get("train_softmax_scale"))
    print(f"{name}: seed {seed}, training loss {first_loss:.3f} -> {last_loss:.3f} in {TRAIN_STEPS} steps")
    model = model.to(spec["dtype"]).eval()

    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    model.generation_config = GenerationConfig(
        bos_token_id=config.bos_token_id,
        eos_token_id=spec["generation_eos"](ids),
        pad_token_id=ids[style["pad"]] if style["pad"] else None,
        do_sample=False,
    )
    save_kwargs = {"max_shard_size": spec["max_shard_size"]} if spec["max_shard_size"] else {}
    model.save_pretrained(out, safe_serialization=True, **save_kwargs)
    save_tokenizer(tok, style, eos, out)
    check_saved(model, out)
    if spec["max_shard_size"]:
        assert (out / "model.safetensors.index.json").exists() and len(list(out.glob("model-*.safetensors"))) >= 2

    ref_model = load_reference_model(spec["cls"], out)
    for k, v in ref_model.state_dict().items():
        assert torch.equal(v, model.state_dict()[k].float()), f"{k} did not load back"

    hf_tok = AutoTokenizer.from_pretrained(out)
    raw_tok = Tokenizer.from_file(str(out / "tokenizer.json"))
    prompts = []
    for text in PROMPTS:
        prompt_ids = hf_tok(text)["input_ids"]
        # The Rust side encodes with `tokenizers` from tokenizer.json alone: it must agree.
        assert raw_tok.encode(text).ids == prompt_ids, text
        assert 5 <= len(prompt_ids) <= 20, (text, len(prompt_ids))
        with torch.no_grad():
            logits = ref_model(torch.tensor([prompt_ids]), use_cache=False).logits[0]
        tokens, margin = greedy(ref_model, prompt_ids)
        prompts.append(
            dict(
                text=text,
                ids=prompt_ids,
                logits=[[compact(x) for x in row] for row in logits.tolist()],
                greedy=tokens,
                min_margin=compact(margin),
            )
        )

    if spec.get("correction_bias"):
        check_matters(spec, out, prompts, zero_correction_bias, "e_score_correction_bias")
    if spec["style"] == "deepseek":
        check_matters(spec, out, prompts, ungroup_routing, "group-limited routing (n_group/topk_group)")

    reference = {"transformers": transformers.__version__, "torch": torch.__version__.split("+")[0], "prompts": prompts}
    (out / "reference.json").write_text(json.dumps(reference, separators=(",", ":")) + "\n")
    return reference


def zero_correction_bias(model) -> None:
    for name, buf in model.named_buffers():
        if name.endswith("e_score_correction_bias"):
            buf.zero_()


def ungroup_routing(model) -> None:
    for layer in model.model.layers:
        gate = getattr(layer.mlp, "gate", None)
        if hasattr(gate, "topk_method"):
            gate.topk_method = "greedy"
        elif hasattr(gate, "topk_group"):
            gate.topk_group = gate.n_group


def check_matters(spec: dict, out: Path, prompts: list, change, what: str) -> None:
    """A routing option the fixture sets must change the logits of its prompts, or no test can see it."""
    model = load_reference_model(spec["cls"], out)
    diff = 0.0
    with torch.no_grad():
        change(model)
        for p in prompts:
            logits = model(torch.tensor([p["ids"]]), use_cache=False).logits[0]
            diff = max(diff, float((logits - torch.tensor(p["logits"])).abs().max()))
    assert diff > 1e-2, f"{what} changes nothing on the prompts (max logit diff {diff})"


def check_generate(spec: dict, out: Path, reference: dict) -> list:
    """Sanity: transformers' cached greedy `generate` agrees with the full-forward loop up to its EOS stop."""
    model = load_reference_model(spec["cls"], out)
    eos = model.generation_config.eos_token_id
    eos = set(eos if isinstance(eos, list) else [eos])
    results = []
    for p in reference["prompts"]:
        inp = torch.tensor([p["ids"]])
        with torch.no_grad():
            gen = model.generate(
                inp, attention_mask=torch.ones_like(inp), do_sample=False, max_new_tokens=GREEDY_TOKENS
            )[0, len(p["ids"]):].tolist()
        expect = p["greedy"]
        stop = next((i + 1 for i, t in enumerate(expect) if t in eos), len(expect))
        agrees = gen[:stop] == expect[:stop]
        results.append((agrees, stop))
        assert agrees, (p["text"], gen, expect)
    return results


def dir_size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.iterdir())


def main(names: list) -> None:
    specs = fixture_specs()
    names = names or list(specs)
    for name in names:
        spec = specs[name]
        for seed in range(SEED_TRIES):
            with tempfile.TemporaryDirectory() as tmp:
                trial = Path(tmp) / name
                ref = build(name, spec, seed, trial)
                margin = min(p["min_margin"] for p in ref["prompts"])
                if margin < MIN_MARGIN:
                    print(f"{name}: seed {seed} min margin {margin:.2e} < {MIN_MARGIN}, next seed")
                    continue
                gen = check_generate(spec, trial, ref)
                dest = OUT / name
                if dest.exists():
                    shutil.rmtree(dest)
                shutil.copytree(trial, dest)
            eos = json.loads((dest / "generation_config.json").read_text())["eos_token_id"]
            eos = eos if isinstance(eos, list) else [eos]
            first_eos = [next((i for i, t in enumerate(p["greedy"]) if t in eos), None) for p in ref["prompts"]]
            margins = ", ".join(f"{p['min_margin']:.4g}" for p in ref["prompts"])
            lens = ", ".join(str(len(p["ids"])) for p in ref["prompts"])
            print(
                f"{name}: seed {seed}, prompt lengths {lens}, min margins {margins}, "
                f"generate agrees {[g[0] for g in gen]} (compared up to {[g[1] for g in gen]} tokens), "
                f"first EOS in greedy at {first_eos}, "
                f"{dir_size(dest) / 1024:.0f} KiB"
            )
            break
        else:
            sys.exit(f"{name}: no seed in {SEED_TRIES} gives min margin >= {MIN_MARGIN}")


if __name__ == "__main__":
    main(sys.argv[1:])
