//! The paged KV cache: per layer, key (and value) tensors of `[slots, HKV, D]` where slot
//! `page * page_size + i` is position `i` of a page, and the page pool on the host.
//!
//! Slots are allocated on the device by `fused::alloc_extend` (which reads the lengths on the
//! device); the scheduler, which knows every length, keeps the same bookkeeping on the host (it
//! is the same formula) to know which pages a request holds, to build `kv_indices` and to check
//! that a step fits before launching it.

use std::collections::VecDeque;

use burn::tensor::backend::Backend;
use burn::tensor::{IndexingUpdateOp, Int, Tensor, TensorData};

/// The cache of one layer (see [`super::step::CacheLayout`]).
#[derive(Debug, Clone)]
pub struct LayerCache<B: Backend> {
    /// Keys `[slots, HKV, Dk]`.
    pub keys: Tensor<B, 3>,
    /// Values `[slots, HKV, Dv]`, or `None` when they are the leading dims of the keys.
    pub values: Option<Tensor<B, 3>>,
}

impl<B: Backend> LayerCache<B> {
    /// Writes `rows [n, ..]` at `slots [n]` of `cache` (into a copy: the backends without an
    /// in-place row write).
    pub fn write_rows(cache: &mut Tensor<B, 3>, slots: Tensor<B, 1, Int>, rows: Tensor<B, 3>) {
        let n = slots.dims()[0];
        *cache = cache
            .clone()
            .scatter_nd(slots.reshape([n, 1]), rows, IndexingUpdateOp::Assign);
    }
}

/// The pages of the cache and who holds them.
#[derive(Debug, Clone)]
pub struct PagePool {
    page_size: usize,
    free: VecDeque<u32>,
    pages: usize,
}

/// A cache request that cannot be served.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CacheError {
    /// Not enough free pages for the step.
    #[error("the KV cache is full: the step needs {needed} new pages, {free} are free")]
    Full {
        /// Pages the step needs.
        needed: usize,
        /// Pages free.
        free: usize,
    },
}

impl PagePool {
    /// `pages` pages of `page_size` slots, all free.
    pub fn new(pages: usize, page_size: usize) -> Self {
        Self {
            page_size,
            free: (0..pages as u32).collect(),
            pages,
        }
    }

    /// Slots per page.
    pub fn page_size(&self) -> usize {
        self.page_size
    }

    /// Slots in the whole cache.
    pub fn slots(&self) -> usize {
        self.pages * self.page_size
    }

    /// Pages not held by any request.
    pub fn free_pages(&self) -> usize {
        self.free.len()
    }

    /// The free list in allocation order, as `alloc_extend` consumes it.
    pub fn free_list(&self) -> Vec<i32> {
        self.free.iter().map(|&p| p as i32).collect()
    }

    /// Pages a request growing from `from` to `to` tokens needs.
    pub fn pages_needed(&self, from: usize, to: usize) -> usize {
        to.div_ceil(self.page_size) - from.div_ceil(self.page_size)
    }

    /// Takes the pages for requests growing as `growth` says (in batch order), exactly as
    /// `alloc_extend` does on the device; fails before taking any when they do not fit.
    pub fn take(&mut self, growth: &[(usize, usize)]) -> Result<Vec<Vec<u32>>, CacheError> {
        let needed: usize = growth.iter().map(|&(p, s)| self.pages_needed(p, s)).sum();
        if needed > self.free.len() {
            return Err(CacheError::Full {
                needed,
                free: self.free.len(),
            });
        }
        Ok(growth
            .iter()
            .map(|&(p, s)| {
                (0..self.pages_needed(p, s))
                    .map(|_| self.free.pop_front().expect("checked"))
                    .collect()
            })
            .collect())
    }

    /// Returns a finished request's pages.
    pub fn release(&mut self, pages: &[u32]) {
        self.free.extend(pages.iter().copied());
    }
}

/// The slot of position `i` of a request holding `pages`.
pub fn slot(pages: &[u32], page_size: usize, i: usize) -> i32 {
    (pages[i / page_size] as usize * page_size + i % page_size) as i32
}

/// A 1-D int32 tensor of host values (lengths, page lists: scheduler data).
pub fn ints<B: Backend>(values: Vec<i32>, device: &B::Device) -> Tensor<B, 1, Int> {
    let n = values.len();
    Tensor::from_data(
        TensorData::new(values, [n]),
        (device, burn::tensor::DType::I32),
    )
}
