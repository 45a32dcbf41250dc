//! The serving engine's device memory: what the KV cache and a step take, the check that they
//! fit what the device has free, and how many pages the cache gets when it is sized from the
//! device ([`Server::fit_cache_to_memory`](super::serve::Server::fit_cache_to_memory), as vLLM's
//! `--gpu-memory-utilization`): that fraction of the device's memory, less what is in use
//! (the weights, other processes) and the largest step's workspace, measured by running one.

use burn_ascend::AscendDevice;

use super::serve::{ServeConfig, ServeConfigError};
use super::step::CacheLayout;

/// Bytes one page of `page_size` slots takes across every layer's cache.
pub fn page_bytes(layout: &CacheLayout, page_size: usize) -> u64 {
    let row = layout.kv_heads * (layout.key_dim + layout.value_dim.unwrap_or(0));
    (layout.layers * page_size * row * layout.dtype.size()) as u64
}

/// `(free, total)` bytes of `device`'s memory, as `aclrtGetMemInfo` reports them.
pub fn device_memory(device: &AscendDevice) -> Result<(u64, u64), ServeConfigError> {
    burn_ascend::runtime::device::memory_info(&(*device).into())
        .map(|(free, total)| (free as u64, total as u64))
        .map_err(|e| ServeConfigError(format!("cannot read {device}'s memory: {e}")))
}

/// Checks, before anything is allocated, that the KV cache and the buffers of the largest step
/// fit the memory `device` has free (the weights are already there): a clear error at
/// configuration instead of an allocation failure later. The step's count is the cube decode
/// path's: its scores (f32) and probabilities (16-bit) workspaces of `HQ x keys`, and
/// kv_indices (int32), with `keys = step_tokens x max_seq`.
pub fn check_fits(
    cfg: &ServeConfig,
    layout: &CacheLayout,
    device: &AscendDevice,
) -> Result<(), ServeConfigError> {
    let cache = cfg.pages as u128 * page_bytes(layout, cfg.page_size) as u128;
    let keys = cfg.step_keys().expect("validated") as u128;
    let step = keys * (4 + 6 * layout.query_heads as u128);
    let (free, total) = device_memory(device)?;
    if cache + step > free as u128 {
        return Err(ServeConfigError(format!(
            "the KV cache ({cache} bytes: {} layers x {} pages of {} slots x {} heads x (key dim \
             {} + value dim {}) x {} bytes) and the buffers of the largest step ({step} bytes: \
             step_tokens {} x max_seq {} keys x (4 + {} query heads x 6) bytes) exceed the {free} \
             bytes free of {device}'s {total}: lower pages, step_tokens or max_seq",
            layout.layers,
            cfg.pages,
            cfg.page_size,
            layout.kv_heads,
            layout.key_dim,
            layout.value_dim.unwrap_or(0),
            layout.dtype.size(),
            cfg.step_tokens,
            cfg.max_seq,
            layout.query_heads,
        )));
    }
    Ok(())
}

/// How the KV cache was sized from the device's memory.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CacheSizing {
    /// Pages the cache has.
    pub pages: usize,
    /// Tokens they hold.
    pub tokens: usize,
    /// Bytes of one page across the layers.
    pub page_bytes: u64,
    /// Bytes of device memory in use besides the cache (the weights, other processes).
    pub in_use_bytes: u64,
    /// The largest step's workspace, measured.
    pub workspace_bytes: u64,
    /// The device's memory.
    pub total_bytes: u64,
    /// The fraction of it the server may use.
    pub utilization: f64,
}

/// The pages of `page_bytes` that `utilization` of `total` holds beside `in_use` bytes and a
/// step's `workspace`, refused when they cannot hold one request of `cfg.max_seq` tokens.
pub fn pages_for(
    cfg: &ServeConfig,
    page_bytes: u64,
    (in_use, workspace, total): (u64, u64, u64),
    utilization: f64,
    device: &AscendDevice,
) -> Result<CacheSizing, ServeConfigError> {
    let allowed = (utilization * total as f64) as u64;
    let budget = allowed.saturating_sub(in_use + workspace);
    let pages = (budget / page_bytes.max(1)) as usize;
    let need = cfg.max_seq.div_ceil(cfg.page_size);
    if pages < need {
        return Err(ServeConfigError(format!(
            "the KV cache cannot hold one request of max_seq {} tokens ({need} pages of {} slots, \
             {page_bytes} bytes each) on {device}: {utilization} of its {total} bytes is \
             {allowed}, of which {in_use} are in use (the weights) and {workspace} are the \
             largest step's workspace, leaving {budget} bytes, {pages} pages: lower max_seq or \
             step_tokens, raise the memory utilization, or use more NPUs",
            cfg.max_seq, cfg.page_size
        )));
    }
    Ok(CacheSizing {
        pages,
        tokens: pages * cfg.page_size,
        page_bytes,
        in_use_bytes: in_use,
        workspace_bytes: workspace,
        total_bytes: total,
        utilization,
    })
}
