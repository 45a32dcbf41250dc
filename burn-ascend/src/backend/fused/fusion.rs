//! The fused ops on `Fusion<Ascend>`: each call is recorded as one custom op of the fusion
//! stream and runs Ascend's kernel when the stream executes, instead of its composition op by
//! op. Each call checks the op's contract (shapes, dtypes, options) when it is recorded, with
//! the code `Ascend` checks it with at the call, so a bad call fails at its call site with the
//! op's message and a typed error, never later on the stream's runner thread; the outputs'
//! shapes and dtypes are then recorded from the inputs'. What only the data can show (bad
//! indices) is checked by the kernels at execution, like every lazily executed op.

use std::fmt::Debug;

use burn_fusion::stream::{Operation, OperationStreams};
use burn_fusion::{Fusion, FusionTensor};
use burn_ir::{CustomOpIr, HandleContainer, OperationIr, TensorIr, TensorStatus};

use super::*;
use crate::backend::fusion::{AscendFusionHandle, AscendFusionRuntime};
use crate::ops::fused as fused_ops;
use crate::ops::quant_matmul;

type Handles = HandleContainer<AscendFusionHandle>;
type Lazy = FusionTensor<AscendFusionRuntime>;

/// A fused op in the stream: its recorded tensors, its scalar arguments and how to run it.
#[derive(Debug)]
struct FusedCall<A> {
    desc: CustomOpIr,
    args: A,
    run: fn(&mut Handles, &CustomOpIr, &A),
}

impl<A: Debug + Send + Sync> Operation<AscendFusionRuntime> for FusedCall<A> {
    fn execute(&self, handles: &mut Handles) {
        (self.run)(handles, &self.desc, &self.args)
    }
}

/// Records fused op `name` over `inputs` (optional ones already left out), producing tensors of
/// the given shapes and dtypes.
fn record<A: Debug + Send + Sync + 'static>(
    name: &'static str,
    inputs: Vec<Lazy>,
    outputs: &[(Vec<usize>, DType)],
    args: A,
    run: fn(&mut Handles, &CustomOpIr, &A),
) -> Vec<Lazy> {
    let client = inputs[0].client.clone();
    let streams = OperationStreams::with_inputs(&inputs);
    let desc = CustomOpIr {
        id: name.to_owned(),
        inputs: inputs.into_iter().map(Lazy::into_ir).collect(),
        outputs: outputs
            .iter()
            .map(|(shape, dtype)| TensorIr {
                id: client.create_empty_handle(),
                shape: Shape::from(shape.clone()),
                status: TensorStatus::NotInit,
                dtype: *dtype,
            })
            .collect(),
    };
    client.register(
        streams,
        OperationIr::Custom(desc.clone()),
        FusedCall { desc, args, run },
    )
}

/// Input `i` of a recorded call. Float, int and bool tensors are all `AscendTensor`s, so one
/// accessor serves every kind.
fn arg(h: &mut Handles, d: &CustomOpIr, i: usize) -> AscendTensor {
    h.get_float_tensor::<Ascend>(&d.inputs[i])
}

/// Input `*next` if `present` (and then moves past it).
fn optional(
    h: &mut Handles,
    d: &CustomOpIr,
    present: bool,
    next: &mut usize,
) -> Option<AscendTensor> {
    present.then(|| {
        *next += 1;
        arg(h, d, *next - 1)
    })
}

/// A recorded tensor as the fused ops' contracts see it (a local type: the core's `Operand`
/// cannot be implemented on burn-fusion's tensor here, the orphan rule).
struct Meta<'a>(&'a Lazy);

impl fused_ops::Operand for Meta<'_> {
    fn dims(&self) -> &[usize] {
        self.0.shape.as_slice()
    }

    fn data_type(&self) -> DataType {
        data_type(self.0.dtype)
    }
}

/// Registers output `i` of a recorded call.
fn put(h: &mut Handles, d: &CustomOpIr, i: usize, t: AscendTensor) {
    h.register_float_tensor::<Ascend>(&d.outputs[i].id, t);
}

/// Dim `i` of a recorded tensor (the contract, checked first, guarantees it exists).
fn dim(t: &Lazy, i: usize) -> usize {
    t.shape.as_slice().get(i).copied().unwrap_or(0)
}

fn dims(t: &Lazy) -> Vec<usize> {
    t.shape.as_slice().to_vec()
}

/// The rows of a norm's input of dims `shape`: the product of all dims but the last.
fn leading_rows(shape: &[usize]) -> usize {
    shape[..shape.len().saturating_sub(1)].iter().product()
}

fn one(mut v: Vec<Lazy>) -> Lazy {
    v.pop().expect("one output")
}

fn with_optional(
    mut inputs: Vec<Lazy>,
    optional: impl IntoIterator<Item = Option<Lazy>>,
) -> Vec<Lazy> {
    inputs.extend(optional.into_iter().flatten());
    inputs
}

impl FusedOps for Fusion<Ascend> {
    fn vector_add(x: FloatTensor<Self>, y: FloatTensor<Self>) -> FloatTensor<Self> {
        run(
            "vector_add",
            fused_ops::check_vector_add(&Meta(&x), &Meta(&y)),
        );
        let meta = [(dims(&x), x.dtype)];
        one(record("vector_add", vec![x, y], &meta, (), |h, d, _| {
            let r = Ascend::vector_add(arg(h, d, 0), arg(h, d, 1));
            put(h, d, 0, r)
        }))
    }

    fn int_vector_add(x: IntTensor<Self>, y: IntTensor<Self>) -> IntTensor<Self> {
        run(
            "vector_add",
            fused_ops::check_vector_add(&Meta(&x), &Meta(&y)),
        );
        let meta = [(dims(&x), x.dtype)];
        one(record(
            "int_vector_add",
            vec![x, y],
            &meta,
            (),
            |h, d, _| {
                let r = Ascend::int_vector_add(arg(h, d, 0), arg(h, d, 1));
                put(h, d, 0, r)
            },
        ))
    }

    fn layer_norm(
        x: FloatTensor<Self>,
        gamma: Option<FloatTensor<Self>>,
        beta: Option<FloatTensor<Self>>,
        eps: f64,
    ) -> LayerNormOutput<Self> {
        run(
            "layer_norm",
            fused_ops::check_layer_norm(
                &Meta(&x),
                gamma.as_ref().map(Meta).as_ref(),
                beta.as_ref().map(Meta).as_ref(),
            ),
        );
        let shape = dims(&x);
        let rows = leading_rows(&shape);
        let meta = [
            (shape, x.dtype),
            (vec![rows], DType::F32),
            (vec![rows], DType::F32),
        ];
        let args = (eps, gamma.is_some(), beta.is_some());
        let inputs = with_optional(vec![x], [gamma, beta]);
        let mut out = record("layer_norm", inputs, &meta, args, |h, d, &(eps, g, b)| {
            let mut next = 1;
            let x = arg(h, d, 0);
            let gamma = optional(h, d, g, &mut next);
            let beta = optional(h, d, b, &mut next);
            let r = <Ascend as FusedOps>::layer_norm(x, gamma, beta, eps);
            put(h, d, 0, r.y);
            put(h, d, 1, r.mean);
            put(h, d, 2, r.rstd);
        })
        .into_iter();
        let mut next = || out.next().expect("three outputs");
        LayerNormOutput {
            y: next(),
            mean: next(),
            rstd: next(),
        }
    }

    fn layer_norm_backward(
        dy: FloatTensor<Self>,
        x: FloatTensor<Self>,
        mean: FloatTensor<Self>,
        rstd: FloatTensor<Self>,
        gamma: Option<FloatTensor<Self>>,
    ) -> LayerNormGrads<Self> {
        run(
            "layer_norm_backward",
            fused_ops::check_layer_norm_backward(
                &Meta(&dy),
                &Meta(&x),
                &Meta(&mean),
                &Meta(&rstd),
                gamma.as_ref().map(Meta).as_ref(),
            ),
        );
        let cols = dim(&x, x.shape.num_dims().saturating_sub(1));
        let meta = [
            (dims(&x), x.dtype),
            (vec![cols], DType::F32),
            (vec![cols], DType::F32),
        ];
        let has_gamma = gamma.is_some();
        let inputs = with_optional(vec![dy, x, mean, rstd], [gamma]);
        let mut out = record(
            "layer_norm_backward",
            inputs,
            &meta,
            has_gamma,
            |h, d, &g| {
                let mut next = 4;
                let (dy, x, mean, rstd) = (arg(h, d, 0), arg(h, d, 1), arg(h, d, 2), arg(h, d, 3));
                let gamma = optional(h, d, g, &mut next);
                let r = Ascend::layer_norm_backward(dy, x, mean, rstd, gamma);
                put(h, d, 0, r.dx);
                put(h, d, 1, r.dgamma);
                put(h, d, 2, r.dbeta);
            },
        )
        .into_iter();
        let mut next = || out.next().expect("three outputs");
        LayerNormGrads {
            dx: next(),
            dgamma: next(),
            dbeta: next(),
        }
    }

    fn rms_norm(x: FloatTensor<Self>, gamma: FloatTensor<Self>, eps: f64) -> RmsNormOutput<Self> {
        run(
            "rms_norm",
            fused_ops::check_rms_norm(&Meta(&x), &Meta(&gamma), eps),
        );
        let shape = dims(&x);
        let rows = leading_rows(&shape);
        let meta = [(shape, x.dtype), (vec![rows], DType::F32)];
        let mut out = record("rms_norm", vec![x, gamma], &meta, eps, |h, d, &eps| {
            let r = <Ascend as FusedOps>::rms_norm(arg(h, d, 0), arg(h, d, 1), eps);
            put(h, d, 0, r.y);
            put(h, d, 1, r.rstd);
        })
        .into_iter();
        let mut next = || out.next().expect("two outputs");
        RmsNormOutput {
            y: next(),
            rstd: next(),
        }
    }

    fn add_rms_norm(
        x1: FloatTensor<Self>,
        x2: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        eps: f64,
    ) -> AddRmsNormOutput<Self> {
        run(
            "add_rms_norm",
            fused_ops::check_add_rms_norm(&Meta(&x1), &Meta(&x2), &Meta(&gamma), eps),
        );
        let shape = dims(&x1);
        let rows = leading_rows(&shape);
        let meta = [
            (shape.clone(), x1.dtype),
            (vec![rows], DType::F32),
            (shape, x1.dtype),
        ];
        let inputs = vec![x1, x2, gamma];
        let mut out = record("add_rms_norm", inputs, &meta, eps, |h, d, &eps| {
            let r = Ascend::add_rms_norm(arg(h, d, 0), arg(h, d, 1), arg(h, d, 2), eps);
            put(h, d, 0, r.y);
            put(h, d, 1, r.rstd);
            put(h, d, 2, r.x);
        })
        .into_iter();
        let mut next = || out.next().expect("three outputs");
        AddRmsNormOutput {
            y: next(),
            rstd: next(),
            x: next(),
        }
    }

    fn rms_norm_backward(
        dy: FloatTensor<Self>,
        x: FloatTensor<Self>,
        rstd: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
    ) -> RmsNormGrads<Self> {
        run(
            "rms_norm_backward",
            fused_ops::check_rms_norm_backward(&Meta(&dy), &Meta(&x), &Meta(&rstd), &Meta(&gamma)),
        );
        let cols = dim(&x, x.shape.num_dims().saturating_sub(1));
        let meta = [(dims(&x), x.dtype), (vec![cols], DType::F32)];
        let inputs = vec![dy, x, rstd, gamma];
        let mut out = record("rms_norm_backward", inputs, &meta, (), |h, d, _| {
            let r =
                Ascend::rms_norm_backward(arg(h, d, 0), arg(h, d, 1), arg(h, d, 2), arg(h, d, 3));
            put(h, d, 0, r.dx);
            put(h, d, 1, r.dgamma);
        })
        .into_iter();
        let mut next = || out.next().expect("two outputs");
        RmsNormGrads {
            dx: next(),
            dgamma: next(),
        }
    }

    fn moe_gather(
        x: FloatTensor<Self>,
        indices: IntTensor<Self>,
        top_k: usize,
    ) -> FloatTensor<Self> {
        run(
            "moe_gather",
            fused_ops::check_moe_gather(&Meta(&x), &Meta(&indices), top_k),
        );
        let meta = [(vec![dim(&indices, 0), dim(&x, 1)], x.dtype)];
        one(record(
            "moe_gather",
            vec![x, indices],
            &meta,
            top_k,
            |h, d, &k| {
                let r = Ascend::moe_gather(arg(h, d, 0), arg(h, d, 1), k);
                put(h, d, 0, r)
            },
        ))
    }

    fn moe_scatter(
        y: FloatTensor<Self>,
        indices: IntTensor<Self>,
        weights: Option<FloatTensor<Self>>,
        top_k: usize,
    ) -> FloatTensor<Self> {
        run(
            "moe_scatter",
            fused_ops::check_moe_scatter(
                &Meta(&y),
                &Meta(&indices),
                weights.as_ref().map(Meta).as_ref(),
                top_k,
            ),
        );
        let tokens = dim(&y, 0) / top_k;
        let meta = [(vec![tokens, dim(&y, 1)], y.dtype)];
        let args = (top_k, weights.is_some());
        let inputs = with_optional(vec![y, indices], [weights]);
        one(record(
            "moe_scatter",
            inputs,
            &meta,
            args,
            |h, d, &(k, w)| {
                let mut next = 2;
                let (y, indices) = (arg(h, d, 0), arg(h, d, 1));
                let weights = optional(h, d, w, &mut next);
                let r = Ascend::moe_scatter(y, indices, weights, k);
                put(h, d, 0, r)
            },
        ))
    }

    fn token_rearrange(x: FloatTensor<Self>, perm: IntTensor<Self>) -> FloatTensor<Self> {
        run(
            "token_rearrange",
            fused_ops::check_token_rearrange(&Meta(&x), &Meta(&perm)),
        );
        let meta = [(vec![dim(&perm, 0), dim(&x, 1)], x.dtype)];
        one(record(
            "token_rearrange",
            vec![x, perm],
            &meta,
            (),
            |h, d, _| {
                let r = Ascend::token_rearrange(arg(h, d, 0), arg(h, d, 1));
                put(h, d, 0, r)
            },
        ))
    }

    fn alloc_extend(
        prefix_lens: IntTensor<Self>,
        seq_lens: IntTensor<Self>,
        last_loc: IntTensor<Self>,
        free_pages: IntTensor<Self>,
        page_size: usize,
        extend_total: usize,
    ) -> AllocExtendOutput<Self> {
        run(
            "alloc_extend",
            fused_ops::check_alloc_extend(
                &Meta(&prefix_lens),
                &Meta(&seq_lens),
                &Meta(&last_loc),
                &Meta(&free_pages),
                page_size,
                extend_total,
            ),
        );
        let dtype = prefix_lens.dtype;
        let meta = [(vec![extend_total], dtype), (vec![2], dtype)];
        let inputs = vec![prefix_lens, seq_lens, last_loc, free_pages];
        let args = (page_size, extend_total);
        let mut out = record(
            "alloc_extend",
            inputs,
            &meta,
            args,
            |h, d, &(page, total)| {
                let r = Ascend::alloc_extend(
                    arg(h, d, 0),
                    arg(h, d, 1),
                    arg(h, d, 2),
                    arg(h, d, 3),
                    page,
                    total,
                );
                put(h, d, 0, r.slots);
                put(h, d, 1, r.totals);
            },
        )
        .into_iter();
        let mut next = || out.next().expect("two outputs");
        AllocExtendOutput {
            slots: next(),
            totals: next(),
        }
    }

    fn decode_attention(
        q: FloatTensor<Self>,
        k_cache: FloatTensor<Self>,
        v_cache: Option<FloatTensor<Self>>,
        kv_indptr: IntTensor<Self>,
        kv_indices: IntTensor<Self>,
        num_kv_splits: IntTensor<Self>,
        options: DecodeAttentionOptions,
    ) -> DecodeAttentionOutput<Self> {
        run(
            "decode_attention",
            fused_ops::check_decode_attention(
                &Meta(&q),
                &Meta(&k_cache),
                v_cache.as_ref().map(Meta).as_ref(),
                &Meta(&kv_indptr),
                &Meta(&kv_indices),
                &Meta(&num_kv_splits),
                &options,
            ),
        );
        let (b, heads, dv, splits) = (
            dim(&q, 0),
            dim(&q, 1),
            options.value_dim,
            options.max_kv_splits,
        );
        let meta = [
            (vec![b, heads, dv], q.dtype),
            (vec![b, heads], DType::F32),
            (vec![b, heads, splits, dv], DType::F32),
            (vec![b, heads, splits], DType::F32),
        ];
        let args = (options, v_cache.is_some());
        let inputs = with_optional(
            vec![q, k_cache, kv_indptr, kv_indices, num_kv_splits],
            [v_cache],
        );
        let mut out = record("decode_attention", inputs, &meta, args, |h, d, &(o, v)| {
            let mut next = 5;
            let (q, k) = (arg(h, d, 0), arg(h, d, 1));
            let (indptr, indices, splits) = (arg(h, d, 2), arg(h, d, 3), arg(h, d, 4));
            let v = optional(h, d, v, &mut next);
            let r = Ascend::decode_attention(q, k, v, indptr, indices, splits, o);
            put(h, d, 0, r.out);
            put(h, d, 1, r.lse);
            put(h, d, 2, r.part_out);
            put(h, d, 3, r.part_lse);
        })
        .into_iter();
        let mut next = || out.next().expect("four outputs");
        DecodeAttentionOutput {
            out: next(),
            lse: next(),
            part_out: next(),
            part_lse: next(),
        }
    }

    fn paged_prefill_attention(
        q: FloatTensor<Self>,
        k_cache: FloatTensor<Self>,
        v_cache: FloatTensor<Self>,
        block_table: IntTensor<Self>,
        lens: PrefillLens<'_>,
        sm_scale: f32,
    ) -> FloatTensor<Self> {
        run(
            "paged_prefill_attention",
            fused_ops::check_paged_prefill_attention(
                &Meta(&q),
                &Meta(&k_cache),
                &Meta(&v_cache),
                &Meta(&block_table),
                None,
                lens.q_lens,
                lens.kv_lens,
                lens.page_size,
            ),
        );
        let meta = [(dims(&q), q.dtype)];
        // The host lengths are owned by the recorded call: it runs after this one returns.
        let args = (
            lens.q_lens.to_vec(),
            lens.kv_lens.to_vec(),
            lens.page_size,
            sm_scale,
        );
        let inputs = vec![q, k_cache, v_cache, block_table];
        one(record(
            "paged_prefill_attention",
            inputs,
            &meta,
            args,
            |h, d, (q_lens, kv_lens, page_size, scale)| {
                let lens = PrefillLens {
                    q_lens,
                    kv_lens,
                    page_size: *page_size,
                };
                let (q, k, v, table) = (arg(h, d, 0), arg(h, d, 1), arg(h, d, 2), arg(h, d, 3));
                let r = Ascend::paged_prefill_attention(q, k, v, table, lens, *scale);
                put(h, d, 0, r)
            },
        ))
    }

    fn extend_attention(
        q: FloatTensor<Self>,
        k_cache: FloatTensor<Self>,
        v_cache: Option<FloatTensor<Self>>,
        block_table: IntTensor<Self>,
        lens: ExtendLens<'_>,
        sm_scale: f32,
        path: Option<ExtendPath>,
    ) -> FloatTensor<Self> {
        run(
            "extend_attention",
            fused_ops::check_extend_attention(
                &Meta(&q),
                &Meta(&k_cache),
                v_cache.as_ref().map(Meta).as_ref(),
                &Meta(&block_table),
                &lens,
            ),
        );
        let meta = [(vec![dim(&q, 0), dim(&q, 1), lens.value_dim], q.dtype)];
        // The lengths are the scheduler's host values: the call owns a copy.
        let args = ExtendArgs {
            q_lens: lens.q_lens.to_vec(),
            kv_lens: lens.kv_lens.to_vec(),
            page_size: lens.page_size,
            value_dim: lens.value_dim,
            sm_scale,
            path,
            values: v_cache.is_some(),
        };
        let inputs = with_optional(vec![q, k_cache, block_table], [v_cache]);
        one(record(
            "extend_attention",
            inputs,
            &meta,
            args,
            |h, d, a| {
                let mut next = 3;
                let (q, k, table) = (arg(h, d, 0), arg(h, d, 1), arg(h, d, 2));
                let v = optional(h, d, a.values, &mut next);
                let lens = ExtendLens {
                    q_lens: &a.q_lens,
                    kv_lens: &a.kv_lens,
                    page_size: a.page_size,
                    value_dim: a.value_dim,
                };
                let r = Ascend::extend_attention(q, k, v, table, lens, a.sm_scale, a.path);
                put(h, d, 0, r)
            },
        ))
    }

    fn grouped_matmul(
        x: FloatTensor<Self>,
        weights: FloatTensor<Self>,
        group_sizes: IntTensor<Self>,
    ) -> FloatTensor<Self> {
        run(
            "grouped_matmul",
            fused_ops::check_grouped_matmul(&Meta(&x), &Meta(&weights), &Meta(&group_sizes)),
        );
        let meta = [(vec![dim(&x, 0), dim(&weights, 2)], x.dtype)];
        let inputs = vec![x, weights, group_sizes];
        one(record("grouped_matmul", inputs, &meta, (), |h, d, _| {
            let r = Ascend::grouped_matmul(arg(h, d, 0), arg(h, d, 1), arg(h, d, 2));
            put(h, d, 0, r)
        }))
    }

    fn grouped_matmul_weight_grad(
        x: FloatTensor<Self>,
        dy: FloatTensor<Self>,
        group_sizes: IntTensor<Self>,
    ) -> FloatTensor<Self> {
        run(
            "grouped_matmul_weight_grad",
            fused_ops::check_grouped_matmul_weight_grad(&Meta(&x), &Meta(&dy), &Meta(&group_sizes)),
        );
        let meta = [(vec![dim(&group_sizes, 0), dim(&x, 1), dim(&dy, 1)], x.dtype)];
        let inputs = vec![x, dy, group_sizes];
        one(record(
            "grouped_matmul_weight_grad",
            inputs,
            &meta,
            (),
            |h, d, _| {
                let r =
                    Ascend::grouped_matmul_weight_grad(arg(h, d, 0), arg(h, d, 1), arg(h, d, 2));
                put(h, d, 0, r)
            },
        ))
    }

    fn dynamic_quant(
        x: FloatTensor<Self>,
        smooth: Option<FloatTensor<Self>>,
    ) -> (IntTensor<Self>, FloatTensor<Self>) {
        run(
            "dynamic_quant",
            quant_matmul::check_dynamic_quant(&Meta(&x), smooth.as_ref().map(Meta).as_ref()),
        );
        let m = dim(&x, 0);
        let meta = [(dims(&x), DType::I8), (vec![m], DType::F32)];
        let has_smooth = smooth.is_some();
        let inputs = with_optional(vec![x], [smooth]);
        let mut out = record("dynamic_quant", inputs, &meta, has_smooth, |h, d, &has| {
            let mut next = 1;
            let smooth = optional(h, d, has, &mut next);
            let (q, s) = Ascend::dynamic_quant(arg(h, d, 0), smooth);
            put(h, d, 0, q);
            put(h, d, 1, s);
        })
        .into_iter();
        let mut next = || out.next().expect("two outputs");
        (next(), next())
    }

    fn weight_quant_matmul(
        x: FloatTensor<Self>,
        weight: IntTensor<Self>,
        scale: FloatTensor<Self>,
        group: usize,
    ) -> FloatTensor<Self> {
        run(
            "weight_quant_matmul",
            quant_matmul::check_weight_quant_matmul(
                &Meta(&x),
                &Meta(&weight),
                &Meta(&scale),
                group,
            ),
        );
        let meta = [(vec![dim(&x, 0), dim(&weight, 1)], x.dtype)];
        let inputs = vec![x, weight, scale];
        one(record(
            "weight_quant_matmul",
            inputs,
            &meta,
            group,
            |h, d, &g| {
                let r = Ascend::weight_quant_matmul(arg(h, d, 0), arg(h, d, 1), arg(h, d, 2), g);
                put(h, d, 0, r)
            },
        ))
    }

    fn moe_gather_quant(
        x: FloatTensor<Self>,
        expert_ids: IntTensor<Self>,
        top_k: usize,
        num_experts: usize,
    ) -> MoeQuantRows<Self> {
        run(
            "moe_gather_quant",
            fused_ops::check_moe_init_routing_quant(
                &Meta(&x),
                &Meta(&expert_ids),
                top_k,
                num_experts,
            ),
        );
        let (slots, h) = (dim(&expert_ids, 0), dim(&x, 1));
        let meta = [
            (vec![slots, h], DType::I8),
            (vec![slots], DType::F32),
            (vec![slots], DType::I32),
            (vec![num_experts], DType::I32),
        ];
        let args = (top_k, num_experts);
        let inputs = vec![x, expert_ids];
        let mut out = record("moe_gather_quant", inputs, &meta, args, |h, d, &(k, e)| {
            let r = <Ascend as FusedOps>::moe_gather_quant(arg(h, d, 0), arg(h, d, 1), k, e);
            put(h, d, 0, r.rows);
            put(h, d, 1, r.scales);
            put(h, d, 2, r.row_idx);
            put(h, d, 3, r.group_sizes);
        })
        .into_iter();
        let mut next = || out.next().expect("four outputs");
        MoeQuantRows {
            rows: next(),
            scales: next(),
            row_idx: next(),
            group_sizes: next(),
        }
    }

    fn grouped_matmul_quant(
        x: IntTensor<Self>,
        weights: IntTensor<Self>,
        w_scale: FloatTensor<Self>,
        x_scale: Option<FloatTensor<Self>>,
        group_sizes: IntTensor<Self>,
        out: DType,
    ) -> FloatTensor<Self> {
        run(
            "grouped_matmul_quant",
            fused_ops::check_grouped_matmul_quant(
                &Meta(&x),
                &Meta(&weights),
                &Meta(&w_scale),
                x_scale.as_ref().map(Meta).as_ref(),
                &Meta(&group_sizes),
                data_type(out),
            ),
        );
        let meta = [(vec![dim(&x, 0), dim(&weights, 2)], out)];
        let args = (x_scale.is_some(), out);
        let inputs = with_optional(vec![x, weights, w_scale, group_sizes], [x_scale]);
        one(record(
            "grouped_matmul_quant",
            inputs,
            &meta,
            args,
            |h, d, &(has_scale, out)| {
                let mut next = 4;
                let x_scale = optional(h, d, has_scale, &mut next);
                let r = Ascend::grouped_matmul_quant(
                    arg(h, d, 0),
                    arg(h, d, 1),
                    arg(h, d, 2),
                    x_scale,
                    arg(h, d, 3),
                    out,
                );
                put(h, d, 0, r)
            },
        ))
    }

    fn quant_matmul(
        x: IntTensor<Self>,
        weight: IntTensor<Self>,
        weight_scale: FloatTensor<Self>,
        x_scale: FloatTensor<Self>,
        out_dtype: FloatDType,
    ) -> FloatTensor<Self> {
        run(
            "quant_matmul",
            quant_matmul::check_quant_matmul(
                &Meta(&x),
                &Meta(&weight),
                &Meta(&weight_scale),
                &Meta(&x_scale),
            ),
        );
        let meta = [(vec![dim(&x, 0), dim(&weight, 1)], DType::from(out_dtype))];
        let inputs = vec![x, weight, weight_scale, x_scale];
        one(record(
            "quant_matmul",
            inputs,
            &meta,
            out_dtype,
            |h, d, &o| {
                let r =
                    Ascend::quant_matmul(arg(h, d, 0), arg(h, d, 1), arg(h, d, 2), arg(h, d, 3), o);
                put(h, d, 0, r)
            },
        ))
    }

    fn grouped_matmul_antiquant(
        x: FloatTensor<Self>,
        weights: IntTensor<Self>,
        w_scale: FloatTensor<Self>,
        w_offset: Option<FloatTensor<Self>>,
        group_sizes: IntTensor<Self>,
    ) -> FloatTensor<Self> {
        run(
            "grouped_matmul_antiquant",
            fused_ops::check_grouped_matmul_antiquant(
                &Meta(&x),
                &Meta(&weights),
                &Meta(&w_scale),
                w_offset.as_ref().map(Meta).as_ref(),
                &Meta(&group_sizes),
            ),
        );
        let meta = [(vec![dim(&x, 0), dim(&weights, 2)], x.dtype)];
        let has_offset = w_offset.is_some();
        let inputs = with_optional(vec![x, weights, w_scale, group_sizes], [w_offset]);
        one(record(
            "grouped_matmul_antiquant",
            inputs,
            &meta,
            has_offset,
            |h, d, &has_offset| {
                let mut next = 4;
                let w_offset = optional(h, d, has_offset, &mut next);
                let r = Ascend::grouped_matmul_antiquant(
                    arg(h, d, 0),
                    arg(h, d, 1),
                    arg(h, d, 2),
                    w_offset,
                    arg(h, d, 3),
                );
                put(h, d, 0, r)
            },
        ))
    }
}

/// The scalar arguments of a recorded `extend_attention`.
#[derive(Debug)]
struct ExtendArgs {
    q_lens: Vec<usize>,
    kv_lens: Vec<usize>,
    page_size: usize,
    value_dim: usize,
    sm_scale: f32,
    path: Option<ExtendPath>,
    values: bool,
}
