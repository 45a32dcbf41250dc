//! Emulated `aclnnSwiGlu` (CANN 8.1.RC1, Atlas A2; `shared/ascend/aclnn-fused-decode-ops.md`
//! §5.1, ops-nn `activation/swi_glu/docs/aclnnSwiGlu.md`): x is split in two halves along
//! `dim`, and `out = silu(A) * B` where **A, the first half, is the gate** (the doc's
//! `Swish(A_i) * B_i`, A "the first part"; vLLM's gate_up order: gate columns first).
//!
//! x and out F16, BF16 or F32, out in x's dtype, both contiguous (the doc refuses
//! non-contiguous ones); rank at least 1; `dim` in `[-rank, rank)`; x's size along `dim` even;
//! out x's shape with that size halved. Empty tensors are allowed (the doc supports them on
//! A2). Numerics: each element in f32 (`a / (1 + exp(-a)) * b`), rounded once to the dtype
//! (F16/BF16 widened exactly), as the emulated activations compute (`elementwise.rs`).
#![allow(
    missing_docs,
    non_snake_case,
    clippy::missing_safety_doc,
    clippy::too_many_arguments
)]

use std::sync::Arc;

use super::meta::{tensor_arg, Kernel};
use super::ops::{check_dtype_of, invalid, phase1, phase2_entry_points, Ex, Ws};
use super::routing::dense;
use super::view::map;
use ascend_acl::dtype::DataType::{self, *};
use ascend_acl::types::*;

const SWIGLU: &[DataType] = &[F16, BF16, F32];

phase2_entry_points!(aclnnSwiGlu);

pub unsafe extern "C" fn aclnnSwiGluGetWorkspaceSize(
    x: *const aclTensor,
    dim: i64,
    out: *const aclTensor,
    ws: Ws,
    ex: Ex,
) -> aclnnStatus {
    const OP: &str = "aclnnSwiGlu";
    phase1(OP, ws, ex, || {
        let (x, out) = (tensor_arg(OP, "x", x)?, tensor_arg(OP, "out", out)?);
        check_dtype_of(OP, "x", &x, SWIGLU)?;
        check_dtype_of(OP, "out", &out, SWIGLU)?;
        if out.dtype != x.dtype {
            return Err(invalid(
                OP,
                format!(
                    "out {} must have x {}'s dtype",
                    out.describe(),
                    x.describe()
                ),
            ));
        }
        let rank = x.shape.len() as i64;
        if rank == 0 || dim < -rank || dim >= rank {
            return Err(invalid(
                OP,
                format!(
                    "dim {dim} is out of range for x {} (rank {rank})",
                    x.describe()
                ),
            ));
        }
        let d = if dim < 0 { dim + rank } else { dim } as usize;
        let n = x.shape[d];
        if !n.is_multiple_of(2) {
            return Err(invalid(
                OP,
                format!("x {} has an odd size {n} along dim {dim}", x.describe()),
            ));
        }
        let mut shape = x.shape.clone();
        shape[d] = n / 2;
        if out.shape != shape {
            return Err(invalid(
                OP,
                format!(
                    "out {} should be {shape:?} for x {} split along dim {dim}",
                    out.describe(),
                    x.describe()
                ),
            ));
        }
        dense(OP, "x", &x)?;
        dense(OP, "out", &out)?;
        let outer: usize = x.shape[..d].iter().product();
        let inner: usize = x.shape[d + 1..].iter().product();
        let half = n / 2;
        Ok((
            0,
            Arc::new(move || {
                if out.numel() == 0 {
                    return Ok(());
                }
                let mo = map(OP, "out", &out)?;
                let mut mx = map(OP, "x", &x)?;
                mx.detach_from(&mo, false);
                let (get, set) = (mx.getter::<f32>(), mo.setter::<f32>());
                let chunk = half * inner;
                for o in 0..outer {
                    let gate = x.offset + o * 2 * chunk;
                    let dst = out.offset + o * chunk;
                    for e in 0..chunk {
                        let (a, b) = (get(gate + e), get(gate + chunk + e));
                        set(dst + e, a / (1.0 + (-a).exp()) * b);
                    }
                }
                Ok(())
            }) as Kernel,
        ))
    })
}
