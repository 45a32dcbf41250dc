//! The emulated aclnn operators. Phase one validates what the real operator validates (dtypes
//! on Atlas A2 from `aclnn-ops.tsv`, shapes, ranks) and returns its status; phase two queues
//! the kernel on the stream. Kernels map their views when they run. The arithmetic family,
//! matmul and ReduceSum capture their tensors as argument slots, so their executors can be made
//! repeatable and rebound to other addresses.
#![allow(
    missing_docs,
    non_snake_case,
    clippy::missing_safety_doc,
    clippy::too_many_arguments
)]

use std::ffi::{c_int, c_void};

use super::fault::{fault, guard, Fault};
use super::kernels;
use super::machine::machine;
use super::meta::{
    int_array_arg, launch_of, new_executor, scalar_arg, tensor_arg, tensor_list_arg, Io, Kernel,
    TensorDesc,
};
use ascend_acl::dtype::DataType::{self, *};
use ascend_acl::types::status::*;
use ascend_acl::types::*;

/// Workspace that operators with an internal reduction or tiling buffer ask for.
pub(crate) const SCRATCH_WORKSPACE: u64 = 16 << 10;

/// Dtypes of the elementwise arithmetic family on Atlas A2 (complex left out).
const ARITH: &[DataType] = &[F32, F16, F64, I32, I64, I16, I8, U8, Bool, BF16];
const CAST: &[DataType] = &[
    F16, F32, F64, I8, U8, I16, U16, I32, U32, I64, U64, Bool, BF16,
];
const COPY: &[DataType] = &[
    I8, I16, I32, I64, U8, F16, F32, Bool, F64, U16, U32, U64, BF16,
];
const ZERO: &[DataType] = &[I8, I32, I64, U8, F16, F32, Bool, F64, I16, U16, BF16];
const ONE: &[DataType] = &[F32, F16, F64, I8, I16, I32, I64, U8, U16, Bool, BF16];
const FILL: &[DataType] = &[
    F32, F16, U8, I8, I16, I32, I64, F64, Bool, BF16, U16, U32, U64,
];
const MATMUL: &[DataType] = &[F16, BF16, F32];
const REDUCE_SUM: &[DataType] = &[F16, F32, I8, I16, I32, I64, U8, Bool, F64, BF16];
const CAT: &[DataType] = &[F32, F16, I32, I64, I16, I8, U8, Bool, F64, BF16];
const FLIP: &[DataType] = &[F16, F32, I32, I16, I64, Bool, I8, U8, F64, BF16];

pub(crate) fn check_dtype(
    op: &str,
    name: &str,
    t: &TensorDesc,
    allowed: &[DataType],
) -> Result<(), Fault> {
    if allowed.contains(&t.dtype) {
        Ok(())
    } else {
        Err(fault(
            ACLNN_ERR_PARAM_INVALID,
            format!(
                "{op}: {name} dtype {} is not supported on Atlas A2 (supported: {})",
                t.dtype,
                allowed
                    .iter()
                    .map(|d| d.name())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ))
    }
}

/// [`check_dtype`], naming the tensor's shape as well (the decode-step operators' refusals name
/// the shapes they were given).
pub(crate) fn check_dtype_of(
    op: &str,
    name: &str,
    t: &TensorDesc,
    allowed: &[DataType],
) -> Result<(), Fault> {
    check_dtype(op, name, t, allowed).map_err(|f| Fault {
        code: f.code,
        message: format!("{} ({name} is {})", f.message, t.describe()),
    })
}

pub(crate) fn invalid(op: &str, message: impl std::fmt::Display) -> Fault {
    fault(ACLNN_ERR_PARAM_INVALID, format!("{op}: {message}"))
}

/// Phase one: validate and build the executor.
pub(crate) unsafe fn phase1(
    op: &'static str,
    workspace_size: *mut u64,
    executor: *mut *mut aclOpExecutor,
    build: impl FnOnce() -> Result<(u64, Kernel), Fault>,
) -> aclnnStatus {
    phase1_io(op, workspace_size, executor, |_| build())
}

/// Phase one of an operator that captures its tensor arguments as slots (`io.input(..)`,
/// `io.output(..)`, in header order), so that its executor can be made repeatable and rebound.
pub(crate) unsafe fn phase1_io(
    op: &'static str,
    workspace_size: *mut u64,
    executor: *mut *mut aclOpExecutor,
    build: impl FnOnce(&mut Io) -> Result<(u64, Kernel), Fault>,
) -> aclnnStatus {
    guard(op, || {
        if workspace_size.is_null() || executor.is_null() {
            return Err(fault(
                ACLNN_ERR_PARAM_NULLPTR,
                format!("{op}GetWorkspaceSize: workspaceSize or executor is NULL"),
            ));
        }
        let mut io = Io::default();
        let (built, bytes) = super::counters::capture(|| build(&mut io));
        let (workspace, kernel) = built?;
        let objects = super::objects::take_recorded();
        *workspace_size = workspace;
        *executor = new_executor(op, workspace, kernel, io, bytes, objects);
        Ok(())
    })
}

/// Phase two: check the workspace and queue the kernel; a non-repeatable executor is consumed.
pub(crate) unsafe fn phase2(
    op: &'static str,
    workspace: *mut c_void,
    workspace_size: u64,
    executor: *mut aclOpExecutor,
    stream: aclrtStream,
) -> aclnnStatus {
    guard(op, || {
        if executor.is_null() {
            return Err(fault(
                ACLNN_ERR_PARAM_NULLPTR,
                format!("{op}: executor is NULL"),
            ));
        }
        let exec = launch_of(op, executor)?;
        let ws = workspace as u64;
        if exec.workspace > 0 {
            if workspace_size < exec.workspace || workspace.is_null() {
                return Err(fault(
                    ACLNN_ERR_PARAM_INVALID,
                    format!("{op}: needs a {}-byte workspace, got {workspace_size} bytes at {workspace:?}", exec.workspace),
                ));
            }
            let npu = machine().npu_of(ws).ok_or_else(|| {
                fault(
                    ACLNN_ERR_PARAM_INVALID,
                    format!("{op}: workspace {workspace:?} is not device memory"),
                )
            })?;
            npu.memory.check(ws, exec.workspace as usize)?;
        }
        let stream = machine().stream(stream)?;
        let device = stream.device();
        let need = exec.workspace as usize;
        let bytes = exec.bytes;
        stream.enqueue_op(Box::new(move || {
            // An operator runs on its stream's device and reaches that device's memory only.
            for (name, addr) in &exec.addrs {
                let owner = machine().npu_of(*addr).map(|n| n.memory.device());
                if owner.is_some_and(|o| o != device) {
                    return Err(fault(
                        ACL_ERROR_RT_AICORE_EXCEPTION,
                        format!(
                            "{op} kernel: {name} at 0x{addr:x} is memory of NPU {}, but the kernel runs on NPU {device}",
                            owner.unwrap_or(-1)
                        ),
                    ));
                }
            }
            if super::graph::replaying().is_some() && exec.changed() {
                return Err(fault(
                    ACL_ERROR_RT_AICORE_EXCEPTION,
                    format!(
                        "graph replay: the repeatable {op} executor this graph recorded was \
                         rebound (aclSetInputTensorAddr / aclSetOutputTensorAddr) or destroyed \
                         after the capture; a live graph's executors must stay as recorded"
                    ),
                ));
            }
            if need > 0 {
                // The workspace must still be live when the kernel runs.
                machine()
                    .npu_of(ws)
                    .map(|n| n.memory.check(ws, need))
                    .transpose()?;
            }
            exec.run().map_err(|f| Fault {
                code: f.code,
                message: format!("{op} kernel: {}", f.message),
            })
        }), op, bytes)
    })
}

/// Defines the phase-two entry point of each listed operator.
macro_rules! phase2_entry_points {
    ($($op:ident),* $(,)?) => {$(
        pub unsafe extern "C" fn $op(workspace: *mut std::ffi::c_void, workspace_size: u64, executor: *mut ::ascend_acl::types::aclOpExecutor, stream: ::ascend_acl::types::aclrtStream) -> ::ascend_acl::types::aclnnStatus {
            $crate::ops::phase2(stringify!($op), workspace, workspace_size, executor, stream)
        }
    )*};
}
pub(crate) use phase2_entry_points;
phase2_entry_points!(
    aclnnCast,
    aclnnInplaceCopy,
    aclnnInplaceZero,
    aclnnInplaceOne,
    aclnnInplaceFillScalar,
    aclnnAdd,
    aclnnAdds,
    aclnnSub,
    aclnnSubs,
    aclnnMul,
    aclnnMuls,
    aclnnDiv,
    aclnnDivs,
    aclnnDivMod,
    aclnnDivMods,
    aclnnMatmul,
    aclnnAddmm,
    aclnnReduceSum,
    aclnnCat,
    aclnnFlip,
);

pub(crate) type Ws = *mut u64;
pub(crate) type Ex = *mut *mut aclOpExecutor;

pub unsafe extern "C" fn aclnnCastGetWorkspaceSize(
    self_: *const aclTensor,
    dtype: i32,
    out: *mut aclTensor,
    ws: Ws,
    ex: Ex,
) -> aclnnStatus {
    const OP: &str = "aclnnCast";
    phase1(OP, ws, ex, || {
        let (x, out) = (tensor_arg(OP, "self", self_)?, tensor_arg(OP, "out", out)?);
        check_dtype(OP, "self", &x, CAST)?;
        check_dtype(OP, "out", &out, CAST)?;
        if out.dtype.acl() != dtype {
            return Err(invalid(
                OP,
                format!("dtype {dtype} differs from out dtype {}", out.dtype),
            ));
        }
        if x.dtype == Bool && !x.is_contiguous() {
            return Err(invalid(OP, "a BOOL self must be contiguous"));
        }
        kernels::same_shape(OP, &x, &out)?;
        Ok((0, kernels::copy(OP, x, out)))
    })
}

pub unsafe extern "C" fn aclnnInplaceCopyGetWorkspaceSize(
    self_ref: *mut aclTensor,
    src: *const aclTensor,
    ws: Ws,
    ex: Ex,
) -> aclnnStatus {
    const OP: &str = "aclnnInplaceCopy";
    phase1(OP, ws, ex, || {
        let (dst, src) = (
            tensor_arg(OP, "selfRef", self_ref)?,
            tensor_arg(OP, "src", src)?,
        );
        check_dtype(OP, "selfRef", &dst, COPY)?;
        check_dtype(OP, "src", &src, COPY)?;
        if super::view::broadcast_strides(&src.shape, &src.strides, &dst.shape).is_none() {
            return Err(invalid(
                OP,
                format!(
                    "src shape {:?} does not broadcast to selfRef shape {:?}",
                    src.shape, dst.shape
                ),
            ));
        }
        Ok((0, kernels::copy(OP, src, dst)))
    })
}

unsafe fn fill(
    op: &'static str,
    self_ref: *const aclTensor,
    allowed: &[DataType],
    value: f64,
    ws: Ws,
    ex: Ex,
) -> aclnnStatus {
    phase1(op, ws, ex, || {
        let dst = tensor_arg(op, "selfRef", self_ref)?;
        check_dtype(op, "selfRef", &dst, allowed)?;
        Ok((0, kernels::fill(op, dst, value)))
    })
}

pub unsafe extern "C" fn aclnnInplaceZeroGetWorkspaceSize(
    self_ref: *mut aclTensor,
    ws: Ws,
    ex: Ex,
) -> aclnnStatus {
    fill("aclnnInplaceZero", self_ref, ZERO, 0.0, ws, ex)
}

pub unsafe extern "C" fn aclnnInplaceOneGetWorkspaceSize(
    self_ref: *const aclTensor,
    ws: Ws,
    ex: Ex,
) -> aclnnStatus {
    fill("aclnnInplaceOne", self_ref, ONE, 1.0, ws, ex)
}

pub unsafe extern "C" fn aclnnInplaceFillScalarGetWorkspaceSize(
    self_ref: *mut aclTensor,
    value: *const aclScalar,
    ws: Ws,
    ex: Ex,
) -> aclnnStatus {
    const OP: &str = "aclnnInplaceFillScalar";
    phase1(OP, ws, ex, || {
        let dst = tensor_arg(OP, "selfRef", self_ref)?;
        check_dtype(OP, "selfRef", &dst, FILL)?;
        let v = scalar_arg(OP, "value", value)?;
        Ok((0, kernels::fill_scalar(OP, dst, v)))
    })
}

unsafe fn binary(
    op: &'static str,
    a: *const aclTensor,
    b: *const aclTensor,
    out: *mut aclTensor,
    f: kernels::Binary,
    ws: Ws,
    ex: Ex,
) -> aclnnStatus {
    phase1_io(op, ws, ex, |io| {
        let (a, b, out) = (
            io.input(tensor_arg(op, "self", a)?),
            io.input(tensor_arg(op, "other", b)?),
            io.output(tensor_arg(op, "out", out)?),
        );
        for (n, t) in [("self", &a), ("other", &b), ("out", &out)] {
            check_dtype(op, n, t, ARITH)?;
        }
        kernels::check_binary(op, &a, &b, &out, f)?;
        Ok((
            0,
            kernels::binary(op, a, kernels::Operand::Tensor(b), out, f),
        ))
    })
}

unsafe fn binary_scalar(
    op: &'static str,
    a: *const aclTensor,
    s: *const aclScalar,
    out: *mut aclTensor,
    f: kernels::Binary,
    ws: Ws,
    ex: Ex,
) -> aclnnStatus {
    phase1_io(op, ws, ex, |io| {
        let (a, out) = (
            io.input(tensor_arg(op, "self", a)?),
            io.output(tensor_arg(op, "out", out)?),
        );
        let s = scalar_arg(op, "other", s)?;
        for (n, t) in [("self", &a), ("out", &out)] {
            check_dtype(op, n, t, ARITH)?;
        }
        kernels::check_binary(op, &a, &a, &out, f)?;
        Ok((
            0,
            kernels::binary(op, a, kernels::Operand::Scalar(s), out, f),
        ))
    })
}

unsafe fn alpha(op: &str, alpha: *const aclScalar) -> Result<f64, Fault> {
    Ok(scalar_arg(op, "alpha", alpha)?.as_f64())
}

pub unsafe extern "C" fn aclnnAddGetWorkspaceSize(
    self_: *const aclTensor,
    other: *const aclTensor,
    a: *const aclScalar,
    out: *mut aclTensor,
    ws: Ws,
    ex: Ex,
) -> aclnnStatus {
    match alpha("aclnnAdd", a) {
        Ok(a) => binary(
            "aclnnAdd",
            self_,
            other,
            out,
            kernels::Binary::Add(a),
            ws,
            ex,
        ),
        Err(f) => super::fault::report(f),
    }
}

pub unsafe extern "C" fn aclnnAddsGetWorkspaceSize(
    self_: *const aclTensor,
    other: *const aclScalar,
    a: *const aclScalar,
    out: *mut aclTensor,
    ws: Ws,
    ex: Ex,
) -> aclnnStatus {
    match alpha("aclnnAdds", a) {
        Ok(a) => binary_scalar(
            "aclnnAdds",
            self_,
            other,
            out,
            kernels::Binary::Add(a),
            ws,
            ex,
        ),
        Err(f) => super::fault::report(f),
    }
}

pub unsafe extern "C" fn aclnnSubGetWorkspaceSize(
    self_: *const aclTensor,
    other: *const aclTensor,
    a: *const aclScalar,
    out: *mut aclTensor,
    ws: Ws,
    ex: Ex,
) -> aclnnStatus {
    match alpha("aclnnSub", a) {
        Ok(a) => binary(
            "aclnnSub",
            self_,
            other,
            out,
            kernels::Binary::Add(-a),
            ws,
            ex,
        ),
        Err(f) => super::fault::report(f),
    }
}

pub unsafe extern "C" fn aclnnSubsGetWorkspaceSize(
    self_: *const aclTensor,
    other: *const aclScalar,
    a: *const aclScalar,
    out: *mut aclTensor,
    ws: Ws,
    ex: Ex,
) -> aclnnStatus {
    match alpha("aclnnSubs", a) {
        Ok(a) => binary_scalar(
            "aclnnSubs",
            self_,
            other,
            out,
            kernels::Binary::Add(-a),
            ws,
            ex,
        ),
        Err(f) => super::fault::report(f),
    }
}

pub unsafe extern "C" fn aclnnMulGetWorkspaceSize(
    self_: *const aclTensor,
    other: *const aclTensor,
    out: *mut aclTensor,
    ws: Ws,
    ex: Ex,
) -> aclnnStatus {
    binary("aclnnMul", self_, other, out, kernels::Binary::Mul, ws, ex)
}

pub unsafe extern "C" fn aclnnMulsGetWorkspaceSize(
    self_: *const aclTensor,
    other: *const aclScalar,
    out: *mut aclTensor,
    ws: Ws,
    ex: Ex,
) -> aclnnStatus {
    binary_scalar("aclnnMuls", self_, other, out, kernels::Binary::Mul, ws, ex)
}

pub unsafe extern "C" fn aclnnDivGetWorkspaceSize(
    self_: *const aclTensor,
    other: *const aclTensor,
    out: *mut aclTensor,
    ws: Ws,
    ex: Ex,
) -> aclnnStatus {
    binary(
        "aclnnDiv",
        self_,
        other,
        out,
        kernels::Binary::Div(0),
        ws,
        ex,
    )
}

pub unsafe extern "C" fn aclnnDivsGetWorkspaceSize(
    self_: *const aclTensor,
    other: *const aclScalar,
    out: *mut aclTensor,
    ws: Ws,
    ex: Ex,
) -> aclnnStatus {
    binary_scalar(
        "aclnnDivs",
        self_,
        other,
        out,
        kernels::Binary::Div(0),
        ws,
        ex,
    )
}

fn div_mode(op: &str, mode: c_int) -> Result<c_int, Fault> {
    if (0..=2).contains(&mode) {
        Ok(mode)
    } else {
        Err(invalid(
            op,
            format!("mode {mode} is not 0 (true), 1 (trunc) or 2 (floor)"),
        ))
    }
}

pub unsafe extern "C" fn aclnnDivModGetWorkspaceSize(
    self_: *const aclTensor,
    other: *const aclTensor,
    mode: c_int,
    out: *mut aclTensor,
    ws: Ws,
    ex: Ex,
) -> aclnnStatus {
    match div_mode("aclnnDivMod", mode) {
        Ok(m) => binary(
            "aclnnDivMod",
            self_,
            other,
            out,
            kernels::Binary::Div(m),
            ws,
            ex,
        ),
        Err(f) => super::fault::report(f),
    }
}

pub unsafe extern "C" fn aclnnDivModsGetWorkspaceSize(
    self_: *const aclTensor,
    other: *const aclScalar,
    mode: c_int,
    out: *mut aclTensor,
    ws: Ws,
    ex: Ex,
) -> aclnnStatus {
    match div_mode("aclnnDivMods", mode) {
        Ok(m) => binary_scalar(
            "aclnnDivMods",
            self_,
            other,
            out,
            kernels::Binary::Div(m),
            ws,
            ex,
        ),
        Err(f) => super::fault::report(f),
    }
}

pub unsafe extern "C" fn aclnnMatmulGetWorkspaceSize(
    self_: *const aclTensor,
    mat2: *const aclTensor,
    out: *mut aclTensor,
    cube_math_type: i8,
    ws: Ws,
    ex: Ex,
) -> aclnnStatus {
    const OP: &str = "aclnnMatmul";
    phase1_io(OP, ws, ex, |io| {
        let (a, b, out) = (
            io.input(tensor_arg(OP, "self", self_)?),
            io.input(tensor_arg(OP, "mat2", mat2)?),
            io.output(tensor_arg(OP, "out", out)?),
        );
        for (n, t) in [("self", &a), ("mat2", &b), ("out", &out)] {
            check_dtype(OP, n, t, MATMUL)?;
        }
        if a.dtype != b.dtype {
            return Err(invalid(
                OP,
                format!(
                    "mixed input dtypes {} and {} are not supported on Atlas A2",
                    a.dtype, b.dtype
                ),
            ));
        }
        if !(0..=3).contains(&cube_math_type)
            || (cube_math_type == 2 && a.dtype == BF16)
            || (cube_math_type == 3 && a.dtype != F32)
        {
            return Err(invalid(
                OP,
                format!("cubeMathType {cube_math_type} is not valid for {}", a.dtype),
            ));
        }
        let task = kernels::matmul(OP, a, b, out, cube_math_type)?;
        Ok((SCRATCH_WORKSPACE, task))
    })
}

/// `out = beta * self + alpha * (mat1 @ mat2)` for 2-D `mat1 [m, k]`, `mat2 [k, n]` and
/// `self` broadcastable to `[m, n]`.
pub unsafe extern "C" fn aclnnAddmmGetWorkspaceSize(
    self_: *const aclTensor,
    mat1: *const aclTensor,
    mat2: *const aclTensor,
    beta: *const aclScalar,
    alpha: *const aclScalar,
    out: *mut aclTensor,
    cube_math_type: i8,
    ws: Ws,
    ex: Ex,
) -> aclnnStatus {
    const OP: &str = "aclnnAddmm";
    phase1(OP, ws, ex, || {
        let (c, a, b, out) = (
            tensor_arg(OP, "self", self_)?,
            tensor_arg(OP, "mat1", mat1)?,
            tensor_arg(OP, "mat2", mat2)?,
            tensor_arg(OP, "out", out)?,
        );
        let (beta, alpha) = (
            scalar_arg(OP, "beta", beta)?,
            scalar_arg(OP, "alpha", alpha)?,
        );
        for (n, t) in [("self", &c), ("mat1", &a), ("mat2", &b), ("out", &out)] {
            check_dtype(OP, n, t, MATMUL)?;
        }
        if a.dtype != b.dtype || c.dtype != a.dtype {
            return Err(invalid(
                OP,
                format!(
                    "mixed dtypes {}, {} and {} are not supported on Atlas A2",
                    c.dtype, a.dtype, b.dtype
                ),
            ));
        }
        if a.shape.len() != 2 || b.shape.len() != 2 {
            return Err(invalid(
                OP,
                format!("mat1 {:?} and mat2 {:?} must be 2-D", a.shape, b.shape),
            ));
        }
        if !(0..=3).contains(&cube_math_type) {
            return Err(invalid(
                OP,
                format!("cubeMathType {cube_math_type} is not valid"),
            ));
        }
        let addend = kernels::Addend {
            tensor: c,
            beta: beta.as_f64() as f32,
            alpha: alpha.as_f64() as f32,
        };
        let task = kernels::matmul_add(OP, a, b, out, Some(addend), cube_math_type)?;
        Ok((SCRATCH_WORKSPACE, task))
    })
}

pub unsafe extern "C" fn aclnnReduceSumGetWorkspaceSize(
    self_: *const aclTensor,
    dims: *const aclIntArray,
    keep_dims: bool,
    dtype: i32,
    out: *mut aclTensor,
    ws: Ws,
    ex: Ex,
) -> aclnnStatus {
    const OP: &str = "aclnnReduceSum";
    phase1_io(OP, ws, ex, |io| {
        let (x, out) = (
            io.input(tensor_arg(OP, "self", self_)?),
            io.output(tensor_arg(OP, "out", out)?),
        );
        let dims = int_array_arg(OP, "dims", dims)?;
        check_dtype(OP, "self", &x, REDUCE_SUM)?;
        check_dtype(OP, "out", &out, REDUCE_SUM)?;
        if out.dtype.acl() != dtype {
            return Err(invalid(
                OP,
                format!("dtype {dtype} differs from out dtype {}", out.dtype),
            ));
        }
        if dims.is_empty() {
            // What an empty list means is not documented; callers pass explicit dims.
            return Err(invalid(OP, "dims is empty"));
        }
        let task =
            super::reduce::reduce_dims(OP, x, &dims, keep_dims, out, super::reduce::Fold::Sum)?;
        Ok((SCRATCH_WORKSPACE, task))
    })
}

pub unsafe extern "C" fn aclnnCatGetWorkspaceSize(
    tensors: *const aclTensorList,
    dim: i64,
    out: *mut aclTensor,
    ws: Ws,
    ex: Ex,
) -> aclnnStatus {
    const OP: &str = "aclnnCat";
    phase1(OP, ws, ex, || {
        let inputs = tensor_list_arg(OP, "tensors", tensors)?;
        let out = tensor_arg(OP, "out", out)?;
        check_dtype(OP, "out", &out, CAT)?;
        for (i, t) in inputs.iter().enumerate() {
            check_dtype(OP, &format!("tensors[{i}]"), t, CAT)?;
        }
        Ok((0, kernels::cat(OP, inputs, dim, out)?))
    })
}

pub unsafe extern "C" fn aclnnFlipGetWorkspaceSize(
    self_: *const aclTensor,
    dims: *const aclIntArray,
    out: *mut aclTensor,
    ws: Ws,
    ex: Ex,
) -> aclnnStatus {
    const OP: &str = "aclnnFlip";
    phase1(OP, ws, ex, || {
        let (x, out) = (tensor_arg(OP, "self", self_)?, tensor_arg(OP, "out", out)?);
        let dims = int_array_arg(OP, "dims", dims)?;
        check_dtype(OP, "self", &x, FLIP)?;
        check_dtype(OP, "out", &out, FLIP)?;
        Ok((0, kernels::flip(OP, x, &dims, out)?))
    })
}
