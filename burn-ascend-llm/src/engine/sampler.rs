//! Sampling on the device: each row of a step's logits `[S, V]` gives its next token there, and
//! only the chosen ids `[S]` come back to the host.
//!
//! A row is greedy (the first most likely token, as `argmax` gives it) or a seeded draw at a
//! temperature from its `top_k` most likely tokens, of which the fewest likeliest that reach
//! `top_p` of their mass are kept, and of those the ones at least `min_p` times as likely as the
//! likeliest (vLLM's order: top-k, top-p, then min-p). The draw is the inverse of the kept tokens' cumulative
//! distribution, in descending order of likelihood, at a uniform `u` in `[0, 1)` the host derives
//! from the request's seed and the token's index ([`unit_draw`]: a request's tokens depend on
//! its seed alone, not on its batch). The host sends six numbers per row in one upload and
//! reads back one: a step with a 152k vocabulary at 64 requests reads back 256 bytes, where
//! sampling on the host read the sorted logits and ids of every row.
//!
//! On the device the step is a top-k over the rows (the largest `top_k` asked for in the
//! batch), then element-wise work over `[S, k]`: the softmax weights at each row's temperature,
//! the masks of its `top_k`, `top_p` and `min_p`, two cumulative sums, and the pick; an argmax
//! where some rows are greedy. Every operation is a standard Burn op, so any backend samples
//! the same way.

use burn::tensor::{DType, Int, Tensor, TensorData};
use burn_ascend::FusedOps;

use super::serve::Sampling;

/// The sampling of one row: its parameters and, for a draw, the token's index in its
/// generation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RowSampling {
    /// How the row's token is chosen.
    pub sampling: Sampling,
    /// Tokens the request generated before this one (the draw's counter).
    pub generated: u64,
}

/// The next token of each row of `logits [S, V]` (`rows[s]` its sampling), chosen on the
/// device; one read of `[S]` ids.
pub fn sample<B: FusedOps>(logits: Tensor<B, 2>, rows: &[RowSampling]) -> Vec<u32> {
    let [s, v] = logits.dims();
    assert_eq!(s, rows.len(), "a sampling per row");
    let device = logits.device();
    let k_max = rows
        .iter()
        .filter_map(|r| match r.sampling {
            Sampling::Random { top_k, .. } => Some(top_k.min(v)),
            Sampling::Greedy => None,
        })
        .max();
    let argmax = |logits: &Tensor<B, 2>| logits.clone().argmax(1).reshape([s]);
    let Some(k) = k_max else {
        return host_ids(argmax(&logits));
    };
    let greedy = rows
        .iter()
        .any(|r| r.sampling == Sampling::Greedy)
        .then(|| argmax(&logits));
    // Per row, in one upload: temperature, kept candidates, nucleus mass, least relative
    // probability, draw, and whether the row is greedy (its draw keeps one token, then the
    // argmax replaces it).
    const COLUMNS: usize = 6;
    let params: Vec<f32> = rows
        .iter()
        .flat_map(|r| match r.sampling {
            Sampling::Greedy => [1.0, 1.0, 1.0, 0.0, 0.0, 1.0],
            Sampling::Random {
                temperature,
                top_k,
                top_p,
                min_p,
                seed,
            } => [
                temperature as f32,
                top_k.min(v) as f32,
                top_p as f32,
                min_p as f32,
                unit_draw(seed, r.generated) as f32,
                0.0,
            ],
        })
        .collect();
    let params = Tensor::<B, 2>::from_data(TensorData::new(params, [s, COLUMNS]), &device);
    // A parameter, broadcast along the row.
    let column = |i: usize| params.clone().narrow(1, i, 1).expand([s, k]);
    let (temperature, top_k, top_p, min_p, draw) = (0, 1, 2, 3, 4);
    let (values, ids) = logits.cast(DType::F32).topk_with_indices(k, 1);
    // exp((x - max) / T): the row's unnormalised probabilities, largest first.
    let best = values.clone().narrow(1, 0, 1);
    let mut weights = ((values - best) / column(temperature)).exp();
    // The row's top_k: ranks below it.
    let rank = Tensor::<B, 1, Int>::arange(0..k as i64, &device)
        .float()
        .reshape([1, k])
        .expand([s, k]);
    weights = weights.mask_fill(rank.greater_equal(column(top_k)), 0.0);
    // The row's top_p: the tokens whose predecessors' mass is below top_p of the whole.
    let before = weights.clone().cumsum(1) - weights.clone();
    let total = weights.clone().sum_dim(1).expand([s, k]);
    weights = weights.mask_fill(before.greater_equal(total * column(top_p)), 0.0);
    // The row's min_p: the weights are relative to the likeliest's, which is 1.
    weights = weights.clone().mask_fill(weights.lower(column(min_p)), 0.0);
    // The draw: the first token whose cumulative mass exceeds u of the kept mass, i.e. the
    // number of tokens whose cumulative mass is at most that (the last kept one at most).
    let kept = weights.clone().greater_elem(0.0).int().sum_dim(1);
    let cumulative = weights.clone().cumsum(1);
    let target = weights.sum_dim(1).expand([s, k]) * column(draw);
    let pick = cumulative
        .lower_equal(target)
        .int()
        .sum_dim(1)
        .min_pair(kept - 1);
    let drawn = ids.gather(1, pick).reshape([s]);
    match greedy {
        Some(greedy) => {
            let is_greedy = params.narrow(1, 5, 1).reshape([s]).greater_elem(0.5);
            host_ids(drawn.mask_where(is_greedy, greedy))
        }
        None => host_ids(drawn),
    }
}

fn host_ids<B: FusedOps>(ids: Tensor<B, 1, Int>) -> Vec<u32> {
    ids.into_data()
        .convert::<i64>()
        .to_vec::<i64>()
        .expect("token ids")
        .into_iter()
        .map(|id| id as u32)
        .collect()
}

/// A uniform draw in [0, 1) for (seed, n) (splitmix64).
pub fn unit_draw(seed: u64, n: u64) -> f64 {
    let mut z = seed ^ n.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
}
