//! Serving: prompts are prefilled (dense causal attention, their keys and values written to
//! slots that `fused::alloc_extend` allocates), then decoded together one token per request
//! per step through `fused::decode_attention` over the paged cache. A finished request's pages
//! go back to the pool. [`reference_logits`] is the dense path the paged one must agree with.

use std::time::Instant;

use burn::tensor::activation::softmax;
use burn::tensor::{Int, Tensor};
use burn_ascend::fused::{self, DecodeAttentionOptions};
use burn_ascend::FusedOps;

use super::cache::{ints, slot, CacheError, LayerCache, PagePool};
use super::model::MoeDecoder;

/// How the next token is chosen from the logits.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Sampling {
    /// The most likely token.
    Greedy,
    /// A draw from the `top_k` most likely tokens at `temperature`, seeded.
    Random {
        /// Softmax temperature (> 0).
        temperature: f64,
        /// Candidates kept.
        top_k: usize,
        /// Seed of the draw.
        seed: u64,
    },
}

/// Why one request cannot be served (the others in its batch still are).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ServeError {
    /// The prompt has no token.
    #[error("the prompt is empty")]
    EmptyPrompt,
    /// The prompt and its continuation do not fit the longest sequence the server accepts.
    #[error(
        "prompt of {prompt} tokens plus {new} new tokens exceeds the maximum sequence of {max}"
    )]
    TooLong {
        /// Prompt tokens.
        prompt: usize,
        /// Tokens to generate.
        new: usize,
        /// The limit.
        max: usize,
    },
    /// A token id outside the vocabulary.
    #[error("token {token} at position {position} is outside the vocabulary of {vocab}")]
    BadToken {
        /// The token.
        token: u32,
        /// Where it is in the prompt.
        position: usize,
        /// The vocabulary size.
        vocab: usize,
    },
    /// Not enough cache pages.
    #[error(transparent)]
    Cache(#[from] CacheError),
}

/// What one request produced.
#[derive(Debug, Clone, PartialEq)]
pub struct Generation {
    /// The generated tokens.
    pub tokens: Vec<u32>,
    /// The logits each generated token was chosen from (`[vocab]` per token), if recorded.
    pub logits: Vec<Vec<f32>>,
}

/// The outcome of a batch.
#[derive(Debug)]
pub struct BatchOutput {
    /// One result per prompt, in order.
    pub results: Vec<Result<Generation, ServeError>>,
    /// Decode-phase throughput, tokens per second over all requests.
    pub decode_tokens_per_second: f64,
}

struct Active {
    index: usize,
    tokens: Vec<u32>,
    cached: usize,
    pages: Vec<u32>,
    left: usize,
    out: Generation,
}

/// Server settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ServeConfig {
    /// Pages in the cache.
    pub pages: usize,
    /// Slots per page.
    pub page_size: usize,
    /// Longest sequence a request may reach.
    pub max_seq: usize,
    /// Splits of each request's cached keys in decode attention, at most.
    pub max_kv_splits: usize,
    /// Keep every step's logits in the output (tests compare them).
    pub record_logits: bool,
}

/// A model with its paged KV cache.
pub struct Server<B: FusedOps> {
    model: MoeDecoder<B>,
    caches: Vec<LayerCache<B>>,
    pool: PagePool,
    cfg: ServeConfig,
    device: B::Device,
}

impl<B: FusedOps> Server<B> {
    /// A server with an empty cache.
    pub fn new(model: MoeDecoder<B>, cfg: ServeConfig, device: &B::Device) -> Self {
        let pool = PagePool::new(cfg.pages, cfg.page_size);
        let d = model.dims();
        let empty = || Tensor::<B, 3>::zeros([pool.slots(), d.kv_heads, d.head_dim], device);
        let caches = model
            .blocks
            .iter()
            .map(|_| LayerCache {
                keys: empty(),
                values: empty(),
            })
            .collect();
        Self {
            model,
            caches,
            pool,
            cfg,
            device: device.clone(),
        }
    }

    /// The page pool (free pages return to it when requests finish).
    pub fn pool(&self) -> &PagePool {
        &self.pool
    }

    fn check(&self, prompt: &[u32], new: usize) -> Result<(), ServeError> {
        let vocab = self.model.dims().vocab;
        if prompt.is_empty() {
            return Err(ServeError::EmptyPrompt);
        }
        if prompt.len() + new > self.cfg.max_seq {
            return Err(ServeError::TooLong {
                prompt: prompt.len(),
                new,
                max: self.cfg.max_seq,
            });
        }
        if let Some((position, &token)) = prompt
            .iter()
            .enumerate()
            .find(|(_, &t)| t as usize >= vocab)
        {
            return Err(ServeError::BadToken {
                token,
                position,
                vocab,
            });
        }
        Ok(())
    }

    /// Generates `new_tokens` tokens for each prompt; bad prompts get their error and the others
    /// are served.
    pub fn generate(
        &mut self,
        prompts: &[Vec<u32>],
        new_tokens: usize,
        sampling: Sampling,
    ) -> BatchOutput {
        let mut results: Vec<Result<Generation, ServeError>> = prompts
            .iter()
            .map(|p| {
                self.check(p, new_tokens).map(|_| Generation {
                    tokens: Vec::new(),
                    logits: Vec::new(),
                })
            })
            .collect();
        let mut active: Vec<Active> = prompts
            .iter()
            .enumerate()
            .filter(|(i, _)| results[*i].is_ok() && new_tokens > 0)
            .map(|(index, p)| Active {
                index,
                tokens: p.clone(),
                cached: 0,
                pages: Vec::new(),
                left: new_tokens,
                out: Generation {
                    tokens: Vec::new(),
                    logits: Vec::new(),
                },
            })
            .collect();
        if let Err(e) = self.prefill(&mut active, sampling) {
            for a in active.drain(..) {
                results[a.index] = Err(e.clone());
            }
        }
        let start = Instant::now();
        let mut decoded = 0usize;
        let mut step = 1u64;
        loop {
            let mut i = 0;
            while i < active.len() {
                if active[i].left == 0 {
                    let a = active.remove(i);
                    self.pool.release(&a.pages);
                    results[a.index] = Ok(a.out);
                } else {
                    i += 1;
                }
            }
            if active.is_empty() {
                break;
            }
            if let Err(e) = self.decode_step(&mut active, sampling, step) {
                for a in active.drain(..) {
                    self.pool.release(&a.pages);
                    results[a.index] = Err(e.clone());
                }
                break;
            }
            decoded += active.len();
            step += 1;
        }
        let secs = start.elapsed().as_secs_f64();
        BatchOutput {
            results,
            decode_tokens_per_second: if secs > 0.0 {
                decoded as f64 / secs
            } else {
                0.0
            },
        }
    }

    /// Allocates `growth` (tokens before, tokens after) for the requests on the device and in
    /// the host mirror; returns the new slots `[sum of growth]` on the device.
    fn extend(
        &mut self,
        active: &mut [Active],
        growth: &[(usize, usize)],
    ) -> Result<Tensor<B, 1, Int>, ServeError> {
        let ps = self.pool.page_size();
        let free = self.pool.free_list();
        let last_loc: Vec<i32> = active
            .iter()
            .map(|a| {
                if a.cached == 0 {
                    0
                } else {
                    slot(&a.pages, ps, a.cached - 1)
                }
            })
            .collect();
        let taken = self.pool.take(growth)?;
        let total: usize = growth.iter().map(|&(p, s)| s - p).sum();
        let d = &self.device;
        let allocated = fused::alloc_extend(
            ints::<B>(growth.iter().map(|g| g.0 as i32).collect(), d),
            ints::<B>(growth.iter().map(|g| g.1 as i32).collect(), d),
            ints::<B>(last_loc, d),
            ints::<B>(free, d),
            ps,
            total,
        );
        for (a, pages) in active.iter_mut().zip(taken) {
            a.pages.extend(pages);
        }
        Ok(allocated.slots)
    }

    fn prefill(&mut self, active: &mut [Active], sampling: Sampling) -> Result<(), ServeError> {
        if active.is_empty() {
            return Ok(());
        }
        let growth: Vec<(usize, usize)> = active.iter().map(|a| (0, a.tokens.len())).collect();
        let slots = self.extend(active, &growth)?;
        let dims = *self.model.dims();
        let mut at = 0;
        for a in active.iter_mut() {
            let n = a.tokens.len();
            let request_slots = slots.clone().narrow(0, at, n);
            at += n;
            let tokens = token_tensor::<B>(&a.tokens, &self.device).reshape([1, n]);
            let positions = Tensor::<B, 1, Int>::arange(0..n as i64, &self.device).float();
            let mut x = self.model.embed(tokens);
            let h = x.dims()[2];
            for (block, cache) in self.model.blocks.iter().zip(self.caches.iter_mut()) {
                let (q, k, v) = block.attn.project(
                    block.attn_input(x.clone(), &dims),
                    positions.clone(),
                    &dims,
                );
                let rows = |t: Tensor<B, 4>| t.reshape([n, dims.kv_heads, dims.head_dim]);
                cache.write(request_slots.clone(), rows(k.clone()), rows(v.clone()));
                let attended = block.attn.attend(q, k, v, &dims);
                x = block
                    .feed_forward((x + attended).reshape([n, h]), &dims)
                    .0
                    .reshape([1, n, h]);
            }
            a.cached = n;
            let logits = self.model.logits(x.reshape([n, h]).narrow(0, n - 1, 1));
            let (tokens, rows) = sample(logits, sampling, 0, self.cfg.record_logits);
            accept(a, tokens[0], rows.into_iter().next());
        }
        Ok(())
    }

    /// One token for every active request.
    fn decode_step(
        &mut self,
        active: &mut [Active],
        sampling: Sampling,
        step: u64,
    ) -> Result<(), ServeError> {
        let b = active.len();
        let growth: Vec<(usize, usize)> = active.iter().map(|a| (a.cached, a.cached + 1)).collect();
        let slots = self.extend(active, &growth)?;
        let ps = self.pool.page_size();
        let (mut indptr, mut indices, mut splits) = (vec![0i32], Vec::new(), Vec::new());
        for a in active.iter() {
            let len = a.cached + 1;
            indices.extend((0..len).map(|i| slot(&a.pages, ps, i)));
            indptr.push(indices.len() as i32);
            splits.push(len.div_ceil(32).clamp(1, self.cfg.max_kv_splits) as i32);
        }
        let d = &self.device;
        let (indptr, indices, splits) = (
            ints::<B>(indptr, d),
            ints::<B>(indices, d),
            ints::<B>(splits, d),
        );
        let dims = *self.model.dims();
        let inputs: Vec<u32> = active.iter().map(|a| a.tokens[a.cached]).collect();
        let positions = ints::<B>(active.iter().map(|a| a.cached as i32).collect(), d).float();
        let mut x = self
            .model
            .embed(token_tensor::<B>(&inputs, d).reshape([1, b]));
        let h = x.dims()[2];
        let options = DecodeAttentionOptions {
            max_kv_splits: self.cfg.max_kv_splits,
            sm_scale: (dims.head_dim as f32).powf(-0.5),
            logit_cap: None,
            value_dim: dims.head_dim,
        };
        for (block, cache) in self.model.blocks.iter().zip(self.caches.iter_mut()) {
            let (q, k, v) =
                block
                    .attn
                    .project(block.attn_input(x.clone(), &dims), positions.clone(), &dims);
            cache.write(
                slots.clone(),
                k.reshape([b, dims.kv_heads, dims.head_dim]),
                v.reshape([b, dims.kv_heads, dims.head_dim]),
            );
            let attended = fused::decode_attention(
                q.reshape([b, dims.q_heads, dims.head_dim]),
                cache.keys.clone(),
                Some(cache.values.clone()),
                indptr.clone(),
                indices.clone(),
                splits.clone(),
                options,
            )
            .0;
            let attended = block
                .attn
                .output(attended.reshape([b, dims.q_heads * dims.head_dim]));
            x = block
                .feed_forward(x.reshape([b, h]) + attended, &dims)
                .0
                .reshape([1, b, h]);
        }
        let logits = self.model.logits(x.reshape([b, h]));
        let (tokens, rows) = sample(logits, sampling, step, self.cfg.record_logits);
        let mut rows = rows.into_iter();
        for (a, t) in active.iter_mut().zip(tokens) {
            a.cached += 1;
            accept(a, t, rows.next());
        }
        Ok(())
    }
}

fn token_tensor<B: FusedOps>(tokens: &[u32], device: &B::Device) -> Tensor<B, 1, Int> {
    ints::<B>(tokens.iter().map(|&t| t as i32).collect(), device)
}

fn accept(a: &mut Active, token: u32, logits: Option<Vec<f32>>) {
    a.tokens.push(token);
    a.out.tokens.push(token);
    a.out.logits.extend(logits);
    a.left -= 1;
}

/// Chooses one token per row of `logits [n, V]`; also returns the rows when `record`.
fn sample<B: FusedOps>(
    logits: Tensor<B, 2>,
    sampling: Sampling,
    step: u64,
    record: bool,
) -> (Vec<u32>, Vec<Vec<f32>>) {
    let [n, v] = logits.dims();
    let rows = if record {
        let flat = logits
            .clone()
            .into_data()
            .convert::<f32>()
            .to_vec::<f32>()
            .expect("f32 logits");
        flat.chunks(v).map(<[f32]>::to_vec).collect()
    } else {
        Vec::new()
    };
    let tokens = match sampling {
        Sampling::Greedy => logits
            .argmax(1)
            .into_data()
            .convert::<i64>()
            .to_vec::<i64>()
            .expect("indices")
            .into_iter()
            .map(|t| t as u32)
            .collect(),
        Sampling::Random {
            temperature,
            top_k,
            seed,
        } => {
            let k = top_k.clamp(1, v);
            let (top, ids) = (logits / temperature.max(1e-6)).topk_with_indices(k, 1);
            let probs = softmax(top, 1)
                .into_data()
                .convert::<f32>()
                .to_vec::<f32>()
                .expect("probabilities");
            let ids = ids
                .into_data()
                .convert::<i64>()
                .to_vec::<i64>()
                .expect("indices");
            (0..n)
                .map(|r| {
                    let u = unit_draw(seed, step, r as u64);
                    let mut acc = 0.0;
                    let pick = (0..k).find(|&j| {
                        acc += probs[r * k + j] as f64;
                        u < acc
                    });
                    ids[r * k + pick.unwrap_or(k - 1)] as u32
                })
                .collect()
        }
    };
    (tokens, rows)
}

/// A uniform draw in [0, 1) for (seed, step, row).
fn unit_draw(seed: u64, step: u64, row: u64) -> f64 {
    let mut z =
        seed ^ step.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ row.wrapping_mul(0xC2B2_AE3D_27D4_EB4F);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
}

/// Logits of the last position of `tokens` by the dense causal path over the whole sequence (no
/// cache): the reference the paged path must agree with.
pub fn reference_logits<B: FusedOps>(
    model: &MoeDecoder<B>,
    tokens: &[u32],
    device: &B::Device,
) -> Vec<f32> {
    let n = tokens.len();
    let (logits, _) = model.forward(token_tensor::<B>(tokens, device).reshape([1, n]));
    let v = logits.dims()[2];
    logits
        .narrow(1, n - 1, 1)
        .reshape([v])
        .into_data()
        .convert::<f32>()
        .to_vec::<f32>()
        .expect("f32 logits")
}
