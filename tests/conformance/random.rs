//! `float_random` and `int_random`. Random values differ between backends, so each backend is
//! checked on its own: shape, dtype, range and statistics of 4096 samples, and that
//! `Backend::seed` makes the values reproducible. The reference passes the same checks, which
//! keeps the bounds honest. Serial: the seed is per device.

use burn::tensor::backend::Backend;
use burn::tensor::{DType, Distribution, Int, Tensor, TensorData};
use serial_test::serial;

use crate::common::*;

const SHAPE_2D: [usize; 2] = [64, 64];

/// Minimum, maximum, mean and standard deviation.
fn stats(data: &TensorData) -> (f64, f64, f64, f64) {
    let v: Vec<f64> = data.iter::<f64>().collect();
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n;
    let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n;
    let min = v.iter().copied().fold(f64::INFINITY, f64::min);
    let max = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (min, max, mean, var.sqrt())
}

fn float_sample<B: Backend>(
    device: &B::Device,
    dtype: DType,
    distribution: Distribution,
) -> TensorData {
    let t = Tensor::<B, 2>::random(SHAPE_2D, distribution, (device, dtype));
    assert_eq!(
        (t.dims(), t.dtype()),
        (SHAPE_2D, dtype),
        "float_random {distribution:?}"
    );
    t.into_data()
}

fn check_float_random<B: Backend>(device: &B::Device) {
    for dtype in FLOATS {
        let what = |d: &str| format!("float_random {d} ({}, {dtype:?})", B::name(device));
        let (min, max, mean, std) = stats(&float_sample::<B>(device, dtype, Distribution::Default));
        assert!(
            min >= 0.0 && max <= 1.0,
            "{}: range [{min}, {max}]",
            what("default")
        );
        assert!(
            (mean - 0.5).abs() < 0.05,
            "{}: mean {mean}",
            what("default")
        );
        assert!(
            (std - 0.2887).abs() < 0.03,
            "{}: std {std}",
            what("default")
        );

        let uniform = Distribution::Uniform(-2.0, 3.0);
        let (min, max, mean, std) = stats(&float_sample::<B>(device, dtype, uniform));
        assert!(
            min >= -2.0 && max <= 3.0,
            "{}: range [{min}, {max}]",
            what("uniform")
        );
        assert!(
            (mean - 0.5).abs() < 0.15,
            "{}: mean {mean}",
            what("uniform")
        );
        assert!((std - 1.443).abs() < 0.1, "{}: std {std}", what("uniform"));

        let normal = Distribution::Normal(1.0, 2.0);
        let (_, _, mean, std) = stats(&float_sample::<B>(device, dtype, normal));
        assert!((mean - 1.0).abs() < 0.15, "{}: mean {mean}", what("normal"));
        assert!((std - 2.0).abs() < 0.15, "{}: std {std}", what("normal"));

        let data = float_sample::<B>(device, dtype, Distribution::Bernoulli(0.3));
        assert!(
            data.iter::<f64>().all(|v| v == 0.0 || v == 1.0),
            "{}: values other than 0 and 1",
            what("bernoulli")
        );
        let (_, _, mean, _) = stats(&data);
        assert!(
            (mean - 0.3).abs() < 0.05,
            "{}: mean {mean}",
            what("bernoulli")
        );
    }
}

fn check_int_random<B: Backend>(device: &B::Device) {
    for dtype in INTS {
        let what = format!("int_random ({}, {dtype:?})", B::name(device));
        let t = Tensor::<B, 2, Int>::random(
            SHAPE_2D,
            Distribution::Uniform(0.0, 10.0),
            (device, dtype),
        );
        assert_eq!((t.dims(), t.dtype()), (SHAPE_2D, dtype), "{what}");
        let v: Vec<i64> = t.into_data().iter::<i64>().collect();
        assert!(
            v.iter().all(|x| (0..10).contains(x)),
            "{what}: values outside [0, 10)"
        );
        assert!(
            (0..10).all(|k| v.contains(&k)),
            "{what}: a value of [0, 10) never drawn"
        );
        let mean = v.iter().sum::<i64>() as f64 / v.len() as f64;
        assert!((mean - 4.5).abs() < 0.3, "{what}: mean {mean}");
    }
}

/// Two draws after the same seed are equal; a draw after another seed differs.
fn check_seed<B: Backend>(device: &B::Device) {
    let draw = |seed: u64| {
        B::seed(device, seed);
        let f = Tensor::<B, 2>::random(SHAPE_2D, Distribution::Default, device).into_data();
        let i = Tensor::<B, 2, Int>::random(SHAPE_2D, Distribution::Uniform(0.0, 100.0), device)
            .into_data();
        (f, i)
    };
    let (f1, i1) = draw(42);
    let (f2, i2) = draw(42);
    let (f3, i3) = draw(43);
    let name = B::name(device);
    assert_eq!(f1, f2, "float_random after seed 42 twice ({name})");
    assert_eq!(i1, i2, "int_random after seed 42 twice ({name})");
    assert_ne!(f1, f3, "float_random after seeds 42 and 43 ({name})");
    assert_ne!(i1, i3, "int_random after seeds 42 and 43 ({name})");
}

#[test]
#[serial]
fn float_random_distributions() {
    check_float_random::<Flex>(&Default::default());
    check_float_random::<Ascend>(&device());
}

#[test]
#[serial]
fn int_random_uniform() {
    check_int_random::<Flex>(&Default::default());
    check_int_random::<Ascend>(&device());
}

#[test]
#[serial]
fn random_seed_reproducible() {
    check_seed::<Flex>(&Default::default());
    check_seed::<Ascend>(&device());
}
