//! `Fusion<Ascend>`'s optimizations. First the interpreted element-wise kernel
//! (`elementwise_program`): programs run on the emulated NPU against the same formulas on
//! burn-flex, over every operand layout the kernel addresses (dense, row and column broadcasts,
//! scalars, sliced rows, transposes), every element type, rows wider than a tile and tensors of
//! many short rows. Then whole blocks fused from the op stream (element-wise runs, composed
//! layer norm, composed linear), with the device's work counters showing what fusion saved. The
//! counters are process-wide, so every test here runs alone.

mod common;

use burn::tensor::backend::Backend;
use burn::tensor::{Bool, DType, Tensor, TensorData, TensorPrimitive};
use burn_ascend::emulator::{aclnn_launches_of, work_counters};
use burn_ascend::ops::fused::run_program;
use burn_ascend::ops::AscendTensor;
use burn_ascend::{Ascend, AscendDevice};
use burn_ascend_kernels::program::{Cmp, ElemType, Op, Program};
use burn_ascend_suite::host_values::host_values;
use burn_flex::Flex;
use burn_fusion::Fusion;
use serial_test::serial;

fn ascend() -> AscendDevice {
    common::device()
}

fn on_ascend<const D: usize>(data: &TensorData, dtype: DType) -> AscendTensor {
    Tensor::<Ascend, D>::from_data(data.clone().convert_dtype(dtype), (&ascend(), dtype))
        .into_primitive()
        .tensor()
        .into_inner()
}

fn on_flex<const D: usize>(data: &TensorData) -> Tensor<Flex, D> {
    Tensor::from_data(data.clone(), &Default::default())
}

fn read<const D: usize>(t: AscendTensor) -> TensorData {
    Tensor::<Ascend, D>::from_primitive(TensorPrimitive::Float(t.into()))
        .into_data()
        .convert::<f32>()
}

fn assert_close(what: &str, got: &TensorData, want: &TensorData, tol: f64) {
    common::assert_close(what, got, want, common::Tolerance::everywhere(tol));
}

/// `exp(x) * 0.5 + x / y - 3`, with a second output `x > y`.
fn chain() -> Program {
    let mut p = Program::new();
    let x = p.input(ElemType::F32);
    let y = p.input(ElemType::F32);
    let e = p.push(Op::Exp(x));
    let e = p.push(Op::MulS(e, 0.5));
    let q = p.push(Op::Div(x, y));
    let s = p.push(Op::Add(e, q));
    let s = p.push(Op::AddS(s, -3.0));
    let gt = p.push(Op::Cmp(x, Cmp::Gt, y));
    p.output(s, ElemType::F32);
    p.output(gt, ElemType::Bool);
    p
}

fn chain_reference<const D: usize>(
    x: Tensor<Flex, D>,
    y: Tensor<Flex, D>,
) -> (TensorData, TensorData) {
    let s = x.clone().exp() * 0.5 + x.clone() / y.clone() - 3.0;
    (s.into_data(), x.greater(y).into_data())
}

fn check_chain<const D: usize>(what: &str, x: &TensorData, y: &TensorData, out: [usize; D]) {
    let outs = run_program(
        &chain(),
        &[on_ascend::<D>(x, DType::F32), on_ascend::<D>(y, DType::F32)],
        &out,
    )
    .unwrap_or_else(|e| panic!("{what}: {e}"));
    let (want, want_gt) = chain_reference(on_flex::<D>(x).expand(out), on_flex::<D>(y).expand(out));
    let mut outs = outs.into_iter();
    assert_close(what, &read::<D>(outs.next().unwrap()), &want, 1e-5);
    let gt = Tensor::<Ascend, D, Bool>::from_primitive(outs.next().unwrap().into()).into_data();
    assert_eq!(gt, want_gt, "{what}: x > y");
}

/// Divisors kept away from zero.
fn divisor(shape: Vec<usize>, seed: u64) -> TensorData {
    let v: Vec<f32> = host_values(shape.clone(), seed)
        .iter::<f32>()
        .map(|v| if v.abs() < 0.25 { 0.25 + v.abs() } else { v })
        .collect();
    TensorData::new(v, shape)
}

#[test]
#[serial]
fn dense_operands_of_many_sizes() {
    for n in [1, 7, 64, 1000, 100_003] {
        check_chain(
            &format!("dense [{n}]"),
            &host_values(vec![n], 1),
            &divisor(vec![n], 2),
            [n],
        );
    }
    check_chain(
        "dense [3000, 3]",
        &host_values(vec![3000, 3], 3),
        &divisor(vec![3000, 3], 4),
        [3000, 3],
    );
}

#[test]
#[serial]
fn broadcast_rows_columns_and_scalars() {
    let x = host_values(vec![4, 5, 37], 5);
    check_chain("row broadcast", &x, &divisor(vec![1, 1, 37], 6), [4, 5, 37]);
    check_chain(
        "column broadcast",
        &x,
        &divisor(vec![4, 5, 1], 7),
        [4, 5, 37],
    );
    check_chain(
        "middle broadcast",
        &x,
        &divisor(vec![4, 1, 37], 8),
        [4, 5, 37],
    );
    check_chain("scalar", &x, &divisor(vec![1, 1, 1], 9), [4, 5, 37]);
    check_chain(
        "both broadcast",
        &host_values(vec![4, 1, 37], 10),
        &divisor(vec![1, 5, 1], 11),
        [4, 5, 37],
    );
    // Rows wider than a tile, against a broadcast row.
    check_chain(
        "wide rows",
        &host_values(vec![3, 70_001], 12),
        &divisor(vec![1, 70_001], 13),
        [3, 70_001],
    );
}

#[test]
#[serial]
fn sliced_and_transposed_views() {
    let wide = host_values(vec![6, 40], 14);
    let y = divisor(vec![6, 33], 15);
    // Rows of 33 taken at column 5 of rows of 40: each row contiguous, rows apart.
    let x = Tensor::<Ascend, 2>::from_data(wide.clone(), &ascend()).slice([0..6, 5..38]);
    let outs = run_program(
        &chain(),
        &[
            x.into_primitive().tensor().into_inner(),
            on_ascend::<2>(&y, DType::F32),
        ],
        &[6, 33],
    )
    .unwrap();
    let (want, _) = chain_reference(on_flex::<2>(&wide).slice([0..6, 5..38]), on_flex::<2>(&y));
    assert_close(
        "sliced rows",
        &read::<2>(outs.into_iter().next().unwrap()),
        &want,
        1e-5,
    );
    // A transpose is read with stride 6 along the row: it is made contiguous first.
    let t = host_values(vec![33, 6], 16);
    let xt = Tensor::<Ascend, 2>::from_data(t.clone(), &ascend()).transpose();
    let outs = run_program(
        &chain(),
        &[
            xt.into_primitive().tensor().into_inner(),
            on_ascend::<2>(&y, DType::F32),
        ],
        &[6, 33],
    )
    .unwrap();
    let (want, _) = chain_reference(on_flex::<2>(&t).transpose(), on_flex::<2>(&y));
    assert_close(
        "transposed",
        &read::<2>(outs.into_iter().next().unwrap()),
        &want,
        1e-5,
    );
}

#[test]
#[serial]
fn narrow_types_compute_in_f32_and_round_once() {
    for (dtype, elem, tol) in [
        (DType::F16, ElemType::F16, 1e-3),
        (DType::BF16, ElemType::BF16, 8e-3),
    ] {
        let mut p = Program::new();
        let x = p.input(elem);
        let y = p.input(elem);
        let s = p.push(Op::Mul(x, y));
        let s = p.push(Op::AddS(s, 1.0));
        let r = p.push(Op::Relu(s));
        p.output(r, elem);
        let (xd, yd) = (host_values(vec![5, 77], 17), host_values(vec![5, 77], 18));
        // The reference sees the same rounded inputs and rounds the f32 result once.
        let (xr, yr) = (
            xd.clone().convert_dtype(dtype).convert::<f32>(),
            yd.clone().convert_dtype(dtype).convert::<f32>(),
        );
        let want = (on_flex::<2>(&xr) * on_flex::<2>(&yr) + 1.0)
            .clamp_min(0.0)
            .into_data();
        let out = run_program(
            &p,
            &[on_ascend::<2>(&xd, dtype), on_ascend::<2>(&yd, dtype)],
            &[5, 77],
        )
        .unwrap();
        let got = Tensor::<Ascend, 2>::from_primitive(TensorPrimitive::Float(
            out.into_iter().next().unwrap().into(),
        ));
        assert_eq!(got.dtype(), dtype);
        assert_close(
            &format!("{dtype:?}"),
            &got.into_data().convert::<f32>(),
            &want,
            tol,
        );
    }
}

#[test]
#[serial]
fn bool_inputs_select() {
    let mut p = Program::new();
    let x = p.input(ElemType::F32);
    let m = p.input(ElemType::Bool);
    let neg = p.push(Op::MulS(x, -1.0));
    let out = p.push(Op::Select {
        cond: m,
        then: neg,
        otherwise: x,
    });
    p.output(out, ElemType::F32);
    let xd = host_values(vec![9, 70], 19);
    let md = TensorData::new((0..70).map(|i| i % 3 == 0).collect::<Vec<bool>>(), [1, 70]);
    let mask = Tensor::<Ascend, 2, Bool>::from_data(md.clone(), &ascend())
        .into_primitive()
        .into_inner();
    let outs = run_program(&p, &[on_ascend::<2>(&xd, DType::F32), mask], &[9, 70]).unwrap();
    let fx = on_flex::<2>(&xd);
    let fm = Tensor::<Flex, 2, Bool>::from_data(md, &Default::default()).expand([9, 70]);
    let want = fx.clone().mask_where(fm, fx.neg()).into_data();
    assert_close(
        "select",
        &read::<2>(outs.into_iter().next().unwrap()),
        &want,
        0.0,
    );
}

#[test]
#[serial]
fn empty_outputs_and_bad_inputs() {
    let outs = run_program(
        &chain(),
        &[
            on_ascend::<2>(&TensorData::new(Vec::<f32>::new(), [0, 3]), DType::F32),
            on_ascend::<2>(&TensorData::new(Vec::<f32>::new(), [0, 3]), DType::F32),
        ],
        &[0, 3],
    )
    .unwrap();
    assert_eq!(outs[0].shape(), &[0, 3]);
    let x = on_ascend::<2>(&host_values(vec![2, 3], 20), DType::F16);
    let err = run_program(&chain(), &[x.clone(), x], &[2, 3])
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("elementwise_program") && err.contains("[2, 3]"),
        "{err}"
    );
}

/// Runs `block` on `Fusion<Ascend>`, returns its result and the device work it queued.
fn fused<const D: usize>(
    x: &TensorData,
    block: impl Fn(Tensor<Fusion<Ascend>, D>) -> Tensor<Fusion<Ascend>, D>,
) -> (TensorData, u64, u64) {
    let d = ascend();
    let x = Tensor::<Fusion<Ascend>, D>::from_data(x.clone(), &d);
    <Fusion<Ascend> as Backend>::sync(&d).unwrap();
    let before = work_counters();
    let out = block(x).into_data();
    let work = work_counters().since(&before);
    (out, work.kernel_launches, work.aclnn_launches)
}

#[test]
#[serial]
fn fusion_runs_activation_blocks_as_one_launch() {
    if common::skipped_on_npu("fusion_runs_activation_blocks_as_one_launch") {
        return;
    }
    let x = host_values(vec![16, 96], 21);
    let gelu = |t: Tensor<Fusion<Ascend>, 2>| burn::tensor::activation::gelu(t * 1.5 + 0.25);
    let (got, kernels, aclnn) = fused(&x, gelu);
    let want = burn::tensor::activation::gelu(on_flex::<2>(&x) * 1.5 + 0.25).into_data();
    assert_close("gelu block", &got, &want, 2e-6);
    assert_eq!(
        (kernels, aclnn),
        (1, 0),
        "the gelu block is one program launch"
    );

    let silu = |t: Tensor<Fusion<Ascend>, 2>| burn::tensor::activation::silu(t.clone()) * t.tanh();
    let (got, kernels, aclnn) = fused(&x, silu);
    let fx = on_flex::<2>(&x);
    let want = (burn::tensor::activation::silu(fx.clone()) * fx.tanh()).into_data();
    assert_close("silu * tanh", &got, &want, 2e-6);
    assert_eq!(
        (kernels, aclnn),
        (1, 0),
        "silu * tanh is one program launch"
    );
}

/// Layer norm written out with tensor ops, the beta row made before the statistics.
fn composed_layer_norm<B: Backend>(
    x: Tensor<B, 2>,
    gamma: Tensor<B, 1>,
    beta: Tensor<B, 1>,
) -> Tensor<B, 2> {
    let beta = beta.unsqueeze::<2>();
    let mean = x.clone().mean_dim(1);
    let c = x - mean;
    let var = (c.clone() * c.clone()).mean_dim(1);
    c / (var + 1e-5).sqrt() * gamma.unsqueeze() + beta
}

#[test]
#[serial]
fn fusion_runs_composed_layer_norm_as_the_layer_norm_kernel() {
    if common::skipped_on_npu("fusion_runs_composed_layer_norm_as_the_layer_norm_kernel") {
        return;
    }
    let x = host_values(vec![24, 160], 22);
    let (g, b) = (host_values(vec![160], 23), host_values(vec![160], 24));
    let d = ascend();
    let gamma = Tensor::<Fusion<Ascend>, 1>::from_data(g.clone(), &d);
    let beta = Tensor::<Fusion<Ascend>, 1>::from_data(b.clone(), &d);
    // Burn's own composition, as Fusion records ModuleOps::layer_norm.
    let module = |t: Tensor<Fusion<Ascend>, 2>| {
        Tensor::from_primitive(TensorPrimitive::Float(
            <Fusion<Ascend> as burn::tensor::ops::ModuleOps<_>>::layer_norm(
                t.into_primitive().tensor(),
                gamma.clone().into_primitive().tensor(),
                Some(beta.clone().into_primitive().tensor()),
                1e-5,
            ),
        ))
    };
    let want =
        composed_layer_norm(on_flex::<2>(&x), on_flex::<1>(&g), on_flex::<1>(&b)).into_data();
    let (got, kernels, aclnn) = fused(&x, module);
    assert_close("ModuleOps::layer_norm", &got, &want, 1e-5);
    assert_eq!((kernels, aclnn), (1, 0), "one layer_norm launch");
    // The same written out by hand with the bias broadcast made up front.
    let by_hand = |t| composed_layer_norm(t, gamma.clone(), beta.clone());
    let (got, kernels, aclnn) = fused(&x, by_hand);
    assert_close("composed by hand", &got, &want, 1e-5);
    assert_eq!((kernels, aclnn), (1, 0), "one layer_norm launch");
    // A block whose intermediate outlives it is not a layer norm: it runs as composed ops.
    let keeps_mean = |t: Tensor<Fusion<Ascend>, 2>| {
        let mean = t.clone().mean_dim(1);
        let c = t - mean.clone();
        let var = (c.clone() * c.clone()).mean_dim(1);
        c / (var + 1e-5).sqrt() + mean
    };
    let (got, _, aclnn) = fused(&x, keeps_mean);
    let fx = on_flex::<2>(&x);
    let mean = fx.clone().mean_dim(1);
    let c = fx - mean.clone();
    let var = (c.clone() * c.clone()).mean_dim(1);
    assert_close(
        "mean kept",
        &got,
        &(c / (var + 1e-5).sqrt() + mean).into_data(),
        1e-5,
    );
    assert!(aclnn >= 2, "the two means stay aclnn reductions");
}

#[test]
#[serial]
fn fusion_runs_composed_linear_as_one_addmm() {
    if common::skipped_on_npu("fusion_runs_composed_linear_as_one_addmm") {
        return;
    }
    let d = ascend();
    let (xd, wd, bd) = (
        host_values(vec![2, 5, 12], 25),
        host_values(vec![12, 9], 26),
        host_values(vec![9], 27),
    );
    let w = Tensor::<Fusion<Ascend>, 2>::from_data(wd.clone(), &d);
    let b = Tensor::<Fusion<Ascend>, 1>::from_data(bd.clone(), &d);
    let want = burn::tensor::module::linear(
        on_flex::<3>(&xd),
        on_flex::<2>(&wd),
        Some(on_flex::<1>(&bd)),
    )
    .into_data();
    let (got, kernels, aclnn) = fused(&xd, |x: Tensor<Fusion<Ascend>, 3>| {
        burn::tensor::module::linear(x, w.clone(), Some(b.clone()))
    });
    assert_close("linear", &got, &want, 1e-5);
    assert_eq!((kernels, aclnn), (0, 1), "one aclnnAddmm");
    // With an activation after it: the addmm, then one program for the GELU.
    let want = burn::tensor::activation::gelu(burn::tensor::module::linear(
        on_flex::<3>(&xd),
        on_flex::<2>(&wd),
        Some(on_flex::<1>(&bd)),
    ))
    .into_data();
    let (got, kernels, aclnn) = fused(&xd, |x: Tensor<Fusion<Ascend>, 3>| {
        burn::tensor::activation::gelu(burn::tensor::module::linear(x, w.clone(), Some(b.clone())))
    });
    assert_close("linear + gelu", &got, &want, 2e-6);
    assert_eq!(
        (kernels, aclnn),
        (1, 1),
        "aclnnAddmm, then the GELU program"
    );
}

/// Runs `f` on `B` (synchronised) and returns its outputs and the device work it queued.
fn with_work<B: Backend>(
    d: &B::Device,
    f: impl FnOnce() -> Vec<TensorData>,
) -> (Vec<TensorData>, u64, u64) {
    B::sync(d).unwrap();
    let before = work_counters();
    let out = f();
    B::sync(d).unwrap();
    let w = work_counters().since(&before);
    (out, w.kernel_launches, w.aclnn_launches)
}

/// Every fused op on the lazy backend: the outputs and the launches of `B`.
fn fused_ops<B: Backend + burn_ascend::FusedOps>(d: &B::Device) -> (Vec<TensorData>, u64, u64) {
    use burn::tensor::Int;
    use burn_ascend::fused;
    let x = Tensor::<B, 2>::from_data(host_values(vec![12, 40], 30), d);
    let gamma = Tensor::<B, 1>::from_data(host_values(vec![40], 31), d);
    let beta = Tensor::<B, 1>::from_data(host_values(vec![40], 32), d);
    let dy = Tensor::<B, 2>::from_data(host_values(vec![12, 40], 33), d);
    // Top-2 routing of 12 tokens: slot i holds token perm[i] / 2.
    let perm = Tensor::<B, 1, Int>::from_data(
        TensorData::new((0..24).map(|i| (i * 7) % 24).collect::<Vec<i32>>(), [24]),
        d,
    );
    let w = Tensor::<B, 1>::from_data(host_values(vec![24], 34), d);
    let experts = Tensor::<B, 3>::from_data(host_values(vec![3, 40, 16], 35), d);
    let sizes = Tensor::<B, 1, Int>::from_data(TensorData::new(vec![5i32, 0, 7], [3]), d);
    let ints =
        Tensor::<B, 1, Int>::from_data(TensorData::new((0..9).collect::<Vec<i32>>(), [9]), d);
    with_work::<B>(d, || {
        let (y, mean, rstd) = fused::layer_norm(x.clone(), Some(gamma.clone()), Some(beta), 1e-5);
        let (dx, dgamma, dbeta) = fused::layer_norm_backward(
            dy.clone(),
            x.clone(),
            mean.clone(),
            rstd.clone(),
            Some(gamma),
        );
        let gathered = fused::moe_gather(x.clone(), perm.clone(), 2);
        let scattered = fused::moe_scatter(gathered.clone(), perm.clone(), Some(w), 2);
        let rearranged =
            fused::token_rearrange(x.clone(), perm.clone().narrow(0, 0, 12).div_scalar(2));
        let grouped = fused::grouped_matmul(x.clone(), experts, sizes.clone());
        let dw =
            fused::grouped_matmul_weight_grad(x.clone(), dy.clone().slice([0..12, 0..16]), sizes);
        let added = fused::vector_add(x.clone().reshape([480]), dy.reshape([480]));
        let int_added = fused::int_vector_add(ints.clone(), ints);
        vec![
            y.into_data(),
            mean.into_data(),
            rstd.into_data(),
            dx.into_data(),
            dgamma.into_data(),
            dbeta.into_data(),
            gathered.into_data(),
            scattered.into_data(),
            rearranged.into_data(),
            grouped.into_data(),
            dw.into_data(),
            added.into_data(),
            int_added.into_data(),
        ]
    })
}

#[test]
#[serial]
fn fused_ops_on_fusion_run_ascends_kernels_as_custom_ops() {
    let d = ascend();
    let (eager, eager_kernels, eager_aclnn) = fused_ops::<Ascend>(&d);
    let (lazy, lazy_kernels, lazy_aclnn) = fused_ops::<Fusion<Ascend>>(&d);
    for (i, (a, b)) in lazy.iter().zip(&eager).enumerate() {
        // dgamma and dbeta are atomic sums over blocks, which accumulate in a launch's block
        // order: two launches agree to rounding only (as on the NPU).
        if i == 4 || i == 5 {
            let f64s = |t: &TensorData| t.clone().convert::<f64>().to_vec::<f64>().unwrap();
            let (a, b) = (f64s(a), f64s(b));
            assert_eq!(a.len(), b.len(), "output {i}: length");
            for (x, y) in a.iter().zip(&b) {
                assert!(
                    (x - y).abs() <= 1e-5 * y.abs().max(1.0),
                    "output {i}: Fusion<Ascend> gives {x}, Ascend {y}"
                );
            }
            continue;
        }
        assert_eq!(
            a, b,
            "output {i}: Fusion<Ascend> runs the same kernel as Ascend"
        );
    }
    assert_eq!(
        lazy_kernels, eager_kernels,
        "the same Ascend C kernel launches"
    );
    assert_eq!(lazy_aclnn, eager_aclnn, "the same aclnn launches");
    // layer_norm, its backward, moe_gather, moe_scatter (two: its inverse permutation, then the
    // reduction), token_rearrange and the two vector adds are Ascend C kernels (the grouped
    // matmuls are aclnn operators); their compositions would launch none.
    assert_eq!(
        lazy_kernels, 8,
        "the fused ops ran as kernels, not compositions"
    );
}

/// Paged prefill on `Fusion<Ascend>` is one recorded custom op that runs Ascend's
/// aclnnFusedInferAttentionScoreV3 (it once recorded the composed default), with Ascend's
/// output.
#[test]
#[serial]
fn paged_prefill_on_fusion_runs_the_fused_infer_attention_operator() {
    if common::skipped_on_npu("paged_prefill_on_fusion_runs_the_fused_infer_attention_operator") {
        return;
    }
    fn run<B: Backend + burn_ascend::FusedOps>(d: &B::Device) -> (TensorData, u64) {
        use burn::tensor::Int;
        use burn_ascend::fused::{self, PrefillLens};
        let f16 = |shape: Vec<usize>, seed| {
            Tensor::<B, 3>::from_data(host_values(shape, seed), d).cast(DType::F16)
        };
        // One request: 120 cached tokens, then a chunk of 9, over pages 1 then 0 of 128 slots.
        let (q, k, v) = (
            f16(vec![9, 4, 16], 50),
            f16(vec![256, 2, 16], 51),
            f16(vec![256, 2, 16], 52),
        );
        let table =
            Tensor::<B, 2, Int>::from_data(TensorData::new(vec![1i32, 0], [1, 2]), (d, DType::I32));
        B::sync(d).unwrap();
        let before = aclnn_launches_of("aclnnFusedInferAttentionScoreV3");
        let lens = PrefillLens {
            q_lens: &[9],
            kv_lens: &[129],
            page_size: 128,
        };
        let out = fused::paged_prefill_attention(q, k, v, table, lens, 0.25).into_data();
        B::sync(d).unwrap();
        (
            out,
            aclnn_launches_of("aclnnFusedInferAttentionScoreV3") - before,
        )
    }
    let d = ascend();
    let (eager, eager_fia) = run::<Ascend>(&d);
    let (lazy, lazy_fia) = run::<Fusion<Ascend>>(&d);
    assert_eq!(
        (eager_fia, lazy_fia),
        (1, 1),
        "aclnnFusedInferAttentionScoreV3 launches"
    );
    assert_eq!(lazy, eager, "Fusion<Ascend> gives Ascend's output");
}

#[test]
#[serial]
fn an_input_read_again_after_the_block_stays_alive() {
    // `b` feeds a fused run and, later in the same recorded stream, a reduction. The block must
    // not release `b`: its last use is the reduction, after the block.
    let d = ascend();
    let (ad, bd) = (host_values(vec![4, 8], 40), host_values(vec![4, 8], 41));
    let a = Tensor::<Fusion<Ascend>, 2>::from_data(ad.clone(), &d);
    let b = Tensor::<Fusion<Ascend>, 2>::from_data(bd.clone(), &d);
    let fused = (a * 2.0 + b.clone()).exp();
    let later = b.sum();
    let (fa, fb) = (on_flex::<2>(&ad), on_flex::<2>(&bd));
    assert_close(
        "fused run",
        &fused.into_data(),
        &(fa * 2.0 + fb.clone()).exp().into_data(),
        1e-5,
    );
    assert_close(
        "later reduction",
        &later.into_data(),
        &fb.sum().into_data(),
        1e-5,
    );
}

#[test]
#[serial]
fn fusion_runs_composed_softmax_as_one_operator() {
    if common::skipped_on_npu("fusion_runs_composed_softmax_as_one_operator") {
        return;
    }
    use burn::tensor::activation::{log_softmax, softmax, softmin};
    let x = host_values(vec![6, 4, 33], 50);
    for dim in [2, 1] {
        let (got, kernels, aclnn) = fused(&x, |t: Tensor<Fusion<Ascend>, 3>| softmax(t, dim));
        assert_close(
            "softmax",
            &got,
            &softmax(on_flex::<3>(&x), dim).into_data(),
            1e-5,
        );
        assert_eq!(
            (kernels, aclnn),
            (0, 1),
            "softmax over dim {dim}: one aclnnSoftmax"
        );
        let (got, kernels, aclnn) = fused(&x, |t: Tensor<Fusion<Ascend>, 3>| log_softmax(t, dim));
        assert_close(
            "log_softmax",
            &got,
            &log_softmax(on_flex::<3>(&x), dim).into_data(),
            1e-5,
        );
        assert_eq!(
            (kernels, aclnn),
            (0, 1),
            "log_softmax over dim {dim}: one aclnnLogSoftmax"
        );
        // softmin (a negation first) and a scaled softmax (attention's): aclnnMuls, aclnnSoftmax.
        let (got, kernels, aclnn) = fused(&x, |t: Tensor<Fusion<Ascend>, 3>| softmin(t, dim));
        assert_close(
            "softmin",
            &got,
            &softmin(on_flex::<3>(&x), dim).into_data(),
            1e-5,
        );
        assert_eq!((kernels, aclnn), (0, 2), "softmin over dim {dim}");
        let (got, kernels, aclnn) =
            fused(&x, |t: Tensor<Fusion<Ascend>, 3>| softmax(t * 0.125, dim));
        let want = softmax(on_flex::<3>(&x) * 0.125, dim).into_data();
        assert_close("scaled softmax", &got, &want, 1e-5);
        assert_eq!((kernels, aclnn), (0, 2), "scaled softmax over dim {dim}");
    }
}
