//! Captured decode: the server's decode step as an ACL graph per batch-size bucket
//! (`burn_ascend::graph`), replayed with one call per step.
//!
//! A decode step of `n` requests runs the graph of the smallest captured bucket `b >= n`, its
//! batch padded to `b` rows. Everything that changes per step is data in one int32 device
//! buffer per bucket, written in place before the replay (one upload): tokens, positions,
//! cached lengths, last slots, the free pages, `kv_indptr`/`kv_indices`, the split counts and
//! the sampled rows. Nothing in the captured step reads back or synchronises; sampling reads the
//! logits after it. Padding rows are requests of one new token that each take a scratch page
//! past the pool's pages (so they never touch a real request's cache) and attend to that one
//! slot; their logits are never sampled.
//!
//! No silent fallback: a bucket whose capture fails, a batch above the largest bucket, a
//! backend or CANN without graphs, each is said once on stderr, and
//! `Server::captured_buckets` / `Server::eager_buckets` report which buckets run captured.

use std::collections::{BTreeMap, HashSet};

use burn::tensor::{Int, Tensor};
use burn_ascend::graph::Graph;
use burn_ascend::FusedOps;

/// The decode batch sizes captured by default.
pub const DECODE_BUCKETS: [usize; 6] = [1, 2, 4, 8, 16, 32];

/// Where each input lives in a bucket's packed buffer: `b` rows, `free` free-page entries,
/// `kv` key slots (`b` times the longest sequence).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Packing {
    pub b: usize,
    pub free: usize,
    pub kv: usize,
}

impl Packing {
    pub const TOKENS: usize = 0;
    pub const POSITIONS: usize = 1;
    pub const PREFIX: usize = 2;
    pub const SEQ: usize = 3;
    pub const LAST_LOC: usize = 4;
    pub const SPLITS: usize = 5;
    pub const SAMPLE: usize = 6;

    /// Offset of the `[b]` field `field`.
    pub fn row(&self, field: usize) -> usize {
        field * self.b
    }

    /// Offset of `kv_indptr [b + 1]`.
    pub fn indptr(&self) -> usize {
        7 * self.b
    }

    /// Offset of the free pages `[free]`.
    pub fn free_pages(&self) -> usize {
        8 * self.b + 1
    }

    /// Offset of `kv_indices [kv]`.
    pub fn indices(&self) -> usize {
        self.free_pages() + self.free
    }

    /// Length of the buffer.
    pub fn len(&self) -> usize {
        self.indices() + self.kv
    }
}

/// One captured bucket: its input buffer, its logits `[b, V]` and the graph.
pub(crate) struct Bucket<B: FusedOps> {
    pub size: usize,
    pub packing: Packing,
    pub packed: Tensor<B, 1, Int>,
    pub logits: Tensor<B, 2>,
    pub graph: Graph,
}

/// The captured decode state of a server.
pub(crate) struct CapturedDecode<B: FusedOps> {
    /// The buckets asked for, ascending.
    pub requested: Vec<usize>,
    /// The buckets captured, ascending.
    pub buckets: Vec<Bucket<B>>,
    /// Buckets that run eagerly, and why.
    pub eager: BTreeMap<usize, String>,
    noticed: HashSet<String>,
}

impl<B: FusedOps> CapturedDecode<B> {
    pub fn new(mut requested: Vec<usize>) -> Self {
        requested.sort_unstable();
        requested.dedup();
        Self {
            requested,
            buckets: Vec::new(),
            eager: BTreeMap::new(),
            noticed: HashSet::new(),
        }
    }

    /// The largest bucket asked for: scratch pages reserved for padding rows.
    pub fn largest(&self) -> usize {
        self.requested.last().copied().unwrap_or(0)
    }

    /// The captured bucket a decode batch of `n` rows runs in, if any.
    pub fn bucket_for(&self, n: usize) -> Option<&Bucket<B>> {
        self.buckets.iter().find(|b| b.size >= n)
    }

    /// Why a decode batch of `n` rows runs eagerly.
    pub fn why_eager(&self, n: usize) -> String {
        match self.requested.iter().find(|&&b| b >= n) {
            None => format!(
                "decode batches of {n} requests run eagerly: no bucket holds them (the largest \
                 is {})",
                self.largest()
            ),
            Some(b) => format!(
                "decode batches of {n} requests run eagerly: bucket {b} was not captured ({})",
                self.eager
                    .get(b)
                    .map_or("no larger bucket was either", String::as_str)
            ),
        }
    }

    /// Says `why` on stderr, the first time only.
    pub fn notice(&mut self, why: String) {
        if self.noticed.insert(why.clone()) {
            eprintln!("burn-ascend-suite: {why}");
        }
    }
}
