//! The launch table: the `aclrtlaunch_<kernel>` entry points of a kernel library opened at run
//! time ([`crate::library`]), typed from one list (`kernel_function_list!`) as the ACL table
//! is, and safe launchers over it that check the launch status.
//!
//! CANN generates each entry point from the kernel's signature (`ascendc_library`): `uint32_t
//! aclrtlaunch_<kernel>(uint32_t blockDim, aclrtStream stream, void* <gm>..., Tiling* tiling)`,
//! the tiling struct passed by host pointer and copied into the launch (ascendc-api.md §1.2);
//! the emulated library's generated stubs have the same prototypes. A launch queues the kernel
//! on `stream` in order with the other work on it and returns; errors raised while the kernel
//! runs are reported by the stream's next synchronisation.

use std::ffi::c_void;

use ascend_acl::table::SymbolSource;

use crate::tiling::{
    AllocExtendTiling, DecodePlan, DecodeScoresTiling, DecodeSoftmaxTiling, DecodeStage1,
    DecodeStage1Tiling, DecodeStage2Tiling, DecodeValuesTiling, ElementwiseTiling, ExtendKernels,
    ExtendPlan, ExtendScoresTiling, ExtendSoftmaxTiling, ExtendValuesTiling, KvCacheWriteTiling,
    LayerNormBackwardTiling, LayerNormTiling, MoeGroupTopkTiling, MoeInverseTiling,
    MoeScatterTiling, Plan, RowGatherTiling, VectorAddTiling,
};

/// Calls `$callback!` with every kernel: its name, its global-memory parameters in order, and
/// its tiling struct (the Rust mirror; the kernel source names it `Burn<Tiling>`).
#[macro_export]
#[doc(hidden)]
macro_rules! kernel_function_list {
    ($callback:ident) => {
        $callback! {
            elementwise_program(program; ElementwiseTiling);
            vector_add(x, y, z; VectorAddTiling);
            moe_gather(x, indices, out; RowGatherTiling);
            token_rearrange(x, perm, out; RowGatherTiling);
            moe_scatter_inverse(indices, inv; MoeInverseTiling);
            moe_scatter(y, inv, weights, out; MoeScatterTiling);
            moe_group_topk(logits, bias, scores, weights, ids; MoeGroupTopkTiling);
            alloc_extend(prefix_lens, seq_lens, last_loc, free_pages, out_slots, totals; AllocExtendTiling);
            kv_cache_write(slots, k, v, k_cache, v_cache; KvCacheWriteTiling);
            decode_attention_stage1(q, k, v, indptr, kv_indices, splits, part_out, part_lse; DecodeStage1Tiling);
            decode_attention_stage2(part_out, part_lse, out, lse; DecodeStage2Tiling);
            decode_attention_scores(q, k, indptr, kv_indices, splits, scores; DecodeScoresTiling);
            decode_attention_softmax(indptr, splits, scores, probs, part_out, part_lse; DecodeSoftmaxTiling);
            decode_attention_values(values, indptr, kv_indices, splits, probs, part_out; DecodeValuesTiling);
            extend_attention_scores(q, k, table, lens, scores; ExtendScoresTiling);
            extend_attention_softmax(lens, scores, probs, stats, acc, pv, out; ExtendSoftmaxTiling);
            extend_attention_values(values, table, lens, probs, pv; ExtendValuesTiling);
            layer_norm(x, gamma, beta, y, mean, rstd; LayerNormTiling);
            layer_norm_backward(dy, x, mean, rstd, gamma, dx, dgamma, dbeta; LayerNormBackwardTiling);
        }
    };
}

/// A kernel of the list, as the launch table knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelSignature {
    /// The kernel; its entry point is `aclrtlaunch_<name>`.
    pub name: &'static str,
    /// Its global-memory parameters, in order.
    pub globals: &'static [&'static str],
    /// The Rust mirror of its tiling struct.
    pub tiling: &'static str,
}

macro_rules! define_kernel_table {
    ($($name:ident($($gm:ident),*; $tiling:ident);)*) => {
        /// Every kernel of the list.
        pub const KERNELS: &[KernelSignature] = &[$(KernelSignature {
            name: stringify!($name),
            globals: &[$(stringify!($gm)),*],
            tiling: stringify!($tiling),
        }),*];

        /// The entry points a library exports (`None` where it lacks one).
        #[allow(missing_docs)]
        struct KernelFns {
            $($name: Option<unsafe extern "C" fn(u32, *mut c_void, $(define_kernel_table!(@gm $gm),)* *mut $tiling) -> u32>,)*
        }

        impl KernelFns {
            fn resolve(source: &dyn SymbolSource) -> Self {
                // SAFETY: each symbol is given the prototype CANN generates for its kernel,
                // which the list states (checked against the kernel sources by the tests).
                unsafe {
                    Self {
                        $($name: source
                            .lookup(concat!("aclrtlaunch_", stringify!($name)))
                            .map(|p| std::mem::transmute::<*const c_void, unsafe extern "C" fn(u32, *mut c_void, $(define_kernel_table!(@gm $gm),)* *mut $tiling) -> u32>(p)),)*
                    }
                }
            }

            fn has(&self, kernel: &str) -> bool {
                match kernel {
                    $(stringify!($name) => self.$name.is_some(),)*
                    _ => false,
                }
            }
        }
    };
    (@gm $gm:ident) => { *mut c_void };
}
kernel_function_list!(define_kernel_table);

/// A kernel library's launch table.
pub struct KernelApi {
    source: Box<dyn SymbolSource>,
    fns: KernelFns,
}

impl KernelApi {
    /// Resolves every kernel of the list in `source`; a kernel it lacks fails when launched
    /// ([`LaunchError::Missing`]) and [`KernelApi::has`] says so beforehand.
    pub fn new(source: Box<dyn SymbolSource>) -> Self {
        let fns = KernelFns::resolve(&*source);
        Self { source, fns }
    }

    /// Whether the library exports `kernel`'s entry point.
    pub fn has(&self, kernel: &str) -> bool {
        self.fns.has(kernel)
    }

    /// The kernels of the list the library lacks.
    pub fn missing(&self) -> Vec<&'static str> {
        KERNELS
            .iter()
            .map(|k| k.name)
            .filter(|k| !self.has(k))
            .collect()
    }

    /// Which library this is.
    pub fn describe(&self) -> String {
        self.source.describe()
    }
}

/// Calls a kernel's entry point, or reports it missing.
macro_rules! launch {
    ($api:expr, $kernel:ident, $block_dim:expr, $stream:expr, $($arg:expr),*) => {
        match $api.fns.$kernel {
            None => Err(LaunchError::Missing { kernel: stringify!($kernel) }),
            Some(f) => check(stringify!($kernel), f($block_dim, $stream, $($arg),*)),
        }
    };
}

/// A launch that did not happen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum LaunchError {
    /// The runtime refused it, with this status code.
    #[error("launching kernel {kernel} failed with status {code}")]
    Refused {
        /// The kernel.
        kernel: &'static str,
        /// The runtime status code.
        code: u32,
    },
    /// The kernel library has no entry point for it.
    #[error("the kernel library has no aclrtlaunch_{kernel}")]
    Missing {
        /// The kernel.
        kernel: &'static str,
    },
}

fn check(kernel: &'static str, code: u32) -> Result<(), LaunchError> {
    if code == 0 {
        Ok(())
    } else {
        Err(LaunchError::Refused { kernel, code })
    }
}

/// Device buffers of one `layer_norm` launch.
#[derive(Debug, Clone, Copy)]
pub struct LayerNormBuffers {
    /// x `[rows, cols]`.
    pub x: *mut c_void,
    /// gamma `[cols]`, or null when the tiling says there is none.
    pub gamma: *mut c_void,
    /// beta `[cols]`, or null when the tiling says there is none.
    pub beta: *mut c_void,
    /// y `[rows, cols]`, x's type.
    pub y: *mut c_void,
    /// mean `[rows]`, f32.
    pub mean: *mut c_void,
    /// rstd `[rows]`, f32.
    pub rstd: *mut c_void,
}

/// Device buffers of one `layer_norm_backward` launch.
#[derive(Debug, Clone, Copy)]
pub struct LayerNormBackwardBuffers {
    /// dy `[rows, cols]`.
    pub dy: *mut c_void,
    /// x `[rows, cols]`, dy's type.
    pub x: *mut c_void,
    /// mean `[rows]`, f32, from the forward.
    pub mean: *mut c_void,
    /// rstd `[rows]`, f32, from the forward.
    pub rstd: *mut c_void,
    /// gamma `[cols]`, x's type, or null when the tiling says there is none.
    pub gamma: *mut c_void,
    /// dx `[rows, cols]`, x's type.
    pub dx: *mut c_void,
    /// dgamma `[cols]`, f32, zeros before the launch (blocks add into it).
    pub dgamma: *mut c_void,
    /// dbeta `[cols]`, f32, zeros before the launch (blocks add into it).
    pub dbeta: *mut c_void,
}

/// Which row gather to launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowGather {
    /// `moe_gather`: source row = index / top-k, int32 indices.
    MoeGather,
    /// `token_rearrange`: source row = perm`[i]`, int32 or int64.
    TokenRearrange,
}

/// Device buffers of one `moe_scatter` (both kernels).
#[derive(Debug, Clone, Copy)]
pub struct MoeScatterBuffers {
    /// indices `[T*K]`, int32.
    pub indices: *mut c_void,
    /// inv `[T*K]`, int32, all -1 before the launch.
    pub inv: *mut c_void,
    /// y `[T*K, H]`.
    pub y: *mut c_void,
    /// weights `[T*K]`, y's type, or null when the tiling says there are none.
    pub weights: *mut c_void,
    /// out `[T, H]`, y's type.
    pub out: *mut c_void,
}

/// Device buffers of one `alloc_extend` launch (all of the tiling's index type).
#[derive(Debug, Clone, Copy)]
pub struct AllocExtendBuffers {
    /// prefix_lens `[B]`.
    pub prefix_lens: *mut c_void,
    /// seq_lens `[B]`.
    pub seq_lens: *mut c_void,
    /// last_loc `[B]`.
    pub last_loc: *mut c_void,
    /// free_pages `[P]`.
    pub free_pages: *mut c_void,
    /// out_slots `[sum of extensions]`.
    pub out_slots: *mut c_void,
    /// totals `[2]`: pages taken, tokens extended.
    pub totals: *mut c_void,
}

/// Device buffers of one `moe_group_topk` launch (all f32 but the ids).
#[derive(Debug, Clone, Copy)]
pub struct MoeGroupTopkBuffers {
    /// logits `[T, E]`.
    pub logits: *mut c_void,
    /// The selection bias `[E]`, or null when the tiling says there is none.
    pub bias: *mut c_void,
    /// scores `[T, E]` (softmax or sigmoid of the logits).
    pub scores: *mut c_void,
    /// weights `[T, K]`.
    pub weights: *mut c_void,
    /// ids `[T, K]`, int32.
    pub ids: *mut c_void,
}

/// Device buffers of one `kv_cache_write` launch.
#[derive(Debug, Clone, Copy)]
pub struct KvCacheWriteBuffers {
    /// slots `[T]`, int32 or int64 (the tiling's index type).
    pub slots: *mut c_void,
    /// The keys part's rows `[T, cols[0]]`.
    pub k: *mut c_void,
    /// The values part's rows `[T, cols[1]]`, or null with one part.
    pub v: *mut c_void,
    /// The keys part's cache `[cache_rows[0], stride[0]]`, written in place.
    pub k_cache: *mut c_void,
    /// The values part's cache (may be `k_cache` itself), or null with one part.
    pub v_cache: *mut c_void,
}

/// Device buffers of one decode-attention launch (both stages).
#[derive(Debug, Clone, Copy)]
pub struct DecodeBuffers {
    /// q `[B, HQ, Dk]`.
    pub q: *mut c_void,
    /// k_cache `[slots, HKV, Dk]`.
    pub k: *mut c_void,
    /// v_cache `[slots, HKV, Dv]`, or null when values come from the key rows.
    pub v: *mut c_void,
    /// kv_indptr `[B + 1]`, int32.
    pub indptr: *mut c_void,
    /// kv_indices, int32.
    pub kv_indices: *mut c_void,
    /// num_kv_splits `[B]`, int32.
    pub splits: *mut c_void,
    /// part_out `[B, HQ, max_splits, Dv]`, f32.
    pub part_out: *mut c_void,
    /// part_lse `[B, HQ, max_splits]`, f32.
    pub part_lse: *mut c_void,
    /// out `[B, HQ, Dv]`, q's type.
    pub out: *mut c_void,
    /// lse `[B, HQ]`, f32.
    pub lse: *mut c_void,
    /// The cube path's scores workspace (`DecodeCubePlans::scores_elems` f32); null on the
    /// vector path.
    pub scores: *mut c_void,
    /// The cube path's probabilities workspace (`DecodeCubePlans::probs_elems` of q's type);
    /// null on the vector path.
    pub probs: *mut c_void,
}

/// Device buffers of one extend-attention launch. The workspaces of the path the plan does not
/// take are null.
#[derive(Debug, Clone, Copy)]
pub struct ExtendBuffers {
    /// q `[T, HQ, Dk]`.
    pub q: *mut c_void,
    /// k_cache `[slots, HKV, Dk]`.
    pub k: *mut c_void,
    /// v_cache `[slots, HKV, Dv]`, or null when values come from the key rows.
    pub v: *mut c_void,
    /// block_table `[R, W]`, int32.
    pub table: *mut c_void,
    /// lens `[2R + 1]`, int32: the running chunk starts, then the cached lengths.
    pub lens: *mut c_void,
    /// Cube path: the scores workspace (`ExtendCubePlans::scores_elems` f32).
    pub scores: *mut c_void,
    /// Cube path: the probabilities workspace (`ExtendCubePlans::probs_elems` of q's type).
    pub probs: *mut c_void,
    /// Cube path: the running statistics (`ExtendCubePlans::stats_elems` f32).
    pub stats: *mut c_void,
    /// Cube path: the accumulator (`ExtendCubePlans::acc_elems` f32).
    pub acc: *mut c_void,
    /// Cube path: the window's value product (`ExtendCubePlans::acc_elems` f32).
    pub pv: *mut c_void,
    /// Vector path: part_out `[T, HQ, passes, Dv]`, f32.
    pub part_out: *mut c_void,
    /// Vector path: part_lse `[T, HQ, passes]`, f32.
    pub part_lse: *mut c_void,
    /// Vector path: lse `[T, HQ]`, f32.
    pub lse: *mut c_void,
    /// out `[T, HQ, Dv]`, q's type.
    pub out: *mut c_void,
}

impl KernelApi {
    /// Queues `z = x + y` (element type and length in the plan's tiling).
    ///
    /// # Safety
    /// `stream` is a live stream of the device holding `x`, `y` and `z`, each a device allocation
    /// of at least `plan.tiling.total` elements of the tiling's type, alive until the stream has run
    /// the kernel.
    pub unsafe fn vector_add(
        &self,
        stream: *mut c_void,
        plan: Plan<VectorAddTiling>,
        x: *mut c_void,
        y: *mut c_void,
        z: *mut c_void,
    ) -> Result<(), LaunchError> {
        let mut tiling = plan.tiling;
        launch!(
            self,
            vector_add,
            plan.block_dim,
            stream,
            x,
            y,
            z,
            &mut tiling
        )
    }

    /// Queues an element-wise program (`kernels/elementwise_program.cpp`).
    ///
    /// # Safety
    /// `program` is a device buffer holding the words of
    /// [`Compiled::encode`](crate::program::Compiled::encode) for the plan's program, whose input
    /// and output addresses are live device allocations large enough for the grid; all stay alive
    /// until the stream has run the kernel.
    pub unsafe fn elementwise_program(
        &self,
        stream: *mut c_void,
        plan: Plan<ElementwiseTiling>,
        program: *mut c_void,
    ) -> Result<(), LaunchError> {
        let mut tiling = plan.tiling;
        launch!(
            self,
            elementwise_program,
            plan.block_dim,
            stream,
            program,
            &mut tiling
        )
    }

    /// Queues a layer norm forward (with the row statistics).
    ///
    /// # Safety
    /// As [`KernelApi::vector_add`], for buffers of the sizes the tiling describes.
    pub unsafe fn layer_norm(
        &self,
        stream: *mut c_void,
        plan: Plan<LayerNormTiling>,
        b: LayerNormBuffers,
    ) -> Result<(), LaunchError> {
        let mut tiling = plan.tiling;
        launch!(
            self,
            layer_norm,
            plan.block_dim,
            stream,
            b.x,
            b.gamma,
            b.beta,
            b.y,
            b.mean,
            b.rstd,
            &mut tiling
        )
    }

    /// Queues a layer norm backward: dx, and the column sums dgamma and dbeta added into their
    /// (zeroed) buffers.
    ///
    /// # Safety
    /// As [`KernelApi::vector_add`], for buffers of the sizes the tiling describes.
    pub unsafe fn layer_norm_backward(
        &self,
        stream: *mut c_void,
        plan: Plan<LayerNormBackwardTiling>,
        b: LayerNormBackwardBuffers,
    ) -> Result<(), LaunchError> {
        let mut tiling = plan.tiling;
        launch!(
            self,
            layer_norm_backward,
            plan.block_dim,
            stream,
            b.dy,
            b.x,
            b.mean,
            b.rstd,
            b.gamma,
            b.dx,
            b.dgamma,
            b.dbeta,
            &mut tiling
        )
    }

    /// Queues a KV-cache write: each token's rows of every part into its slot's row of the
    /// part's cache, at the part's column offset.
    ///
    /// # Safety
    /// As [`KernelApi::vector_add`], for buffers of the sizes the tiling describes.
    pub unsafe fn kv_cache_write(
        &self,
        stream: *mut c_void,
        plan: Plan<KvCacheWriteTiling>,
        b: KvCacheWriteBuffers,
    ) -> Result<(), LaunchError> {
        let mut tiling = plan.tiling;
        launch!(
            self,
            kv_cache_write,
            plan.block_dim,
            stream,
            b.slots,
            b.k,
            b.v,
            b.k_cache,
            b.v_cache,
            &mut tiling
        )
    }

    /// Queues the grouped router: each token's scores, experts and weights from its logits.
    ///
    /// # Safety
    /// As [`KernelApi::vector_add`], for buffers of the sizes the tiling describes (`bias` null
    /// when the tiling has none).
    pub unsafe fn moe_group_topk(
        &self,
        stream: *mut c_void,
        plan: Plan<MoeGroupTopkTiling>,
        b: MoeGroupTopkBuffers,
    ) -> Result<(), LaunchError> {
        let mut tiling = plan.tiling;
        launch!(
            self,
            moe_group_topk,
            plan.block_dim,
            stream,
            b.logits,
            b.bias,
            b.scores,
            b.weights,
            b.ids,
            &mut tiling
        )
    }

    /// Queues a row gather `out[i] = x[index[i] / divisor]`.
    ///
    /// # Safety
    /// As [`KernelApi::vector_add`], for buffers of the sizes the tiling describes.
    pub unsafe fn row_gather(
        &self,
        stream: *mut c_void,
        which: RowGather,
        plan: Plan<RowGatherTiling>,
        x: *mut c_void,
        indices: *mut c_void,
        out: *mut c_void,
    ) -> Result<(), LaunchError> {
        let mut tiling = plan.tiling;
        match which {
            RowGather::MoeGather => launch!(
                self,
                moe_gather,
                plan.block_dim,
                stream,
                x,
                indices,
                out,
                &mut tiling
            ),
            RowGather::TokenRearrange => launch!(
                self,
                token_rearrange,
                plan.block_dim,
                stream,
                x,
                indices,
                out,
                &mut tiling
            ),
        }
    }

    /// Queues both kernels of `moe_scatter`: `inv[indices[i]] = i` (`moe_scatter_inverse`, into
    /// an `inv` filled with -1 before), then `out[t] = sum_k w[t*K+k] * y[inv[t*K+k]]` behind it
    /// on the same stream.
    ///
    /// # Safety
    /// As [`KernelApi::vector_add`], for buffers of the sizes the tilings describe (`weights` may
    /// be null when the tiling has none).
    pub unsafe fn moe_scatter(
        &self,
        stream: *mut c_void,
        inverse: Plan<MoeInverseTiling>,
        plan: Plan<MoeScatterTiling>,
        b: MoeScatterBuffers,
    ) -> Result<(), LaunchError> {
        let mut t1 = inverse.tiling;
        launch!(
            self,
            moe_scatter_inverse,
            inverse.block_dim,
            stream,
            b.indices,
            b.inv,
            &mut t1
        )?;
        let mut tiling = plan.tiling;
        launch!(
            self,
            moe_scatter,
            plan.block_dim,
            stream,
            b.y,
            b.inv,
            b.weights,
            b.out,
            &mut tiling
        )
    }

    /// Queues a paged-cache slot allocation.
    ///
    /// # Safety
    /// As [`KernelApi::vector_add`], for buffers of the sizes the tiling describes.
    pub unsafe fn alloc_extend(
        &self,
        stream: *mut c_void,
        plan: Plan<AllocExtendTiling>,
        b: AllocExtendBuffers,
    ) -> Result<(), LaunchError> {
        let mut tiling = plan.tiling;
        launch!(
            self,
            alloc_extend,
            plan.block_dim,
            stream,
            b.prefix_lens,
            b.seq_lens,
            b.last_loc,
            b.free_pages,
            b.out_slots,
            b.totals,
            &mut tiling
        )
    }

    /// Queues split-KV decode attention as the plan says: the per-split kernels (stage 1 on
    /// the vector cores, or scores, softmax and values through the workspaces on the cube
    /// path), then stage 2 (queued behind them on the same stream), which merges the splits.
    ///
    /// # Safety
    /// As [`KernelApi::vector_add`], for buffers of the sizes the tilings describe (the
    /// workspaces too on the cube path).
    pub unsafe fn decode_attention(
        &self,
        stream: *mut c_void,
        plan: &DecodePlan,
        b: DecodeBuffers,
    ) -> Result<(), LaunchError> {
        match plan.stage1 {
            DecodeStage1::Vector(stage1) => {
                let mut t1 = stage1.tiling;
                launch!(
                    self,
                    decode_attention_stage1,
                    stage1.block_dim,
                    stream,
                    b.q,
                    b.k,
                    b.v,
                    b.indptr,
                    b.kv_indices,
                    b.splits,
                    b.part_out,
                    b.part_lse,
                    &mut t1
                )?;
            }
            DecodeStage1::Cube(c) => {
                let mut ts = c.scores.tiling;
                launch!(
                    self,
                    decode_attention_scores,
                    c.scores.block_dim,
                    stream,
                    b.q,
                    b.k,
                    b.indptr,
                    b.kv_indices,
                    b.splits,
                    b.scores,
                    &mut ts
                )?;
                let mut tm = c.softmax.tiling;
                launch!(
                    self,
                    decode_attention_softmax,
                    c.softmax.block_dim,
                    stream,
                    b.indptr,
                    b.splits,
                    b.scores,
                    b.probs,
                    b.part_out,
                    b.part_lse,
                    &mut tm
                )?;
                let mut tv = c.values.tiling;
                // MLA: the values are the leading dims of the key rows.
                let values = if b.v.is_null() { b.k } else { b.v };
                launch!(
                    self,
                    decode_attention_values,
                    c.values.block_dim,
                    stream,
                    values,
                    b.indptr,
                    b.kv_indices,
                    b.splits,
                    b.probs,
                    b.part_out,
                    &mut tv
                )?;
            }
        }
        let stage2 = plan.stage2;
        let mut t2 = stage2.tiling;
        launch!(
            self,
            decode_attention_stage2,
            stage2.block_dim,
            stream,
            b.part_out,
            b.part_lse,
            b.out,
            b.lse,
            &mut t2
        )
    }

    /// Queues paged extend attention as the plan says, in order on `stream`: per window of key
    /// positions the scores (cube), softmax (vector) and values (cube) kernels, then the softmax
    /// kernel once more (the last fold and the normalisation); or decode_attention's stage 1 in
    /// its extend form and its stage 2.
    ///
    /// # Safety
    /// As [`KernelApi::vector_add`], for buffers of the sizes the tilings describe.
    pub unsafe fn extend_attention(
        &self,
        stream: *mut c_void,
        plan: &ExtendPlan,
        b: ExtendBuffers,
    ) -> Result<(), LaunchError> {
        // MLA: the values are the leading dims of the key rows.
        let values = if b.v.is_null() { b.k } else { b.v };
        match plan.kernels {
            ExtendKernels::Vector { stage1, stage2 } => {
                let mut t1 = stage1.tiling;
                // The extend form reads the lengths and the block table in place of kv_indptr
                // and kv_indices; it reads no split counts.
                launch!(
                    self,
                    decode_attention_stage1,
                    stage1.block_dim,
                    stream,
                    b.q,
                    b.k,
                    b.v,
                    b.lens,
                    b.table,
                    b.lens,
                    b.part_out,
                    b.part_lse,
                    &mut t1
                )?;
                let mut t2 = stage2.tiling;
                launch!(
                    self,
                    decode_attention_stage2,
                    stage2.block_dim,
                    stream,
                    b.part_out,
                    b.part_lse,
                    b.out,
                    b.lse,
                    &mut t2
                )
            }
            ExtendKernels::Cube(c) => {
                let softmax = |pass: u32| {
                    let mut tm = c.softmax.tiling;
                    tm.pass = pass;
                    launch!(
                        self,
                        extend_attention_softmax,
                        c.softmax.block_dim,
                        stream,
                        b.lens,
                        b.scores,
                        b.probs,
                        b.stats,
                        b.acc,
                        b.pv,
                        b.out,
                        &mut tm
                    )
                };
                for pass in 0..plan.passes {
                    let mut ts = c.scores.tiling;
                    ts.pass = pass;
                    launch!(
                        self,
                        extend_attention_scores,
                        c.scores.block_dim,
                        stream,
                        b.q,
                        b.k,
                        b.table,
                        b.lens,
                        b.scores,
                        &mut ts
                    )?;
                    softmax(pass)?;
                    let mut tv = c.values.tiling;
                    tv.pass = pass;
                    launch!(
                        self,
                        extend_attention_values,
                        c.values.block_dim,
                        stream,
                        values,
                        b.table,
                        b.lens,
                        b.probs,
                        b.pv,
                        &mut tv
                    )?;
                }
                // The last window's fold and the normalisation.
                softmax(plan.passes)
            }
        }
    }
}
