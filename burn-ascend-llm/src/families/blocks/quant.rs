//! Quantized dense projections for inference ([`Projection`]): a loaded `Linear`'s weight
//! quantized to int8 per output channel on the device, run on the int8 operators.
//!
//! In W8A8, grouped-query attention's q, k and v projections are smoothed (SmoothQuant,
//! α = 0.5): the per-token int8 range is set by a few large channels, so each input channel j
//! is divided by `s_j = sqrt(range_j / max_n |w_jn|)` before quantization (aclnnDynamicQuant's
//! smooth scales, no extra launch) and the weight's row j multiplied by it, which leaves the
//! product as it was. With no calibration data, the input norm's scale `|γ_j|` stands for the
//! channel's range (the normalised values it multiplies spread alike in every channel);
//! msModelSlim's anti-outlier step does the same with calibrated ranges. Measured on the
//! checkpoint fixtures, this cuts W8A8's mean logit error by 7-16 % on Mixtral and Qwen-MoE
//! (and Qwen2-MoE's perplexity increase from 2.1 % to 0.1 %); the same estimate on MLA's
//! projections or the MLPs' gate and up raised the error on DeepSeek's fixtures, so those are
//! not smoothed. Projections not fed by a norm (o_proj, down_proj) have no such estimate.
//!
//! Burn 0.21's `nn::Linear::forward` dequantizes a quantized weight before the backend sees
//! it, so a `Linear` quantized by Burn's `Quantizer` never reaches the int8 operators: the
//! quantized form calls the fused ops directly. The operators take F16/BF16 activations only;
//! on an f32 model the fused ops run their composed Burn defaults (the same int8 arithmetic,
//! on the vector and float cube units), so f32 models are correct but gain no speed.

use std::fmt;
use std::ops::Range;
use std::str::FromStr;

use burn::module::{Module, Param, ParamId};
use burn::nn::Linear;
use burn::tensor::backend::Backend;
use burn::tensor::{DType, FloatDType, Int, Tensor};
use burn_ascend::{fused, FusedOps};

use crate::families::weights::Sink;

/// How a model's projections and experts are quantized (`--quantize`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Quantize {
    /// int8 weights (per output channel), activations in the model's float type
    /// (aclnnWeightQuantBatchMatmulV2, GroupedMatmulV4 A16W8).
    W8A16,
    /// int8 weights and activations, the activations quantized per token at run time
    /// (aclnnDynamicQuant + aclnnQuantMatmulV4, MoeInitRoutingQuantV2 + GroupedMatmulV4 A8W8).
    W8A8,
}

/// The operator that reads a quantized weight's per-channel scales.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScaleReader {
    /// A dense projection: aclnnWeightQuantBatchMatmulV2 (W8A16), aclnnQuantMatmulV4 (W8A8).
    Matmul,
    /// The experts: aclnnGroupedMatmulV4 (A16W8, A8W8).
    GroupedMatmul,
}

/// The type `reader` takes the scales of a `mode` weight in, for activations computed in
/// `compute`: the one place these operator rules are stated. Scales are kept in f32; another
/// type is a copy made once when quantizing, since a cast per call would be one more launch
/// reading every scale each step.
pub fn operator_scale_type(reader: ScaleReader, mode: Quantize, compute: DType) -> DType {
    match (mode, reader) {
        // WQBMMv2's antiquant scale and GroupedMatmulV4 A16W8's are x's type
        // (aclnn-quant-attention-norm.md).
        (Quantize::W8A16, _) => compute,
        // QuantMatmulV4 dequantizes with f32 weight and per-token scales (burn-ascend-core's
        // quant_matmul checks it).
        (Quantize::W8A8, ScaleReader::Matmul) => DType::F32,
        // The A8W8 table pairs a BF16 out with a BF16 scale and an F16 out with an F32 one
        // (aclnn-quant-attention-norm.md, GroupedMatmulV4, ND weight).
        (Quantize::W8A8, ScaleReader::GroupedMatmul) if compute == DType::BF16 => DType::BF16,
        (Quantize::W8A8, ScaleReader::GroupedMatmul) => DType::F32,
    }
}

impl FromStr for Quantize {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "w8a16" => Ok(Quantize::W8A16),
            "w8a8" => Ok(Quantize::W8A8),
            other => Err(format!(
                "unknown quantization {other:?}: expected w8a16 or w8a8"
            )),
        }
    }
}

impl fmt::Display for Quantize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Quantize::W8A16 => "w8a16",
            Quantize::W8A8 => "w8a8",
        })
    }
}

/// Static per-tensor activation quantization (msModelSlim's static W8A8, as vllm-ascend runs it
/// in vllm_ascend/quantization/methods/w8a8_static.py): `x_q = round(x * recip + offset)`
/// saturated to int8, then `(x_q @ w + quant_bias) * deq_scale`.
#[derive(Module, Debug)]
pub struct StaticInput<B: Backend> {
    /// `1 / input_scale` `[1]` f32, rounded to the layer's float type first as vllm-ascend
    /// keeps it (`aclnn_input_scale_reciprocal` in the model's dtype).
    recip: Param<Tensor<B, 1>>,
    /// `input_offset` `[1]` f32.
    offset: Param<Tensor<B, 1>>,
    /// `deq_scale` `[N]` f32 (`input_scale * weight_scale`).
    deq_scale: Param<Tensor<B, 1>>,
    /// `quant_bias * deq_scale` `[N]` f32: aclnnQuantMatmulV4 adds the int32 `quant_bias` to
    /// the accumulator before dequantizing; here it is added after, in f32, to the output.
    bias: Param<Tensor<B, 1>>,
}

impl<B: Backend> StaticInput<B> {
    /// From the checkpoint's `input_scale [1]`, `input_offset [1]`, `deq_scale [N]` and
    /// `quant_bias [N]` (as f32), for a layer computing in `dtype`.
    pub fn new(
        input_scale: Tensor<B, 1>,
        input_offset: Tensor<B, 1>,
        deq_scale: Tensor<B, 1>,
        quant_bias: Tensor<B, 1>,
        dtype: DType,
    ) -> Self {
        let recip = input_scale.recip().cast(dtype).cast(DType::F32);
        Self {
            recip: Param::initialized(ParamId::new(), recip),
            offset: Param::initialized(ParamId::new(), input_offset),
            bias: Param::initialized(ParamId::new(), quant_bias * deq_scale.clone()),
            deq_scale: Param::initialized(ParamId::new(), deq_scale),
        }
    }

    /// `x [M, K]` quantized to int8 with the calibrated scale and offset.
    ///
    /// ASSUMPTION (aclnnAscendQuantV3's `round` mode is not documented further): to nearest,
    /// ties to even, as the emulator's aclnnDynamicQuant rounds; computed in f32.
    fn quantize(&self, x: Tensor<B, 2>) -> Tensor<B, 2, Int> {
        let scaled = x.cast(DType::F32) * self.recip.val().unsqueeze_dim::<2>(0)
            + self.offset.val().unsqueeze_dim::<2>(0);
        scaled.round().clamp(-128.0, 127.0).int().cast(DType::I8)
    }
}

/// A `Linear` quantized per output channel: int8 `[K, N]`, f32 scales `[N]`, the bias kept
/// in float.
#[derive(Module, Debug)]
pub struct QuantLinear<B: Backend> {
    /// Parameters so that the model's record (which a device reset restores) holds them.
    weight: Param<Tensor<B, 2, Int>>,
    scale: Param<Tensor<B, 1>>,
    /// The scales in the type the operator reads them in, when that is not f32
    /// ([`operator_scale_type`]).
    operator_scale: Option<Param<Tensor<B, 1>>>,
    /// W8A8 after a norm: the activations' smooth scales `1 / s` in the layer's type (the
    /// weight's rows were multiplied by `s`).
    smooth: Option<Param<Tensor<B, 1>>>,
    bias: Option<Param<Tensor<B, 1>>>,
    /// W8A16 with a weight offset (an asymmetric checkpoint's): `offset * scale` `[N]` f32,
    /// the weight being `(w + offset) * scale`.
    offset_term: Option<Param<Tensor<B, 1>>>,
    /// W8A8 with static activation scales (a pre-quantized checkpoint's); dynamic per token
    /// when `None`.
    static_input: Option<StaticInput<B>>,
    #[module(skip)]
    mode: Quantize,
    /// The float type the layer had (what [`Projection::save`] writes).
    #[module(skip)]
    dtype: DType,
}

impl<B: FusedOps> QuantLinear<B> {
    /// Quantizes `linear`'s weight on the device; in W8A8, smoothed for inputs whose channels
    /// span `input_range [K]` (see the module doc), if given.
    pub fn new(linear: Linear<B>, mode: Quantize, input_range: Option<Tensor<B, 1>>) -> Self {
        let w = linear.weight.val();
        let dtype = w.dtype();
        let (w, smooth) = match input_range {
            Some(range) if mode == Quantize::W8A8 => {
                let w = w.cast(DType::F32);
                // A zero channel or row keeps s = 1 rather than dividing by zero.
                let tiny = f32::MIN_POSITIVE as f64;
                let range = range.cast(DType::F32).abs();
                let w_max = w.clone().abs().max_dim(1).squeeze_dim::<1>(1);
                let usable = range
                    .clone()
                    .greater_elem(tiny)
                    .bool_and(w_max.clone().greater_elem(tiny));
                let s = (range.clamp_min(tiny) / w_max.clamp_min(tiny)).sqrt();
                let ones = Tensor::ones_like(&s);
                let s = s.mask_where(usable.bool_not(), ones);
                // The activations are multiplied by 1/s rounded to their type: the weight takes
                // that rounded value's inverse, so the product is unchanged but for the int8 steps.
                let smooth = s.recip().cast(dtype);
                let w = w / smooth.clone().cast(DType::F32).unsqueeze_dim(1);
                (w, Some(smooth))
            }
            _ => (w, None),
        };
        let (weight, scale) = fused::quantize_weight_per_channel::<B, 2, 1>(w);
        let scale = scale.detach();
        let scale_type = operator_scale_type(ScaleReader::Matmul, mode, dtype);
        Self {
            weight: Param::initialized(ParamId::new(), weight),
            operator_scale: (scale_type != DType::F32)
                .then(|| Param::initialized(ParamId::new(), scale.clone().cast(scale_type))),
            scale: Param::initialized(ParamId::new(), scale),
            smooth: smooth.map(|s| Param::initialized(ParamId::new(), s.detach())),
            bias: linear.bias,
            offset_term: None,
            static_input: None,
            mode,
            dtype,
        }
    }

    /// `x [.., K]` times the weight (rows folded into one matrix), plus the bias: `[.., N]`.
    pub fn forward<const D: usize>(&self, x: Tensor<B, D>) -> Tensor<B, D> {
        let mut dims = x.dims();
        let k = dims[D - 1];
        let rows = dims[..D - 1].iter().product::<usize>();
        let x = x.reshape([rows, k]);
        let w = self.weight.val();
        let s = self.operator_scale.as_ref().unwrap_or(&self.scale).val();
        let y = match (self.mode, &self.static_input) {
            (Quantize::W8A16, _) => {
                let y = fused::weight_quant_matmul(x.clone(), w, s, 0);
                match &self.offset_term {
                    // sum_k x_k (w_kn + o_n) s_n = (x @ (w s))_n + (sum_k x_k) o_n s_n: the
                    // offset's term in f32 beside the operator, which takes no offset here.
                    Some(t) => {
                        let dtype = y.dtype();
                        let sums = x.cast(DType::F32).sum_dim(1);
                        y + (sums * t.val().unsqueeze_dim(0)).cast(dtype)
                    }
                    None => y,
                }
            }
            (Quantize::W8A8, Some(st)) => {
                let dtype = FloatDType::from(x.dtype());
                let q = st.quantize(x);
                let unit = Tensor::ones([1], (&q.device(), DType::F32));
                let y = fused::quant_matmul(q, w, st.deq_scale.val(), unit, dtype);
                let out = y.dtype();
                y + st.bias.val().unsqueeze_dim(0).cast(out)
            }
            (Quantize::W8A8, None) => {
                let dtype = FloatDType::from(x.dtype());
                let smooth = self.smooth.as_ref().map(Param::val);
                let (q, x_scale) = fused::dynamic_quant::<B, 2, 1>(x, smooth);
                fused::quant_matmul(q, w, s, x_scale, dtype)
            }
        };
        let y = match &self.bias {
            Some(b) => {
                let dtype = y.dtype();
                y + b.val().cast(dtype).unsqueeze_dim(0)
            }
            None => y,
        };
        dims[D - 1] = y.dims()[1];
        y.reshape(dims)
    }

    /// The weight it computes with, dequantized on the device in the layer's float type (a
    /// smoothed weight's rows divided back by `s`).
    fn dequantized(&self) -> Tensor<B, 2> {
        let mut w = self.weight.val().float().cast(DType::F32) * self.scale.val().unsqueeze_dim(0);
        if let Some(t) = &self.offset_term {
            w = w + t.val().unsqueeze_dim(0);
        }
        if let Some(smooth) = &self.smooth {
            w = w * smooth.val().cast(DType::F32).unsqueeze_dim(1);
        }
        w.cast(self.dtype)
    }
}

impl<B: Backend> QuantLinear<B> {
    /// A layer a checkpoint stores quantized: int8 `weight [K, N]` with f32 per-channel `scale
    /// [N]`, computing in `dtype`; W8A16 with an optional per-channel `offset [N]` (f32, the
    /// weight being `(w + offset) * scale`), W8A8 with dynamic activations or `static_input`.
    pub fn stored(
        weight: Tensor<B, 2, Int>,
        scale: Tensor<B, 1>,
        offset: Option<Tensor<B, 1>>,
        static_input: Option<StaticInput<B>>,
        bias: Option<Param<Tensor<B, 1>>>,
        mode: Quantize,
        dtype: DType,
    ) -> Self {
        let scale_type = operator_scale_type(ScaleReader::Matmul, mode, dtype);
        Self {
            weight: Param::initialized(ParamId::new(), weight),
            operator_scale: (scale_type != DType::F32)
                .then(|| Param::initialized(ParamId::new(), scale.clone().cast(scale_type))),
            offset_term: offset.map(|o| Param::initialized(ParamId::new(), o * scale.clone())),
            scale: Param::initialized(ParamId::new(), scale),
            smooth: None,
            bias,
            static_input,
            mode,
            dtype,
        }
    }
}

/// A dense projection: a float `Linear`, or its quantized form.
// One per projection, built once: the size difference of the variants does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Module, Debug)]
pub enum Projection<B: Backend> {
    /// The float layer.
    Float(Linear<B>),
    /// Quantized for inference.
    Quantized(QuantLinear<B>),
}

impl<B: Backend> From<Linear<B>> for Projection<B> {
    fn from(linear: Linear<B>) -> Self {
        Projection::Float(linear)
    }
}

impl<B: FusedOps> Projection<B> {
    /// `x [.., K]` through the projection.
    pub fn forward<const D: usize>(&self, x: Tensor<B, D>) -> Tensor<B, D> {
        match self {
            Projection::Float(l) => l.forward(x),
            Projection::Quantized(q) => q.forward(x),
        }
    }

    /// The projection quantized (a quantized one stays as it is).
    pub fn quantize(self, mode: Quantize) -> Self {
        self.quantize_smoothed(mode, None)
    }

    /// The projection quantized, reading the output of a norm of scale `norm_scale [K]`:
    /// smoothed in W8A8 (see the module doc).
    pub fn quantize_after_norm(self, mode: Quantize, norm_scale: Tensor<B, 1>) -> Self {
        self.quantize_smoothed(mode, Some(norm_scale))
    }

    fn quantize_smoothed(self, mode: Quantize, input_range: Option<Tensor<B, 1>>) -> Self {
        match self {
            Projection::Float(l) => Projection::Quantized(QuantLinear::new(l, mode, input_range)),
            q => q,
        }
    }

    /// The float layer, unless it is quantized.
    pub fn float(&self) -> Option<&Linear<B>> {
        match self {
            Projection::Float(l) => Some(l),
            Projection::Quantized(_) => None,
        }
    }

    /// Writes `{prefix}.weight` (and bias): a quantized projection writes the dequantized
    /// weight it computes with, in its float type.
    pub fn save(&self, prefix: &str, out: &mut Sink) {
        out.linear(prefix, &self.float_linear());
    }

    /// Writes the output features `features` of the projection as the layer `{prefix}` (a
    /// part of joined [`Projections`]).
    pub fn save_features(&self, prefix: &str, features: Range<usize>, out: &mut Sink) {
        let linear = self.float_linear();
        let (start, len) = (features.start, features.len());
        let linear = Linear {
            weight: Param::from_tensor(linear.weight.val().narrow(1, start, len)),
            bias: linear
                .bias
                .map(|b| Param::from_tensor(b.val().narrow(0, start, len))),
        };
        out.linear(prefix, &linear);
    }

    /// The output features.
    pub fn features(&self) -> usize {
        match self {
            Projection::Float(l) => l.weight.dims()[1],
            Projection::Quantized(q) => q.weight.dims()[1],
        }
    }

    /// The float layer, or the dequantized one a quantized projection computes with.
    fn float_linear(&self) -> Linear<B> {
        match self {
            Projection::Float(l) => l.clone(),
            Projection::Quantized(q) => Linear {
                weight: Param::from_tensor(q.dequantized()),
                bias: q.bias.clone(),
            },
        }
    }
}

impl<B: Backend> Projection<B> {
    /// Whether [`Projection::side_by_side`] can join the two: both float with a bias or both
    /// without; or both quantized alike, neither with a smoothed input nor a pre-quantized
    /// checkpoint's static activation scales (those are each layer's own).
    fn joins_with(&self, other: &Self) -> bool {
        match (self, other) {
            (Projection::Float(a), Projection::Float(b)) => a.bias.is_some() == b.bias.is_some(),
            (Projection::Quantized(a), Projection::Quantized(b)) => {
                a.mode == b.mode
                    && a.dtype == b.dtype
                    && [a, b]
                        .iter()
                        .all(|q| q.static_input.is_none() && q.smooth.is_none())
                    && a.operator_scale.is_some() == b.operator_scale.is_some()
                    && a.bias.is_some() == b.bias.is_some()
                    && a.offset_term.is_some() == b.offset_term.is_some()
            }
            _ => false,
        }
    }

    /// Two projections of one input ([`Projection::joins_with`]) side by side, `a`'s output
    /// features then `b`'s, so that one matmul computes both (vLLM's merged column layers):
    /// float layers have their checkpoint rows stacked on the device (a transposed view, as
    /// loaded), quantized ones their int8 columns and per-channel scales joined (each channel
    /// keeps its scale).
    fn side_by_side(a: Self, b: Self) -> Self {
        fn param<T: burn::module::Parameter>(t: T) -> Param<T> {
            Param::initialized(ParamId::new(), t)
        }
        fn join<B: Backend>(
            a: Option<Param<Tensor<B, 1>>>,
            b: Option<Param<Tensor<B, 1>>>,
        ) -> Option<Param<Tensor<B, 1>>> {
            Some(param(Tensor::cat(vec![a?.val(), b?.val()], 0)))
        }
        match (a, b) {
            (Projection::Float(a), Projection::Float(b)) => {
                let rows = |w: Param<Tensor<B, 2>>| w.val().transpose();
                let weight = Tensor::cat(vec![rows(a.weight), rows(b.weight)], 0).transpose();
                Projection::Float(Linear {
                    weight: param(weight),
                    bias: join(a.bias, b.bias),
                })
            }
            (Projection::Quantized(a), Projection::Quantized(b)) => {
                Projection::Quantized(QuantLinear {
                    weight: param(Tensor::cat(vec![a.weight.val(), b.weight.val()], 1)),
                    scale: param(Tensor::cat(vec![a.scale.val(), b.scale.val()], 0)),
                    operator_scale: join(a.operator_scale, b.operator_scale),
                    smooth: None,
                    bias: join(a.bias, b.bias),
                    offset_term: join(a.offset_term, b.offset_term),
                    static_input: None,
                    mode: a.mode,
                    dtype: a.dtype,
                })
            }
            _ => unreachable!("joins_with holds"),
        }
    }
}

/// Projections of one input (an attention's q, k and v; an MLP's gate and up): side by side
/// in one projection, one matmul whose output's columns are theirs in order, where they join
/// (float layers with biases alike; quantized ones alike, their inputs quantized per token
/// without smoothing); else apart, one matmul each.
#[derive(Module, Debug)]
pub struct Projections<B: Backend> {
    /// The joined projection, or each one.
    parts: Vec<Projection<B>>,
    /// Each projection's output features.
    #[module(skip)]
    widths: Vec<usize>,
}

impl<B: FusedOps> Projections<B> {
    /// The projections `parts`, joined where they can be.
    pub fn new(parts: Vec<Projection<B>>) -> Self {
        let widths = parts.iter().map(Projection::features).collect();
        let parts = if parts.iter().all(|p| parts[0].joins_with(p)) {
            let mut parts = parts.into_iter();
            let first = parts.next().expect("one projection at least");
            vec![parts.fold(first, Projection::side_by_side)]
        } else {
            parts
        };
        Self { parts, widths }
    }

    /// The joined projection, if they are joined.
    pub fn joined(&self) -> Option<&Projection<B>> {
        (self.parts.len() == 1).then(|| &self.parts[0])
    }

    /// `x [.., K]` through each projection: `[.., N_i]` each (views of one product's columns
    /// where joined).
    pub fn forward<const D: usize>(&self, x: Tensor<B, D>) -> Vec<Tensor<B, D>> {
        match self.joined() {
            Some(p) => {
                let y = p.forward(x);
                let mut start = 0;
                self.widths
                    .iter()
                    .map(|&w| {
                        start += w;
                        y.clone().narrow(D - 1, start - w, w)
                    })
                    .collect()
            }
            None => self.parts.iter().map(|p| p.forward(x.clone())).collect(),
        }
    }

    /// The projections quantized (see [`Projection::quantize`]), joined ones with one scale
    /// per output channel as apart.
    pub fn quantize(self, mode: Quantize) -> Self {
        self.map(|p| p.quantize(mode))
    }

    /// The projections quantized, reading the output of a norm of scale `norm_scale [K]`
    /// (see [`Projection::quantize_after_norm`]): joined ones share one smoothing of their
    /// input, which one activation quantization then serves.
    pub fn quantize_after_norm(self, mode: Quantize, norm_scale: Tensor<B, 1>) -> Self {
        self.map(|p| p.quantize_after_norm(mode, norm_scale.clone()))
    }

    fn map(self, f: impl Fn(Projection<B>) -> Projection<B>) -> Self {
        Self {
            parts: self.parts.into_iter().map(f).collect(),
            widths: self.widths,
        }
    }

    /// Writes projection `i` as the layer `prefixes[i]` (see [`Projection::save`]).
    pub fn save(&self, prefixes: &[String], out: &mut Sink) {
        match self.joined() {
            Some(p) => {
                let mut start = 0;
                for (prefix, &w) in prefixes.iter().zip(&self.widths) {
                    p.save_features(prefix, start..start + w, out);
                    start += w;
                }
            }
            None => {
                for (prefix, p) in prefixes.iter().zip(&self.parts) {
                    p.save(prefix, out);
                }
            }
        }
    }
}
