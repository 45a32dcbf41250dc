//! The host-side caches of the operator path (`burn_ascend::acl::cache`): cached descriptors
//! and repeatable executors give the results of the uncached path, follow rebound addresses,
//! stay exact when memory is freed and its address reused, stay bounded, and fall back to
//! phase one when the table lacks the repeatable-executor API or the runtime refuses it.
//!
//! The caches are per thread, so each test reads the counters of its own thread. The device's
//! allocator is shared, so the tests run one at a time (one of them waits for a freed block to
//! come back).

mod common;

use std::ffi::c_void;

use burn::tensor::backend::Backend;
use burn::tensor::{Int, Tensor, TensorData, Tolerance};
use burn_ascend::acl::aclnn_cached;
use burn_ascend::acl::cache::{self, In, Out, DESCRIPTOR_CAPACITY, EXECUTOR_CAPACITY};
use burn_ascend::acl::handles::{HostScalar, OpLauncher};
use burn_ascend::acl::table::{Phase2Fn, SymbolSource};
use burn_ascend::acl::types::aclOpExecutor;
use burn_ascend::acl::{AclApi, AclResult, DataType};
use burn_ascend::emulator::EmulatedRuntime;
use burn_ascend::ops::{creation, AscendTensor};
use burn_ascend::runtime::DeviceContext;
use burn_ascend::{Ascend, AscendDevice};
use burn_flex::Flex;
use serial_test::serial;

fn device() -> AscendDevice {
    common::device()
}

fn values(n: usize, seed: f32) -> Vec<f32> {
    (0..n).map(|i| seed + i as f32 * 0.5 - 3.0).collect()
}

fn tensor<B: Backend, const D: usize>(shape: [usize; D], seed: f32, d: &B::Device) -> Tensor<B, D> {
    let n = shape.iter().product();
    Tensor::from_data(TensorData::new(values(n, seed), shape), d)
}

fn ints<B: Backend, const D: usize>(
    shape: [usize; D],
    seed: i64,
    d: &B::Device,
) -> Tensor<B, D, Int> {
    let n: usize = shape.iter().product();
    let v: Vec<i64> = (0..n as i64).map(|i| seed + 3 * i - 7).collect();
    Tensor::from_data(TensorData::new(v, shape), d)
}

/// The hot ops on one backend, for two input seeds (the second run of each op reuses the first
/// one's executor with other addresses).
fn hot_ops<B: Backend>(d: &B::Device, seed: f32) -> Vec<TensorData> {
    let a = tensor::<B, 2>([4, 4], seed, d);
    let b = tensor::<B, 2>([4, 4], seed * 2.0 + 1.0, d);
    let m = tensor::<B, 2>([2, 3], seed, d);
    let n = tensor::<B, 2>([3, 2], seed + 1.0, d);
    let i = ints::<B, 2>([4, 4], seed as i64, d);
    let j = ints::<B, 2>([4, 4], seed as i64 + 11, d).clamp_min(1);
    vec![
        (a.clone() + b.clone()).into_data(),
        (a.clone() - b.clone()).into_data(),
        (a.clone() * b.clone()).into_data(),
        (a.clone() / b.clone().abs().add_scalar(1.0)).into_data(),
        (a.clone() + 2.5).into_data(),
        (a.clone() - 0.25).into_data(),
        (a.clone() * 3.0).into_data(),
        (a.clone() / 4.0).into_data(),
        (i.clone() + j.clone()).into_data(),
        (i.clone() / j.clone()).into_data(),
        (i.clone() * 5).into_data(),
        (i.clone() / 2).into_data(),
        m.matmul(n).into_data(),
        a.clone().sum().into_data(),
        a.clone().sum_dim(1).into_data(),
        // A permuted view: strides are part of the key.
        a.clone().permute([1, 0]).sum_dim(0).into_data(),
        (a.clone().permute([1, 0]) + b).into_data(),
        i.sum().into_data(),
    ]
}

fn assert_matches(got: &[TensorData], want: &[TensorData]) {
    assert_eq!(got.len(), want.len());
    for (k, (g, w)) in got.iter().zip(want).enumerate() {
        if g.dtype.is_float() {
            g.assert_approx_eq::<f32>(w, Tolerance::default());
        } else {
            let (g, w) = (g.clone().convert::<i64>(), w.clone().convert::<i64>());
            assert_eq!(g, w, "op {k}");
        }
    }
}

#[test]
#[serial]
fn cached_executors_give_the_results_of_burn_flex_and_follow_rebound_addresses() {
    let flex = Default::default();
    let before = cache::stats();
    for seed in [1.0, 7.0, -2.0] {
        assert_matches(
            &hot_ops::<Ascend>(&device(), seed),
            &hot_ops::<Flex>(&flex, seed),
        );
    }
    let after = cache::stats();
    assert!(after.executors > 0, "{after:?}");
    // Two further seeds ran every op again on new tensors of the same shapes: at least one
    // hit per op and seed, each rebinding addresses to the new inputs.
    assert!(
        after.executor_hits - before.executor_hits >= 2 * 18,
        "{before:?} -> {after:?}"
    );
}

#[test]
#[serial]
fn one_executor_serves_different_tensors_of_the_same_shape() {
    let a1 = tensor::<Ascend, 1>([8], 0.0, &device());
    let a2 = tensor::<Ascend, 1>([8], 100.0, &device());
    let b1 = tensor::<Ascend, 1>([8], 1.0, &device());
    let b2 = tensor::<Ascend, 1>([8], -50.0, &device());
    let before = cache::stats();
    // Kept alive together, so every operand and output has its own address.
    let r1 = a1.clone() + b1.clone();
    let r2 = a2.clone() + b2.clone();
    let r3 = b2 + a1;
    let after = cache::stats();
    assert!(
        after.executor_hits >= before.executor_hits + 2,
        "{before:?} -> {after:?}"
    );
    let want = |x: f32, y: f32| -> Vec<f32> {
        values(8, x)
            .iter()
            .zip(values(8, y))
            .map(|(p, q)| p + q)
            .collect()
    };
    assert_eq!(r1.into_data().to_vec::<f32>().unwrap(), want(0.0, 1.0));
    assert_eq!(r2.into_data().to_vec::<f32>().unwrap(), want(100.0, -50.0));
    assert_eq!(r3.into_data().to_vec::<f32>().unwrap(), want(-50.0, 0.0));
}

#[test]
#[serial]
fn the_same_tensor_twice_and_aliased_arguments_stay_exact() {
    let a = tensor::<Ascend, 1>([6], 2.0, &device());
    let b = tensor::<Ascend, 1>([6], 5.0, &device());
    // `a + a` passes one buffer twice (one descriptor lent, one fresh; its own executor),
    // `a + b` two buffers of the same structure.
    let twice = (a.clone() + a.clone()).into_data().to_vec::<f32>().unwrap();
    let pair = (a.clone() + b.clone()).into_data().to_vec::<f32>().unwrap();
    let twice_again = (b.clone() + b.clone()).into_data().to_vec::<f32>().unwrap();
    let (va, vb) = (values(6, 2.0), values(6, 5.0));
    assert_eq!(twice, va.iter().map(|x| x + x).collect::<Vec<_>>());
    assert_eq!(
        pair,
        va.iter().zip(&vb).map(|(x, y)| x + y).collect::<Vec<_>>()
    );
    assert_eq!(twice_again, vb.iter().map(|x| x + x).collect::<Vec<_>>());
}

fn primitive(t: Tensor<Ascend, 1>) -> AscendTensor {
    t.into_primitive().tensor().into_inner()
}

#[test]
#[serial]
fn freed_memory_whose_address_is_reused_is_described_exactly() {
    let first = tensor::<Ascend, 1>([16], 1.0, &device());
    let first_ptr = primitive(first.clone()).storage_ptr();
    let out = (first.clone() * 2.0).into_data().to_vec::<f32>().unwrap();
    assert_eq!(
        out,
        values(16, 1.0).iter().map(|x| x * 2.0).collect::<Vec<_>>()
    );
    drop(first);
    <Ascend as Backend>::sync(&device()).unwrap();

    // The caching allocator hands the freed block out again; the cached descriptor and
    // executor of the same view now describe other data.
    let mut reused = None;
    let mut keep = Vec::new();
    for attempt in 0..64 {
        let t = tensor::<Ascend, 1>([16], 40.0 + attempt as f32, &device());
        if primitive(t.clone()).storage_ptr() == first_ptr {
            reused = Some((t, 40.0 + attempt as f32));
            break;
        }
        keep.push(t);
    }
    let (second, seed) = reused.expect("the allocator reuses a freed block of the same size");
    let hits = cache::stats();
    let out = (second.clone() * 2.0).into_data().to_vec::<f32>().unwrap();
    assert_eq!(
        out,
        values(16, seed).iter().map(|x| x * 2.0).collect::<Vec<_>>()
    );
    let sum = second.exp().sum().into_data().to_vec::<f32>().unwrap()[0];
    let want: f32 = values(16, seed).iter().map(|x| x.exp()).sum();
    assert!((sum - want).abs() <= want.abs() * 1e-5, "{sum} vs {want}");
    assert!(
        cache::stats().descriptor_hits + cache::stats().executor_hits
            > hits.descriptor_hits + hits.executor_hits
    );
}

#[test]
#[serial]
fn the_caches_stay_bounded_and_evicted_entries_are_rebuilt_correctly() {
    let shapes = EXECUTOR_CAPACITY + 20;
    let check = |n: usize| {
        let a = tensor::<Ascend, 1>([n], n as f32, &device());
        let b = tensor::<Ascend, 1>([n], 1.0, &device());
        let got = (a + b).tanh().into_data().to_vec::<f32>().unwrap();
        let want: Vec<f32> = values(n, n as f32)
            .iter()
            .zip(values(n, 1.0))
            .map(|(x, y)| (x + y).tanh())
            .collect();
        for (g, w) in got.iter().zip(&want) {
            assert!((g - w).abs() <= 1e-6, "[{n}]: {g} vs {w}");
        }
    };
    // Distinct shapes: more executors than the cache keeps; the uncached `tanh` and `exp`
    // take more descriptors than it keeps.
    for n in 1..=shapes {
        check(n);
        let s = cache::stats();
        assert!(s.executors <= EXECUTOR_CAPACITY, "{s:?}");
        assert!(s.descriptors <= DESCRIPTOR_CAPACITY, "{s:?}");
    }
    for n in 1..=shapes * 2 {
        let t = tensor::<Ascend, 2>([2, n], 0.0, &device());
        drop(t.exp());
    }
    let s = cache::stats();
    assert!(s.evictions > 0, "{s:?}");
    assert!(s.descriptors <= DESCRIPTOR_CAPACITY && s.executors <= EXECUTOR_CAPACITY);
    // The first shapes were evicted; they are rebuilt and still right.
    for n in 1..=4 {
        check(n);
    }
    cache::clear();
    let s = cache::stats();
    assert_eq!((s.descriptors, s.executors), (0, 0));
    check(3);
}

#[test]
#[serial]
fn each_thread_has_its_own_caches() {
    let handles: Vec<_> = (0..3)
        .map(|k| {
            std::thread::spawn(move || {
                for round in 0..4 {
                    let seed = (k * 10 + round) as f32;
                    let a = tensor::<Ascend, 2>([3, 3], seed, &device());
                    let got = (a.clone() * a).sum().into_data().to_vec::<f32>().unwrap()[0];
                    let want: f32 = values(9, seed).iter().map(|x| x * x).sum();
                    assert!((got - want).abs() <= 1e-3, "{got} vs {want}");
                }
                cache::stats()
            })
        })
        .collect();
    for h in handles {
        let s = h.join().unwrap();
        assert!(s.executor_hits >= 6 && s.executors >= 2, "{s:?}");
    }
}

/// The emulated runtime without the repeatable-executor API, as an older library would be.
struct WithoutRepeatable;

impl SymbolSource for WithoutRepeatable {
    fn lookup(&self, name: &str) -> Option<*const c_void> {
        match name {
            "aclSetAclOpExecutorRepeatable"
            | "aclSetInputTensorAddr"
            | "aclSetOutputTensorAddr" => None,
            _ => EmulatedRuntime.lookup(name),
        }
    }

    fn describe(&self) -> String {
        "emulated, without repeatable executors".into()
    }
}

/// The device context's launches, through another table.
struct Through {
    api: &'static AclApi,
    ctx: std::sync::Arc<DeviceContext>,
}

impl OpLauncher for Through {
    fn api(&self) -> &'static AclApi {
        self.ctx.bind();
        self.api
    }

    fn context_id(&self) -> u64 {
        self.ctx.context_id()
    }

    unsafe fn launch(
        &self,
        op: &'static str,
        phase2: Phase2Fn,
        executor: *mut aclOpExecutor,
        workspace_size: u64,
    ) -> AclResult<()> {
        unsafe { self.ctx.launch(op, phase2, executor, workspace_size) }
    }

    unsafe fn launch_repeatable(
        &self,
        op: &'static str,
        phase2: Phase2Fn,
        executor: *mut aclOpExecutor,
        workspace_size: u64,
    ) -> AclResult<()> {
        unsafe {
            self.ctx
                .launch_repeatable(op, phase2, executor, workspace_size)
        }
    }
}

fn upload(ctx: &std::sync::Arc<DeviceContext>, v: &[f32]) -> AscendTensor {
    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    creation::from_bytes(ctx, vec![v.len()], DataType::F32, &bytes).unwrap()
}

fn download(t: &AscendTensor) -> Vec<f32> {
    creation::to_bytes(t)
        .unwrap()
        .chunks(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

#[test]
#[serial]
fn without_the_repeatable_api_or_when_refused_every_call_runs_phase_one() {
    if common::skipped_on_npu(
        "without_the_repeatable_api_or_when_refused_every_call_runs_phase_one",
    ) {
        return;
    }
    let ctx = DeviceContext::get(&device().into()).unwrap();
    let api: &'static AclApi =
        Box::leak(Box::new(AclApi::new(Box::new(WithoutRepeatable)).unwrap()));
    assert!(api.optional.aclSetAclOpExecutorRepeatable.is_none());
    let launcher = Through {
        api,
        ctx: ctx.clone(),
    };
    let before = cache::stats();
    for round in 0..3 {
        let (a, b) = (
            upload(&ctx, &values(8, round as f32)),
            upload(&ctx, &values(8, 1.0)),
        );
        let out = AscendTensor::empty(&ctx, vec![8], DataType::F32).unwrap();
        aclnn_cached!(
            &launcher,
            aclnnAdd(
                In(a.view()),
                In(b.view()),
                HostScalar::Int(1),
                Out(out.view())
            )
        )
        .unwrap();
        let want: Vec<f32> = values(8, round as f32)
            .iter()
            .zip(values(8, 1.0))
            .map(|(x, y)| x + y)
            .collect();
        assert_eq!(download(&out), want);
    }
    let after = cache::stats();
    assert_eq!(after.executors, before.executors, "nothing cached");
    assert_eq!(after.executor_misses - before.executor_misses, 3);

    // The emulation refuses to make a Cast executor repeatable: it runs once, uncached.
    let x = upload(&ctx, &[1.5, -2.25, 3.0]);
    for _ in 0..2 {
        let y = AscendTensor::empty(&ctx, vec![3], DataType::F32).unwrap();
        aclnn_cached!(
            &*ctx,
            aclnnCast(In(x.view()), DataType::F32.acl(), Out(y.view()))
        )
        .unwrap();
        assert_eq!(download(&y), [1.5, -2.25, 3.0]);
    }
    assert_eq!(
        cache::stats().executors,
        after.executors,
        "Cast is not cached"
    );
}

#[test]
#[serial]
fn a_lent_descriptor_given_to_a_tensor_list_is_copied_not_taken() {
    use burn_ascend::acl::handles::TensorListDesc;
    let ctx = DeviceContext::get(&device().into()).unwrap();
    let x = upload(&ctx, &[1.0, 2.0, 3.0, 4.0]);
    for _ in 0..3 {
        // The list destroys its member; the cache must still hold a live descriptor after.
        let list = TensorListDesc::new(ctx.bind(), vec![x.desc().unwrap()]).unwrap();
        drop(list);
        let y = AscendTensor::empty(&ctx, vec![4], DataType::F32).unwrap();
        aclnn_cached!(
            &*ctx,
            aclnnMuls(In(x.view()), HostScalar::Float(2.0), Out(y.view()))
        )
        .unwrap();
        assert_eq!(download(&y), [2.0, 4.0, 6.0, 8.0]);
        drop(x.desc().unwrap());
    }
    cache::clear();
}
