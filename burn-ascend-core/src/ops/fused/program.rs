//! Element-wise programs through the interpreted `elementwise_program` kernel: operand layout
//! on the grid, tiling, the program upload and the launch.

use burn_ascend_kernels::program::{grid, ElemType, InputPlacement, OperandView, Program};
use burn_ascend_kernels::tiling;

use super::{data_ptr, device_props};
use crate::acl::{AclResult, DataType};
use crate::ops::broadcast::invalid_input;
use crate::ops::copy::contiguous;
use crate::ops::tensor::AscendTensor;

/// The device dtype of a program element type.
pub fn data_type(t: ElemType) -> DataType {
    match t {
        ElemType::F32 => DataType::F32,
        ElemType::F16 => DataType::F16,
        ElemType::BF16 => DataType::BF16,
        ElemType::Bool => DataType::Bool,
    }
}

/// Runs `program` once over `shape`: `inputs` (one per program input, in order; each of
/// `shape`'s rank with dims equal to it or 1, any strides) are read once, and the outputs are
/// fresh contiguous tensors of `shape`, one per program output, of its dtype.
pub fn run_program(
    program: &Program,
    inputs: &[AscendTensor],
    shape: &[usize],
) -> AclResult<Vec<AscendTensor>> {
    let op = "elementwise_program";
    let compiled = program
        .compile()
        .map_err(|e| invalid_input(op, e.to_string()))?;
    let Some(first) = inputs.first() else {
        return Err(invalid_input(
            op,
            "a program reads at least one input".into(),
        ));
    };
    let ctx = first.ctx().clone();
    super::same_device(op, &inputs.iter().map(Some).collect::<Vec<_>>())?;
    for (t, want) in inputs.iter().zip(compiled.input_types()) {
        let fits = t.shape().len() == shape.len()
            && t.shape().iter().zip(shape).all(|(&a, &b)| a == b || a == 1);
        if t.dtype != data_type(want) || !fits {
            return Err(invalid_input(
                op,
                format!(
                    "input {} does not match the program ({:?}, broadcast to {shape:?})",
                    t.describe(),
                    want
                ),
            ));
        }
    }
    let outputs = compiled
        .output_types()
        .map(|t| AscendTensor::empty(&ctx, shape.to_vec(), data_type(t)))
        .collect::<AclResult<Vec<_>>>()?;
    let numel: usize = shape.iter().product();
    if numel == 0 {
        return Ok(outputs);
    }
    if numel > u32::MAX as usize {
        return Err(invalid_input(
            op,
            format!("{shape:?} has more elements than a program addresses"),
        ));
    }
    // Inputs read with a stride other than 0 or 1 along the row are made contiguous first.
    let mut inputs = inputs.to_vec();
    let layout = loop {
        let views: Vec<OperandView> = inputs
            .iter()
            .map(|t| OperandView {
                shape: t.shape().to_vec(),
                strides: t.layout.strides.iter().map(|&s| s as i64).collect(),
                offset: t.layout.offset as u64,
            })
            .collect();
        match grid(shape, &views) {
            Ok(g) => break g,
            Err(i) if !inputs[i].layout.is_contiguous() => inputs[i] = contiguous(&inputs[i])?,
            Err(i) => {
                return Err(invalid_input(
                    op,
                    format!("cannot lay {} out over {shape:?}", inputs[i].describe()),
                ))
            }
        }
    };
    let plan =
        tiling::elementwise_program(&compiled, &layout, &device_props(&ctx)?).ok_or_else(|| {
            invalid_input(
                op,
                format!("{} registers leave no room for a tile", compiled.regs()),
            )
        })?;
    let placements: Vec<InputPlacement> = inputs
        .iter()
        .zip(&layout.inputs)
        .map(|(t, (mode, offset, strides))| InputPlacement {
            addr: t.storage_ptr() as u64,
            offset: *offset,
            mode: *mode,
            outer_strides: strides.clone(),
        })
        .collect();
    let out_addrs: Vec<u64> = outputs.iter().map(|t| data_ptr(t) as u64).collect();
    let words = compiled.encode(&placements, &out_addrs);
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    let code = ctx.alloc(bytes.len())?;
    ctx.upload(&code, &bytes)?;
    let code_ptr = code.ptr();
    // SAFETY: the program names the inputs' storages (held by `inputs` until this returns and
    // then freed in stream order), the outputs (held by the caller) and `code`, which goes
    // back to the allocator in stream order after the kernel.
    ctx.launch_kernel(op, |kernels, stream| unsafe {
        kernels.elementwise_program(stream, plan, code_ptr)
    })
    .map_err(|e| {
        e.with_context(|| {
            let ins: Vec<String> = inputs.iter().map(|t| t.describe()).collect();
            format!(
                "{op} of {} instructions over {}",
                compiled.len(),
                ins.join(", ")
            )
        })
    })?;
    drop(code);
    Ok(outputs)
}
