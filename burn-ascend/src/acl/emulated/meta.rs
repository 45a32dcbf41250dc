//! The aclnn object layer of the emulated runtime: tensor, scalar, int-array and tensor-list
//! descriptors, and executors (the product of phase one of an operator call).

use std::ffi::c_void;

use super::fault::{fault, Fault};
use super::stream::Task;
use crate::acl::dtype::DataType;
pub(crate) use crate::acl::shape::contiguous_strides;
use crate::acl::types::status::*;
use crate::acl::types::*;

/// Highest rank aclnn operators accept.
pub(crate) const MAX_RANK: usize = 8;

/// What `aclCreateTensor` captured. Strides and offset are in elements.
#[derive(Debug, Clone)]
pub(crate) struct TensorDesc {
    pub shape: Vec<usize>,
    pub strides: Vec<usize>,
    pub offset: usize,
    pub dtype: DataType,
    pub addr: u64,
}

impl TensorDesc {
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    pub fn is_contiguous(&self) -> bool {
        crate::acl::shape::is_contiguous(&self.shape, &self.strides)
    }

    /// One past the highest storage element the view reaches.
    pub fn extent(&self) -> usize {
        crate::acl::shape::extent(&self.shape, &self.strides, self.offset)
    }

    pub fn describe(&self) -> String {
        format!("{:?} {}", self.shape, self.dtype)
    }
}

/// A host scalar as `aclCreateScalar` copied it.
#[derive(Debug, Clone, Copy)]
pub(crate) enum ScalarValue {
    Float(f64),
    Int(i64),
}

impl ScalarValue {
    pub fn as_f64(self) -> f64 {
        match self {
            ScalarValue::Float(v) => v,
            ScalarValue::Int(v) => v as f64,
        }
    }
}

pub(crate) struct TensorList(pub Vec<*mut aclTensor>);

/// A validated operator launch waiting for phase two.
pub(crate) struct Executor {
    pub op: &'static str,
    pub workspace: u64,
    pub task: Task,
    /// Global-memory bytes of its tensor arguments (the work counters' model).
    pub bytes: u64,
}

#[allow(clippy::too_many_arguments)] // mirrors aclCreateTensor
pub(crate) unsafe fn create_tensor(
    dims: *const i64,
    ndims: u64,
    dtype: i32,
    strides: *const i64,
    offset: i64,
    storage: *const i64,
    nstorage: u64,
    data: *mut c_void,
) -> Result<TensorDesc, Fault> {
    let bad = |m: String| fault(ACLNN_ERR_PARAM_INVALID, format!("aclCreateTensor: {m}"));
    let read = |p: *const i64, n: u64, what: &str| -> Result<Vec<i64>, Fault> {
        if n == 0 {
            Ok(Vec::new())
        } else if p.is_null() {
            Err(fault(
                ACLNN_ERR_PARAM_NULLPTR,
                format!("aclCreateTensor: {what} is NULL with {n} dims"),
            ))
        } else {
            Ok(std::slice::from_raw_parts(p, n as usize).to_vec())
        }
    };
    let dtype =
        DataType::from_acl(dtype).ok_or_else(|| bad(format!("unsupported aclDataType {dtype}")))?;
    let shape = read(dims, ndims, "viewDims")?;
    if shape.len() > MAX_RANK {
        return Err(bad(format!("rank {} exceeds {MAX_RANK}", shape.len())));
    }
    if let Some(d) = shape.iter().find(|&&d| d < 0) {
        return Err(bad(format!("negative dimension {d} in {shape:?}")));
    }
    let shape: Vec<usize> = shape.into_iter().map(|d| d as usize).collect();
    let strides: Vec<usize> = if strides.is_null() {
        contiguous_strides(&shape)
    } else {
        let s = std::slice::from_raw_parts(strides, shape.len()).to_vec();
        if let Some(n) = s.iter().find(|&&s| s < 0) {
            return Err(bad(format!(
                "negative stride {n} in {s:?}: aclnn views do not support negative strides"
            )));
        }
        s.into_iter().map(|s| s as usize).collect()
    };
    if offset < 0 {
        return Err(bad(format!("negative offset {offset}")));
    }
    let storage = read(storage, nstorage, "storageDims")?;
    let storage_elems = storage.iter().map(|&d| d.max(0) as usize).product();
    let desc = TensorDesc {
        shape,
        strides,
        offset: offset as usize,
        dtype,
        addr: data as u64,
    };
    if desc.numel() > 0 && desc.extent() > storage_elems {
        return Err(bad(format!(
            "view (shape {:?}, strides {:?}, offset {}) reaches element {} but storage holds {storage_elems}",
            desc.shape,
            desc.strides,
            desc.offset,
            desc.extent() - 1
        )));
    }
    if !desc.addr.is_multiple_of(32) {
        return Err(bad(format!(
            "tensor data address 0x{:x} is not 32-byte aligned",
            desc.addr
        )));
    }
    Ok(desc)
}

pub(crate) unsafe fn create_scalar(value: *mut c_void, dtype: i32) -> Result<ScalarValue, Fault> {
    if value.is_null() {
        return Err(fault(
            ACLNN_ERR_PARAM_NULLPTR,
            "aclCreateScalar: value is NULL",
        ));
    }
    let v = value as *const u8;
    Ok(match DataType::from_acl(dtype) {
        Some(DataType::F64) => ScalarValue::Float(*(v as *const f64)),
        Some(DataType::F32) => ScalarValue::Float(*(v as *const f32) as f64),
        Some(DataType::F16) => ScalarValue::Float(half::f16::from_bits(*(v as *const u16)).into()),
        Some(DataType::BF16) => {
            ScalarValue::Float(half::bf16::from_bits(*(v as *const u16)).into())
        }
        Some(DataType::I64) | Some(DataType::U64) => ScalarValue::Int(*(v as *const i64)),
        Some(DataType::I32) => ScalarValue::Int(*(v as *const i32) as i64),
        Some(DataType::I16) => ScalarValue::Int(*(v as *const i16) as i64),
        Some(DataType::I8) => ScalarValue::Int(*(v as *const i8) as i64),
        Some(DataType::U32) => ScalarValue::Int(*(v as *const u32) as i64),
        Some(DataType::U16) => ScalarValue::Int(*(v as *const u16) as i64),
        Some(DataType::U8) | Some(DataType::Bool) => ScalarValue::Int(*v as i64),
        None => {
            return Err(fault(
                ACLNN_ERR_PARAM_INVALID,
                format!("aclCreateScalar: unsupported aclDataType {dtype}"),
            ))
        }
    })
}

/// Borrows a descriptor passed to an operator.
pub(crate) unsafe fn tensor_arg(
    op: &str,
    name: &str,
    p: *const aclTensor,
) -> Result<TensorDesc, Fault> {
    if p.is_null() {
        return Err(fault(
            ACLNN_ERR_PARAM_NULLPTR,
            format!("{op}: {name} is NULL"),
        ));
    }
    let desc = (*(p as *const TensorDesc)).clone();
    if desc.addr == 0 && desc.numel() > 0 {
        return Err(fault(
            ACLNN_ERR_PARAM_NULLPTR,
            format!("{op}: {name} has no device address"),
        ));
    }
    super::counters::note(&desc);
    Ok(desc)
}

pub(crate) unsafe fn scalar_arg(
    op: &str,
    name: &str,
    p: *const aclScalar,
) -> Result<ScalarValue, Fault> {
    if p.is_null() {
        return Err(fault(
            ACLNN_ERR_PARAM_NULLPTR,
            format!("{op}: {name} is NULL"),
        ));
    }
    Ok(*(p as *const ScalarValue))
}

pub(crate) unsafe fn int_array_arg(
    op: &str,
    name: &str,
    p: *const aclIntArray,
) -> Result<Vec<i64>, Fault> {
    if p.is_null() {
        return Err(fault(
            ACLNN_ERR_PARAM_NULLPTR,
            format!("{op}: {name} is NULL"),
        ));
    }
    Ok((*(p as *const Vec<i64>)).clone())
}

pub(crate) unsafe fn bool_array_arg(
    op: &str,
    name: &str,
    p: *const aclBoolArray,
) -> Result<Vec<bool>, Fault> {
    if p.is_null() {
        return Err(fault(
            ACLNN_ERR_PARAM_NULLPTR,
            format!("{op}: {name} is NULL"),
        ));
    }
    Ok((*(p as *const Vec<bool>)).clone())
}

pub(crate) unsafe fn tensor_list_arg(
    op: &str,
    name: &str,
    p: *const aclTensorList,
) -> Result<Vec<TensorDesc>, Fault> {
    if p.is_null() {
        return Err(fault(
            ACLNN_ERR_PARAM_NULLPTR,
            format!("{op}: {name} is NULL"),
        ));
    }
    (*(p as *const TensorList))
        .0
        .iter()
        .enumerate()
        .map(|(i, &t)| tensor_arg(op, &format!("{name}[{i}]"), t))
        .collect()
}
