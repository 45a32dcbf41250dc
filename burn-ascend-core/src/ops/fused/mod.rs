//! The fused operations on the device, through the Ascend C kernels of
//! `burn-ascend-kernels`: shape and dtype checks before launch, tiling from the device's
//! properties, then the launch on the context's stream. Grouped matmul, RMS norm and CANN's own
//! MoE routing ops (the baselines of our kernels) go through aclnn operators instead. One module
//! per op family; this one holds what they share.

mod elementwise;
mod extend;
mod gating;
mod grouped;
mod moe;
mod norm;
mod paged;
mod prefill;
pub mod preflight;
mod program;
mod quant;
mod rms_norm;
mod rope;
mod routing;
mod swiglu;

use std::ffi::c_void;
use std::sync::Arc;

use burn_ascend_kernels::tiling::{DeviceProps, NormType, SOCS};

pub use elementwise::check_vector_add;
pub use elementwise::vector_add;
pub use extend::check_extend_attention;
pub use extend::{extend_attention, extend_attention_plan, ExtendLens};
pub use gating::{check_moe_gating_softmax, check_moe_group_topk, gating_available, gating_fits};
pub use gating::{moe_gating_softmax, moe_group_topk, Gating, GroupTopk, GROUP_TOPK_MAX_EXPERTS};
pub use grouped::grouped_matmul_covered;
pub use grouped::{check_grouped_matmul, check_grouped_matmul_weight_grad};
pub use grouped::{grouped_matmul, grouped_matmul_available, grouped_matmul_weight_grad};
pub use moe::{check_moe_gather, check_moe_scatter, check_token_rearrange};
pub use moe::{moe_gather, moe_scatter, token_rearrange};
pub use norm::{check_layer_norm, check_layer_norm_backward};
pub use norm::{layer_norm, layer_norm_backward};
pub use paged::{
    alloc_extend, decode_attention, decode_attention_plan, kv_cache_write, CachePart,
    DecodeAttentionOptions, DecodeAttentionTensors, DecodePath,
};
pub use paged::{check_alloc_extend, check_decode_attention, check_kv_cache_write, DecodeDims};
pub use prefill::check_paged_prefill_attention;
pub use prefill::{
    paged_prefill_attention, paged_prefill_missing, paged_prefill_refusal, CAUSAL_MASK_SIDE,
};
pub use program::run_program;
pub use quant::{
    check_grouped_matmul_antiquant, check_grouped_matmul_quant, check_moe_init_routing_quant,
};
pub use quant::{
    grouped_matmul_antiquant, grouped_matmul_quant, moe_init_routing_quant, QuantRouting,
};
pub use rms_norm::{add_rms_norm, rms_norm, rms_norm_backward};
pub use rms_norm::{check_add_rms_norm, check_rms_norm, check_rms_norm_backward};
pub use rope::{check_rotary_embedding, rope_available, rope_fits, rotary_embedding};
pub use routing::{cann_moe_init_routing, cann_moe_token_unpermute, CannRouting};
pub use routing::{
    check_moe_permute, check_moe_unpermute, moe_permute_available, moe_permute_fits,
};
pub use routing::{
    moe_finalize_available, moe_permute, moe_unpermute, moe_unpermute_add, Permuted,
};
pub use swiglu::{check_swiglu, swiglu, swiglu_available, swiglu_fits};

use super::broadcast::invalid_input;
use super::tensor::AscendTensor;
use crate::acl::{AclError, AclResult, DataType};
use crate::runtime::DeviceContext;

/// What a fused op's contract reads of an operand: its shape and dtype. The contracts
/// (`check_*`) take operands through it, so `Ascend` checks them at the call and
/// `Fusion<Ascend>` when it records the op, with the same code and messages.
pub trait Operand {
    /// The shape.
    fn dims(&self) -> &[usize];
    /// The element type.
    fn data_type(&self) -> DataType;
    /// Shape and dtype, for error messages.
    fn describe(&self) -> String {
        format!("{:?} {}", self.dims(), self.data_type())
    }
}

impl Operand for AscendTensor {
    fn dims(&self) -> &[usize] {
        self.shape()
    }

    fn data_type(&self) -> DataType {
        self.dtype
    }
}

/// Unified buffer per vector core on Atlas A2 (CANN 8.x has no query for it; see the hardware
/// fact sheet).
const UB_BYTES: u32 = 192 << 10;

/// The properties tiling depends on: the device's SoC's (cube cores and clock: the ACL table
/// the backend loads has no query for the cube cores, `ACL_DEV_ATTR_CUBE_CORE_NUM` needs CANN
/// 8.5's aclrtGetDeviceInfo, acl-abi.md; nor has CANN one for the bandwidths), with the vector
/// cores the device reports.
pub(crate) fn device_props(ctx: &Arc<DeviceContext>) -> AclResult<DeviceProps> {
    let soc = ctx.soc_name();
    let props = soc.and_then(DeviceProps::for_soc).ok_or_else(|| {
        AclError::Library(format!(
            "the fused kernels are tiled for the Atlas A2/A3 SoCs ({}), but {} is {}",
            SOCS.iter().map(|s| s.name).collect::<Vec<_>>().join(", "),
            ctx.device(),
            soc.map_or(
                "of unknown SoC (aclrtGetSocName gave NULL)".to_string(),
                |s| format!("an {s}")
            )
        ))
    })?;
    Ok(DeviceProps {
        vector_cores: ctx.vector_cores()?,
        ub_bytes: UB_BYTES,
        ..props
    })
}

/// Device address of the first element of a contiguous tensor.
pub(crate) fn data_ptr(t: &AscendTensor) -> *mut c_void {
    debug_assert!(t.layout.is_contiguous());
    // SAFETY: the offset stays inside the storage (the layout's invariant).
    unsafe { (t.storage_ptr() as *mut u8).add(t.layout.offset * t.dtype.size()) as *mut c_void }
}

/// Every operand of a fused op lives on one device: a kernel reads and writes the memory of
/// the device it runs on only. The error names the op and both devices (or, for an operand
/// made before its device was reset, that reset).
pub(crate) fn same_device(op: &str, operands: &[Option<&AscendTensor>]) -> AclResult<()> {
    let mut present = operands.iter().flatten();
    let Some(first) = present.next() else {
        return Ok(());
    };
    match present.find(|t| !Arc::ptr_eq(t.ctx(), first.ctx())) {
        None => Ok(()),
        Some(other) => {
            // One made before a reset of its device: that, not the move, is what to say.
            first.ctx().check_alive()?;
            other.ctx().check_alive()?;
            Err(invalid_input(
                op,
                format!(
                    "its operands live on different devices: {} on {} and {} on {}; move them to \
                     one device with to_device first",
                    first.describe(),
                    first.ctx().device(),
                    other.describe(),
                    other.ctx().device()
                ),
            ))
        }
    }
}

/// The kernels' code for a float type, if they take it.
pub(crate) fn kernel_float(dtype: DataType) -> Option<NormType> {
    match dtype {
        DataType::F32 => Some(NormType::F32),
        DataType::F16 => Some(NormType::F16),
        DataType::BF16 => Some(NormType::BF16),
        _ => None,
    }
}

/// The kernels' code for a float type.
pub(crate) fn norm_type(op: &str, t: &impl Operand) -> AclResult<NormType> {
    kernel_float(t.data_type())
        .ok_or_else(|| invalid_input(op, format!("takes f32, f16 or bf16, got {}", t.describe())))
}

/// `(rows, cols)` of a norm's input `name`: a float tensor of at least one dim; the rows are the
/// product of the leading dims, also when there are no columns.
pub(crate) fn norm_rows(op: &str, name: &str, x: &impl Operand) -> AclResult<(usize, usize)> {
    norm_type(op, x)?;
    let (cols, leading) = x
        .dims()
        .split_last()
        .ok_or_else(|| invalid_input(op, format!("{name} must have at least one dim")))?;
    Ok((leading.iter().product(), *cols))
}

/// Whether `op`'s kernels run their costly device-side checks (`BURN_ASCEND_VALIDATE`); a value
/// the switch does not understand is an error of the op, naming the variable.
pub fn validation(op: &str) -> AclResult<bool> {
    burn_ascend_kernels::checks::validation().map_err(|reason| invalid_input(op, reason))
}

/// Checks an index tensor: 1-D, `len` entries, int32 (or int64 when allowed).
pub(crate) fn check_index(
    op: &str,
    name: &str,
    t: &impl Operand,
    len: usize,
    int64_ok: bool,
) -> AclResult<()> {
    let dtype = t.data_type();
    let ok_type = dtype == DataType::I32 || (int64_ok && dtype == DataType::I64);
    if t.dims() != [len] || !ok_type {
        let types = if int64_ok { "int32 or int64" } else { "int32" };
        return Err(invalid_input(
            op,
            format!("{name} must be [{len}] {types}, got {}", t.describe()),
        ));
    }
    Ok(())
}
