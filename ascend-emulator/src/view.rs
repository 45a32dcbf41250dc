//! How emulated kernels touch device memory: a descriptor is mapped to its allocation when the
//! kernel runs (so stale, freed or out-of-range views fault there, as on hardware), then read
//! into a host vector (floats widened to f64, integers and bools to i64) or written back with
//! the element type's own rounding and wrapping.

use std::sync::Arc;

use half::{bf16, f16};

use super::fault::{fault, Fault};
use super::machine::machine;
use super::memory::Block;
use super::meta::TensorDesc;
use ascend_acl::dtype::DataType;
pub(crate) use ascend_acl::shape::broadcast_dims as broadcast_shape;
use ascend_acl::types::status::*;

/// Element values of a view, in row-major order of its shape.
#[derive(Debug, Clone)]
pub(crate) enum Vals {
    F(Vec<f64>),
    I(Vec<i64>),
}

impl Vals {
    pub fn len(&self) -> usize {
        match self {
            Vals::F(v) => v.len(),
            Vals::I(v) => v.len(),
        }
    }

    pub fn into_f64(self) -> Vec<f64> {
        match self {
            Vals::F(v) => v,
            Vals::I(v) => v.into_iter().map(|x| x as f64).collect(),
        }
    }

    pub fn into_i64(self) -> Vec<i64> {
        match self {
            Vals::I(v) => v,
            Vals::F(v) => v.into_iter().map(float_to_int).collect(),
        }
    }
}

/// Float to integer as aclnnCast does it: toward zero, saturating, NaN to 0.
pub(crate) fn float_to_int(x: f64) -> i64 {
    x as i64
}

/// Rounds `v` to the precision of a float type (identity for integer types).
pub(crate) fn round_to(dtype: DataType, v: f64) -> f64 {
    match dtype {
        DataType::F32 => v as f32 as f64,
        DataType::F16 => f16::from_f64(v).to_f64(),
        DataType::BF16 => bf16::from_f64(v).to_f64(),
        _ => v,
    }
}

/// A descriptor whose storage has been located in emulated HBM.
pub(crate) struct Mapped {
    /// `None` for an empty view, which touches no memory.
    block: Option<Arc<Block>>,
    start: usize,
    pub desc: TensorDesc,
}

/// Maps a view for a kernel of `op`; faults name the op and the argument.
pub(crate) fn map(op: &str, name: &str, desc: &TensorDesc) -> Result<Mapped, Fault> {
    let es = desc.dtype.size();
    let bytes = desc.extent() * es;
    if desc.numel() == 0 {
        return Ok(Mapped {
            block: None,
            start: 0,
            desc: desc.clone(),
        });
    }
    let addr = desc.device_addr();
    let npu = machine().npu_of(addr).ok_or_else(|| {
        fault(
            ACL_ERROR_RT_AICORE_EXCEPTION,
            format!("{op}: {name} points at 0x{addr:x}, which is not device memory"),
        )
    })?;
    let (block, start) = npu.memory.resolve(addr, bytes).map_err(|f| Fault {
        code: f.code,
        message: format!("{op}: {name} {}: {}", desc.describe(), f.message),
    })?;
    Ok(Mapped {
        block: Some(block),
        start,
        desc: desc.clone(),
    })
}

/// Element offsets of a (shape, strides, offset) view in row-major order.
pub(crate) fn offsets(shape: &[usize], strides: &[usize], offset: usize) -> Vec<usize> {
    let mut out = Vec::with_capacity(shape.iter().product());
    for_offsets(shape, strides, offset, |o| out.push(o));
    out
}

/// Calls `f` with each element offset of a view in row-major order, without holding an index
/// per element (kernels stream over views of any size).
pub(crate) fn for_offsets(
    shape: &[usize],
    strides: &[usize],
    offset: usize,
    mut f: impl FnMut(usize),
) {
    let n: usize = shape.iter().product();
    if n == 0 {
        return;
    }
    let rank = shape.len();
    if rank == 0 || ascend_acl::shape::is_contiguous(shape, strides) {
        (offset..offset + n).for_each(f);
        return;
    }
    let (inner, inner_stride) = (shape[rank - 1], strides[rank - 1]);
    let mut idx = vec![0usize; rank];
    let mut base = offset;
    loop {
        (0..inner).for_each(|i| f(base + i * inner_stride));
        let mut d = rank - 1;
        loop {
            if d == 0 {
                return;
            }
            d -= 1;
            idx[d] += 1;
            base += strides[d];
            if idx[d] < shape[d] {
                break;
            }
            base -= strides[d] * shape[d];
            idx[d] = 0;
        }
    }
}

/// Strides that read `shape` broadcast to `target` (right-aligned, stride 0 where broadcast).
pub(crate) fn broadcast_strides(
    shape: &[usize],
    strides: &[usize],
    target: &[usize],
) -> Option<Vec<usize>> {
    if shape.len() > target.len() {
        return None;
    }
    let lead = target.len() - shape.len();
    let mut out = vec![0; target.len()];
    for i in 0..shape.len() {
        let (s, t) = (shape[i], target[lead + i]);
        out[lead + i] = if s == t {
            strides[i]
        } else if s == 1 {
            0
        } else {
            return None;
        };
    }
    Some(out)
}

macro_rules! load {
    ($ptr:expr, $t:ty) => {
        ($ptr as *const $t).read_unaligned()
    };
}

impl Mapped {
    fn ptr(&self, elem: usize) -> *mut u8 {
        let block = self.block.as_ref().expect("an empty view has no elements");
        block.host_ptr(self.start + elem * self.desc.dtype.size())
    }

    /// The elements of a (shape, strides) view of this allocation, each through `load`.
    fn gather<T>(
        &self,
        shape: &[usize],
        strides: &[usize],
        load: impl Fn(*const u8) -> T,
    ) -> Vec<T> {
        let mut out = Vec::with_capacity(shape.iter().product());
        for_offsets(shape, strides, self.desc.offset, |o| {
            out.push(load(self.ptr(o)))
        });
        out
    }

    /// Reads the view broadcast to `target` (its own shape if `None`).
    pub fn read(&self, target: Option<&[usize]>) -> Result<Vals, Fault> {
        let d = &self.desc;
        let (shape, strides) = match target {
            None => (d.shape.clone(), d.strides.clone()),
            Some(t) => {
                let s = broadcast_strides(&d.shape, &d.strides, t).ok_or_else(|| {
                    fault(
                        ACLNN_ERR_PARAM_INVALID,
                        format!("shape {:?} does not broadcast to {t:?}", d.shape),
                    )
                })?;
                (t.to_vec(), s)
            }
        };
        // SAFETY: `map` checked that every offset of the view lies inside the allocation.
        Ok(match d.dtype {
            DataType::F64 => Vals::F(self.gather(&shape, &strides, |p| unsafe { load!(p, f64) })),
            DataType::F32 => {
                Vals::F(self.gather(&shape, &strides, |p| unsafe { load!(p, f32) } as f64))
            }
            DataType::F16 => Vals::F(self.gather(&shape, &strides, |p| {
                f16::from_bits(unsafe { load!(p, u16) }).to_f64()
            })),
            DataType::BF16 => Vals::F(self.gather(&shape, &strides, |p| {
                bf16::from_bits(unsafe { load!(p, u16) }).to_f64()
            })),
            DataType::I64 | DataType::U64 => {
                Vals::I(self.gather(&shape, &strides, |p| unsafe { load!(p, i64) }))
            }
            DataType::I32 => {
                Vals::I(self.gather(&shape, &strides, |p| unsafe { load!(p, i32) } as i64))
            }
            DataType::I16 => {
                Vals::I(self.gather(&shape, &strides, |p| unsafe { load!(p, i16) } as i64))
            }
            DataType::I8 => {
                Vals::I(self.gather(&shape, &strides, |p| unsafe { load!(p, i8) } as i64))
            }
            DataType::U32 => {
                Vals::I(self.gather(&shape, &strides, |p| unsafe { load!(p, u32) } as i64))
            }
            DataType::U16 => {
                Vals::I(self.gather(&shape, &strides, |p| unsafe { load!(p, u16) } as i64))
            }
            DataType::U8 => Vals::I(self.gather(&shape, &strides, |p| unsafe { *p } as i64)),
            DataType::Bool => {
                Vals::I(self.gather(&shape, &strides, |p| (unsafe { *p } != 0) as i64))
            }
        })
    }

    /// Writes `vals` (row-major over the view's shape), converting to the view's type.
    pub fn write(&self, vals: Vals) -> Result<(), Fault> {
        let d = &self.desc;
        assert_eq!(
            d.numel(),
            vals.len(),
            "kernel produced the wrong element count"
        );
        macro_rules! store {
            ($conv:expr, $t:ty) => {
                match vals {
                    Vals::F(v) => {
                        let mut v = v.into_iter();
                        for_offsets(&d.shape, &d.strides, d.offset, |o| {
                            let x = v.next().expect("counted");
                            (self.ptr(o) as *mut $t).write_unaligned($conv(Num::F(x)));
                        });
                    }
                    Vals::I(v) => {
                        let mut v = v.into_iter();
                        for_offsets(&d.shape, &d.strides, d.offset, |o| {
                            let x = v.next().expect("counted");
                            (self.ptr(o) as *mut $t).write_unaligned($conv(Num::I(x)));
                        });
                    }
                }
            };
        }
        // SAFETY: `map` checked the view's range.
        unsafe {
            match d.dtype {
                DataType::F64 => store!(|n: Num| n.f(), f64),
                DataType::F32 => store!(|n: Num| n.f() as f32, f32),
                DataType::F16 => store!(|n: Num| f16::from_f64(n.f()).to_bits(), u16),
                DataType::BF16 => store!(|n: Num| bf16::from_f64(n.f()).to_bits(), u16),
                DataType::I64 | DataType::U64 => store!(|n: Num| n.i(), i64),
                DataType::I32 => store!(|n: Num| n.i() as i32, i32),
                DataType::I16 => store!(|n: Num| n.i() as i16, i16),
                DataType::I8 => store!(|n: Num| n.i() as i8, i8),
                DataType::U32 => store!(|n: Num| n.i() as u32, u32),
                DataType::U16 => store!(|n: Num| n.i() as u16, u16),
                DataType::U8 => store!(|n: Num| n.i() as u8, u8),
                DataType::Bool => store!(|n: Num| n.truthy() as u8, u8),
            }
        }
        Ok(())
    }
}

/// One element on its way to memory.
#[derive(Clone, Copy)]
enum Num {
    F(f64),
    I(i64),
}

impl Num {
    fn f(self) -> f64 {
        match self {
            Num::F(x) => x,
            Num::I(x) => x as f64,
        }
    }
    fn i(self) -> i64 {
        match self {
            Num::F(x) => float_to_int(x),
            Num::I(x) => x,
        }
    }
    fn truthy(self) -> bool {
        match self {
            Num::F(x) => x != 0.0,
            Num::I(x) => x != 0,
        }
    }
}
