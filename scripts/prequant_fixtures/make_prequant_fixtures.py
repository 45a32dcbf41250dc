"""Pre-quantized checkpoint fixtures: tests/fixtures/prequant/<name>/.

Each fixture is one of the float fixtures of tests/fixtures/hf (made by scripts/hf_fixtures)
written in a published pre-quantized format, with `reference.json`: what the format's own
dequantized model computes in transformers (f32, eager), which the Rust tests compare with.

- `ct_w8a8_qwen3_moe`, `ct_w8a16_qwen2_moe`: LLM Compressor's W8A8 preset (int8 weights per
  channel, activations dynamic per token; `int-quantized`) and int8 weights per channel without
  activation quantization (W8A16 per channel; `pack-quantized`), written by llmcompressor's
  `oneshot` and compressed-tensors themselves. The reference is the checkpoint decompressed by compressed-tensors
  (`ModelCompressor.decompress`).
- `modelslim_w8a8_deepseek_v3`, `modelslim_w8a16_mixtral`: msModelSlim's output as
  vllm-ascend reads it. msModelSlim needs an NPU (torch_npu), so this script writes the layout
  itself, from vllm-ascend's loader (vllm_ascend/quantization/modelslim_config.py and
  methods/w8a8_static.py, w8a8_dynamic.py, w8a16.py; docs/source/user_guide/feature_guide/
  quantization.md): `quant_model_description.json` naming every tensor's scheme, int8
  `weight [out, in]`, `weight_scale` and `weight_offset [out, 1]`; static W8A8 adds
  `input_scale [1]`, `input_offset [1]`, `deq_scale [out]` (f32, = input_scale * weight_scale)
  and `quant_bias [out]` (int32). Weights are quantized per channel (symmetric for W8A8, as
  vllm-ascend's W8A8 kernels ignore `weight_offset`; asymmetric for W8A16, whose
  aclnnWeightQuantBatchMatmulV2 computes `(w + weight_offset) * weight_scale`); static
  activations per tensor, asymmetric, from min/max over the shipped text (msModelSlim's
  calibration is min/max too): `x_q = round(x / input_scale + input_offset)`, so `quant_bias`
  carries `-input_offset * sum_k w_q` (and the float bias, rounded by `deq_scale`, where there
  is one). vllm-ascend has W8A8 (static) for linear layers only and MoE experts only in
  W8A8_DYNAMIC; MLA's `kv_b_proj` stays FLOAT (vllm_ascend/attention/mla_v1.py refuses it
  quantized). The reference dequantizes the weights as vllm-ascend's operators read them.
- `fp8_deepseek_v3`: DeepSeek-V3's FP8 release format: e4m3 `weight` with f32
  `weight_scale_inv` per block (`quantization_config` `{"quant_method": "fp8", "fmt": "e4m3",
  "weight_block_size": [b0, b1]}`), quantized and dequantized as DeepSeek-V3's
  inference/kernel.py (`weight_quant`, `weight_dequant`) and inference/fp8_cast_bf16.py do:
  `scale_inv = amax(block) / 448`, `w = fp8 * scale_inv`. Blocks of 16 x 32 (not 128 x 128)
  so that the tiny model has several blocks per matrix, partial ones and non-square ones.

Float tensors are stored in bf16 (config `dtype` "bfloat16"): the formats are published for
bf16 models, and the Rust tests serve them in bf16 on the int8 operators.

reference.json:
  { "format": str, "versions": {...},
    "prompts": [ { "text", "ids", "top1": [int per position], "greedy": [int; 32],
                   "margins": [float; 32] } ],          # margin: top1 - top2 logit at each step
    "text": { "ids": [int; 128], "top1": [int; 127], "nll": float } }   # mean next-token NLL

Run (CPU, about 2 min): see README.md beside this file.
"""

import json
import math
import shutil
import sys
import tempfile
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file
from tokenizers import Tokenizer
from transformers import AutoConfig, AutoModelForCausalLM

ROOT = Path(__file__).resolve().parents[2]
HF = ROOT / "tests" / "fixtures" / "hf"
OUT = ROOT / "tests" / "fixtures" / "prequant"
CORPUS = ROOT / "burn-ascend-llm" / "src" / "moe" / "corpus.txt"
PROMPTS = ["The sea was", "café: 42 boats", "The wind came from the west."]
TEXT_TOKENS = 128
GREEDY_TOKENS = 32
TOKENIZER_FILES = ["tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json"]
FP8_BLOCK = [16, 32]
E4M3_MAX = 448.0


def encode(base: Path, text: str) -> list:
    """The ids the Rust side's TextTokenizer gives: tokenizers with the checkpoint's template."""
    return Tokenizer.from_file(str(base / "tokenizer.json")).encode(text).ids


def base_tensors(base: Path) -> dict:
    """The base fixture's tensors as its files name them (per-expert, as transformers 4.57 wrote
    them; transformers 5.x fuses the experts in memory, so its state_dict is not used)."""
    index = base / "model.safetensors.index.json"
    files = sorted(set(json.loads(index.read_text())["weight_map"].values())) if index.exists() else ["model.safetensors"]
    out = {}
    for f in files:
        with safe_open(base / f, framework="pt") as st:
            for k in st.keys():
                out[k] = st.get_tensor(k)
    return out


def is_linear(key: str, value: torch.Tensor) -> bool:
    """A decoder layer's linear weight `[out, in]` (routers included)."""
    return key.startswith("model.layers.") and key.endswith(".weight") and value.dim() == 2


def float_model(base: Path):
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32, attn_implementation="eager")
    return model.eval()


def input_ranges(model, names: list, ids: list) -> dict:
    """min/max of each named linear's input over `ids`: msModelSlim's static calibration."""
    ranges, hooks = {}, []
    mods = dict(model.named_modules())
    for n in names:
        def hook(_m, args, n=n):
            x = args[0].detach()
            lo, hi = ranges.get(n, (math.inf, -math.inf))
            ranges[n] = (min(lo, float(x.min())), max(hi, float(x.max())))
        hooks.append(mods[n].register_forward_pre_hook(hook))
    with torch.no_grad():
        model(torch.tensor([ids]), use_cache=False)
    for h in hooks:
        h.remove()
    return ranges


def per_channel(w: torch.Tensor, symmetric: bool):
    """int8 q [out, in], scale and offset [out, 1] with w ~ (q + offset) * scale."""
    w = w.float()
    if symmetric:
        scale = (w.abs().amax(1, keepdim=True) / 127).clamp_min(1e-12)
        return torch.round(w / scale).clamp(-128, 127).to(torch.int8), scale, torch.zeros_like(scale)
    lo, hi = w.amin(1, keepdim=True).clamp(max=0), w.amax(1, keepdim=True).clamp(min=0)
    scale = ((hi - lo) / 255).clamp_min(1e-12)
    zero = torch.round(-128 - lo / scale)  # q_stored = round(w / scale) + zero in [-128, 127]
    q = (torch.round(w / scale) + zero).clamp(-128, 127)
    return q.to(torch.int8), scale, -zero


def modelslim(name: str, base: Path, plan) -> dict:
    """Writes the msModelSlim layout of `base`; `plan(linear name) -> scheme` ("FLOAT", "W8A8",
    "W8A8_DYNAMIC", "W8A16"). Returns the dequantized state dict (the reference's weights)."""
    tensors = base_tensors(base)
    lin = {k.rsplit(".", 1)[0] for k, v in tensors.items() if is_linear(k, v)}
    text = encode(base, CORPUS.read_text())[:TEXT_TOKENS]
    static = [n for n in sorted(lin) if plan(n) == "W8A8"]
    ranges = input_ranges(float_model(base), static, text)
    out, desc, ref = {}, {"model_quant_type": "W8A8", "version": "1.0.0"}, {}
    for key, value in tensors.items():
        module = key.rsplit(".", 1)[0]
        scheme = plan(module) if module in lin else "FLOAT"
        if scheme == "FLOAT" or not key.endswith(".weight"):
            # Static W8A8 carries the bias in quant_bias (vllm-ascend passes no other).
            assert not (scheme == "W8A8" and key.endswith(".bias")), f"{key}: no static W8A8 on a biased layer"
            out[key], desc[key], ref[key] = value.to(torch.bfloat16), scheme, value.to(torch.bfloat16).float()
            continue
        q, scale, offset = per_channel(value, symmetric=scheme != "W8A16")
        out[key] = q
        out[f"{module}.weight_scale"] = scale
        out[f"{module}.weight_offset"] = offset
        ref[key] = (q.float() + offset) * scale
        if scheme == "W8A8":
            lo, hi = ranges[module]
            lo, hi = min(lo, 0.0), max(hi, 0.0)
            in_scale = torch.tensor([(hi - lo) / 255], dtype=torch.float32)
            in_offset = torch.round(-128 - lo / in_scale).clamp(-128, 127)
            out[f"{module}.input_scale"] = in_scale
            out[f"{module}.input_offset"] = in_offset.to(torch.int8)
            deq = (in_scale * scale.reshape(-1)).to(torch.float32)
            out[f"{module}.deq_scale"] = deq
            out[f"{module}.quant_bias"] = (-in_offset * q.to(torch.int64).sum(1)).to(torch.int32)
        for k in [k for k in out if k.startswith(module + ".") and k != key]:
            desc[k] = scheme
        desc[key] = scheme
    dest = OUT / name
    write(dest, base, out, {"dtype": "bfloat16"})
    (dest / "quant_model_description.json").write_text(json.dumps(desc, indent=2, sort_keys=True) + "\n")
    return ref


def fp8(name: str, base: Path) -> dict:
    """Writes `base` in DeepSeek-V3's block FP8 format (every decoder linear but the router)."""
    out, ref = {}, {}
    b0, b1 = FP8_BLOCK
    for key, value in base_tensors(base).items():
        if not is_linear(key, value) or key.endswith(".mlp.gate.weight"):
            out[key] = value.to(torch.bfloat16)
            ref[key] = out[key].float()
            continue
        module = key.rsplit(".", 1)[0]
        w = value.float()
        rows, cols = w.shape
        gr, gc = math.ceil(rows / b0), math.ceil(cols / b1)
        padded = torch.zeros(gr * b0, gc * b1)
        padded[:rows, :cols] = w
        blocks = padded.reshape(gr, b0, gc, b1)
        # DeepSeek-V3 inference/kernel.py act/weight_quant: s = amax / 448, y = x / s.
        s = (blocks.abs().amax(dim=(1, 3)) / E4M3_MAX).clamp_min(1e-12)
        q = (blocks / s[:, None, :, None]).to(torch.float8_e4m3fn)
        q = q.reshape(gr * b0, gc * b1)[:rows, :cols].contiguous()
        out[key] = q
        out[f"{module}.weight_scale_inv"] = s.to(torch.float32)
        # inference/kernel.py weight_dequant: y = x * s per block, in f32.
        deq = q.float().reshape(rows, cols)
        full = s.repeat_interleave(b0, 0)[:rows].repeat_interleave(b1, 1)[:, :cols]
        ref[key] = deq * full
    config = {
        "dtype": "bfloat16",
        "quantization_config": {
            "activation_scheme": "dynamic",
            "fmt": "e4m3",
            "quant_method": "fp8",
            "weight_block_size": FP8_BLOCK,
        },
    }
    write(OUT / name, base, out, config)
    return ref


def compressed_tensors(name: str, base: Path, scheme: str, ignore: list) -> dict:
    """Runs LLM Compressor's `scheme` preset on `base` (bf16) and saves it compressed; returns
    the state dict compressed-tensors decompresses it to."""
    from llmcompressor import oneshot
    from llmcompressor.modifiers.quantization import QuantizationModifier

    from compressed_tensors.quantization import QuantizationArgs, QuantizationScheme

    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.bfloat16)
    if scheme == "W8A16":
        # Per output channel: LLM Compressor's W8A16 preset quantizes in groups of 128, which
        # the per-channel int8 operators do not read (the loader refuses group_size by name).
        channel = QuantizationArgs(num_bits=8, type="int", strategy="channel", symmetric=True)
        recipe = QuantizationModifier(
            config_groups={"group_0": QuantizationScheme(targets=["Linear"], weights=channel)}, ignore=ignore
        )
    else:
        recipe = QuantizationModifier(targets="Linear", scheme=scheme, ignore=ignore)
    oneshot(model=model, recipe=recipe)
    dest = OUT / name
    if dest.exists():
        shutil.rmtree(dest)
    model.save_pretrained(dest, save_compressed=True)
    for f in TOKENIZER_FILES:
        if (base / f).exists():
            shutil.copy(base / f, dest / f)
    (dest / "recipe.yaml").unlink(missing_ok=True)
    # compressed-tensors' own decompression, module by module (transformers' loader cannot
    # decompress into its fused MoE experts), as the reference's float tensors.
    from compressed_tensors.compressors import BaseCompressor
    from compressed_tensors.quantization import QuantizationConfig

    config = QuantizationConfig.model_validate(json.loads((dest / "config.json").read_text())["quantization_config"])
    (scheme,) = config.config_groups.values()
    compressor = BaseCompressor.get_value_from_registry(config.format)
    stored = base_tensors(dest)
    modules = sorted({k.rsplit(".", 1)[0] for k in stored if k.endswith(".weight_scale")})
    packed = ("weight", "weight_packed", "weight_scale", "weight_shape", "weight_zero_point")
    ref = {k: v.float() for k, v in stored.items()
           if k.rsplit(".", 1)[0] not in modules or k.rsplit(".", 1)[1] not in packed}
    for m in modules:
        local = {k[len(m) + 1:]: v for k, v in stored.items() if k.rsplit(".", 1)[0] == m}
        ref[f"{m}.weight"] = compressor.decompress(local, scheme)["weight"].float()
    return ref

def write(dest: Path, base: Path, tensors: dict, config_changes: dict) -> None:
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    save_file({k: v.contiguous() for k, v in sorted(tensors.items())}, dest / "model.safetensors", metadata={"format": "pt"})
    config = json.loads((base / "config.json").read_text())
    config.update(config_changes)
    (dest / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    for f in TOKENIZER_FILES:
        if (base / f).exists():
            shutil.copy(base / f, dest / f)


def dequantized_model(base: Path, state):
    """The float model of `base` holding `state` (dequantized tensors as the files name them),
    or `state` itself when it is a model already."""
    if isinstance(state, torch.nn.Module):
        return state.float().eval()
    with tempfile.TemporaryDirectory() as tmp:
        save_file({k: v.float().contiguous() for k, v in state.items()}, Path(tmp) / "model.safetensors", metadata={"format": "pt"})
        config = json.loads((base / "config.json").read_text())
        (Path(tmp) / "config.json").write_text(json.dumps(config))
        model, info = AutoModelForCausalLM.from_pretrained(
            tmp, dtype=torch.float32, attn_implementation="eager", output_loading_info=True
        )
    bad = {k: v for k, v in info.items() if v}
    assert not bad, bad
    return model.eval()


def reference(name: str, base: Path, state, fmt: str) -> None:
    """reference.json of the dequantized model `state` (the float architecture of `base`)."""
    model = dequantized_model(base, state)

    def logits(ids):
        with torch.no_grad():
            return model(torch.tensor([ids]), use_cache=False).logits[0]

    prompts = []
    for text in PROMPTS:
        ids = encode(base, text)
        seq, margins = list(ids), []
        for _ in range(GREEDY_TOKENS):
            last = logits(seq)[-1]
            top = torch.topk(last, 2).values
            margins.append(float(f"{float(top[0] - top[1]):.6g}"))
            seq.append(int(torch.argmax(last)))
        prompts.append({"text": text, "ids": ids, "top1": logits(ids).argmax(-1).tolist(),
                        "greedy": seq[len(ids):], "margins": margins})
    text_ids = encode(base, CORPUS.read_text())[:TEXT_TOKENS]
    rows = logits(text_ids)[:-1]
    nll = torch.nn.functional.cross_entropy(rows, torch.tensor(text_ids[1:]))
    import compressed_tensors, llmcompressor, transformers
    out = {
        "format": fmt,
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "compressed-tensors": compressed_tensors.__version__, "llmcompressor": llmcompressor.__version__},
        "prompts": prompts,
        "text": {"ids": text_ids, "top1": rows.argmax(-1).tolist(), "nll": float(f"{float(nll):.8g}")},
    }
    (OUT / name / "reference.json").write_text(json.dumps(out, indent=1) + "\n")
    size = sum(f.stat().st_size for f in (OUT / name).iterdir())
    low = min(min(p["margins"]) for p in prompts)
    print(f"{name}: {size / 1024:.0f} KiB, text nll {float(nll):.4f}, smallest greedy margin {low:.4g}")


def deepseek_plan(module: str) -> str:
    # msModelSlim's DeepSeek W8A8 as vllm-ascend serves it: MLA and dense MLPs static W8A8,
    # MoE experts (routed and shared) W8A8_DYNAMIC, kv_b_proj and the router FLOAT.
    if module.endswith(".kv_b_proj") or module.endswith(".mlp.gate"):
        return "FLOAT"
    if ".experts." in module or ".shared_experts." in module:
        return "W8A8_DYNAMIC"
    return "W8A8"


def mixtral_plan(module: str) -> str:
    # W8A16 for the attention projections (vllm-ascend has W8A16 for linear layers only), the
    # MoE experts W8A8_DYNAMIC (its only int8 MoE scheme); layer 0's o_proj and the routers FLOAT.
    if module.endswith(".gate") or module == "model.layers.0.self_attn.o_proj":
        return "FLOAT"
    if ".experts." in module:
        return "W8A8_DYNAMIC"
    return "W8A16"


FIXTURES = {
    "ct_w8a8_qwen3_moe": lambda: ("qwen3_moe", "compressed-tensors W8A8",
                                  lambda n, b: compressed_tensors(n, b, "W8A8", ["lm_head", "re:.*mlp.gate$"])),
    # Qwen2-MoE, not Mixtral: transformers 5.x writes a linearized Mixtral's experts as
    # `mlp.experts.N.gate_proj`, a layout neither it nor the published checkpoints use.
    "ct_w8a16_qwen2_moe": lambda: ("qwen2_moe", "compressed-tensors W8A16",
                                   lambda n, b: compressed_tensors(
                                       n, b, "W8A16", ["lm_head", "re:.*mlp.gate$", "re:.*shared_expert_gate$"])),
    "modelslim_w8a8_deepseek_v3": lambda: ("deepseek_v3", "modelslim W8A8 + W8A8_DYNAMIC",
                                           lambda n, b: modelslim(n, b, deepseek_plan)),
    "modelslim_w8a16_mixtral": lambda: ("mixtral", "modelslim W8A16 + W8A8_DYNAMIC",
                                        lambda n, b: modelslim(n, b, mixtral_plan)),
    "fp8_deepseek_v3": lambda: ("deepseek_v3", "fp8 block", lambda n, b: fp8(n, b)),
}


def main(names: list) -> None:
    torch.manual_seed(0)
    torch.set_num_threads(1)
    for name in names or list(FIXTURES):
        base_name, fmt, make = FIXTURES[name]()
        base = HF / base_name
        state = make(name, base)
        reference(name, base, state, fmt)


if __name__ == "__main__":
    main(sys.argv[1:])
