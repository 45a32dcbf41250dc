//! Sampling on the device (`burn_ascend_llm::engine::sampler`) against a host sampler written
//! here from the definition (softmax at the temperature over the `top_k` most likely tokens, the
//! fewest of them reaching `top_p` of their mass, the inverse of their cumulative distribution
//! at the request's uniform draw), on the emulated NPU and on burn-flex: the same token for the
//! same draw (but where the draw falls within float rounding of a boundary), the greedy rows'
//! argmax exactly, and the draws' frequencies those of the distribution.

mod common;

use burn::tensor::{Tensor, TensorData};
use burn_ascend_llm::engine::sampler::{sample, unit_draw, RowSampling};
use burn_ascend_llm::engine::serve::Sampling;
use common::*;
use serial_test::serial;

/// `[v]` logits of a few likely tokens over a long tail, deterministic in `seed`.
fn logits_row(v: usize, seed: u64) -> Vec<f32> {
    (0..v)
        .map(|i| {
            let h = (i as u64 * 2654435761 + seed * 40503) % 10007;
            let x = h as f32 / 10007.0 * 4.0 - 2.0;
            if i % 97 == 3 {
                x + 4.0
            } else {
                x
            }
        })
        .collect()
}

/// The host sampler: the index drawn by `u` from `row`.
fn host_draw(row: &[f32], sampling: Sampling, u: f64) -> u32 {
    let mut order: Vec<usize> = (0..row.len()).collect();
    // Largest first; ties to the lower id, as the device's top-k breaks them.
    order.sort_by(|&a, &b| row[b].total_cmp(&row[a]).then(a.cmp(&b)));
    let Sampling::Random {
        temperature,
        top_k,
        top_p,
        min_p,
        ..
    } = sampling
    else {
        return order[0] as u32;
    };
    let order = &order[..top_k.min(row.len())];
    let top = row[order[0]] as f64;
    let mut weights: Vec<f64> = order
        .iter()
        .map(|&i| ((row[i] as f64 - top) / temperature).exp())
        .collect();
    let mass = top_p * weights.iter().sum::<f64>();
    let mut acc = 0.0;
    let keep = weights
        .iter()
        .position(|w| {
            acc += w;
            acc >= mass
        })
        .map_or(weights.len(), |i| i + 1);
    weights.truncate(keep);
    // min_p: relative to the likeliest's weight, 1; the kept ones stay a prefix.
    let keep = weights.iter().take_while(|&&w| w >= min_p).count();
    weights.truncate(keep);
    let target = u * weights.iter().sum::<f64>();
    let mut acc = 0.0;
    let j = weights
        .iter()
        .position(|w| {
            acc += w;
            target < acc
        })
        .unwrap_or(weights.len() - 1);
    order[j] as u32
}

fn random(temperature: f64, top_k: usize, top_p: f64, seed: u64) -> Sampling {
    with_min_p(temperature, top_k, top_p, 0.0, seed)
}

fn with_min_p(temperature: f64, top_k: usize, top_p: f64, min_p: f64, seed: u64) -> Sampling {
    Sampling::Random {
        temperature,
        top_k,
        top_p,
        min_p,
        seed,
    }
}

/// Every sampling kind over the same rows, 64 draws of each (their `generated` counters):
/// the device's tokens equal the host sampler's.
fn matches_the_host_sampler<B: burn_ascend::FusedOps>(device: &B::Device) {
    let v = 1000;
    let kinds = [
        Sampling::Greedy,
        random(1.0, usize::MAX, 1.0, 7),
        random(0.7, 50, 0.9, 8),
        random(1.3, 5, 1.0, 9),
        random(1.0, usize::MAX, 0.5, 10),
        random(0.2, 3, 0.95, 11),
        with_min_p(1.0, usize::MAX, 1.0, 0.05, 12),
        with_min_p(0.9, 40, 0.8, 0.2, 13),
    ];
    let draws = 64;
    let mut rows = Vec::new();
    let mut values = Vec::new();
    for (i, kind) in kinds.iter().enumerate() {
        for n in 0..draws {
            rows.push(RowSampling {
                sampling: *kind,
                generated: n,
            });
            values.extend(logits_row(v, i as u64));
        }
    }
    let s = rows.len();
    let logits = Tensor::<B, 2>::from_data(TensorData::new(values.clone(), [s, v]), device);
    let got = sample(logits, &rows);
    let mut differ = 0;
    for (r, (row, id)) in rows.iter().zip(&got).enumerate() {
        let u = match row.sampling {
            Sampling::Random { seed, .. } => unit_draw(seed, row.generated),
            Sampling::Greedy => 0.0,
        };
        let want = host_draw(&values[r * v..(r + 1) * v], row.sampling, u);
        if row.sampling == Sampling::Greedy {
            assert_eq!(*id, want, "row {r}: greedy is the argmax");
        }
        differ += usize::from(*id != want);
    }
    // f32 cumulative sums on the device, f64 on the host: a draw within their rounding of a
    // boundary may pick the neighbour (none did when this was written).
    assert!(
        differ <= s / 100,
        "{differ} of {s} draws differ from the host sampler's"
    );
}

#[test]
#[serial]
fn the_device_draws_the_host_samplers_tokens_on_ascend() {
    matches_the_host_sampler::<Ascend>(&device());
}

/// A step of 64 rows over a 4096-token vocabulary, every row a default OpenAI draw (temperature
/// 1, no top-k or top-p): the host reads back the 64 chosen ids and nothing else. (Serial: the
/// copy counter counts every test's reads.)
#[test]
#[serial]
fn only_the_chosen_ids_come_back() {
    use burn::tensor::backend::Backend;
    use burn_ascend::emulator::device_to_host_copies;
    let (s, v) = (64, 4096);
    let values: Vec<f32> = (0..s).flat_map(|r| logits_row(v, r as u64)).collect();
    let logits = Tensor::<Ascend, 2>::from_data(TensorData::new(values, [s, v]), &device());
    Ascend::sync(&device()).unwrap();
    let rows: Vec<RowSampling> = (0..s)
        .map(|r| RowSampling {
            sampling: random(1.0, usize::MAX, 1.0, r as u64),
            generated: 0,
        })
        .collect();
    let (_, before) = device_to_host_copies();
    let got = sample(logits, &rows);
    let (_, after) = device_to_host_copies();
    assert_eq!(got.len(), s);
    let read = after - before;
    assert!(
        read == 4 * s as u64 || read == 8 * s as u64,
        "{read} bytes read back: the {s} ids (int32 or int64) alone"
    );
}

#[test]
#[serial]
fn the_device_draws_the_host_samplers_tokens_on_flex() {
    matches_the_host_sampler::<Flex>(&Default::default());
}

/// 4000 seeded draws from 8 tokens at temperature 0.8, top-k 6, top-p 0.95: each kept token's
/// frequency within 4.5 standard deviations of its probability, the others never drawn.
#[test]
#[serial]
fn draws_follow_the_distribution() {
    let row = [2.0f32, 1.5, 1.4, 0.3, 0.0, -0.5, 3.0, -2.0];
    let (t, k, p) = (0.8, 6, 0.95);
    let draws = 4000;
    let rows: Vec<RowSampling> = (0..draws)
        .map(|n| RowSampling {
            sampling: random(t, k, p, 42),
            generated: n,
        })
        .collect();
    let values: Vec<f32> = (0..draws).flat_map(|_| row).collect();
    let logits = Tensor::<Ascend, 2>::from_data(
        TensorData::new(values, [draws as usize, row.len()]),
        &device(),
    );
    let got = sample(logits, &rows);
    // The distribution by definition: the 6 likeliest (ids 6, 0, 1, 2, 3, 4), then the fewest
    // reaching 0.95 of their mass, renormalised.
    let mut order: Vec<usize> = (0..row.len()).collect();
    order.sort_by(|&a, &b| row[b].total_cmp(&row[a]));
    let weights: Vec<f64> = order[..k]
        .iter()
        .map(|&i| ((row[i] - row[order[0]]) as f64 / t).exp())
        .collect();
    let total: f64 = weights.iter().sum();
    let mut acc = 0.0;
    let kept = weights
        .iter()
        .position(|w| {
            acc += w;
            acc >= p * total
        })
        .map_or(k, |i| i + 1);
    let kept_mass: f64 = weights[..kept].iter().sum();
    for (rank, &id) in order.iter().enumerate() {
        let count = got.iter().filter(|&&g| g as usize == id).count() as f64;
        if rank >= kept {
            assert_eq!(count, 0.0, "token {id} is outside the kept set");
            continue;
        }
        let prob = weights[rank] / kept_mass;
        let (mean, sd) = (
            prob * draws as f64,
            (draws as f64 * prob * (1.0 - prob)).sqrt(),
        );
        assert!(
            (count - mean).abs() <= 4.5 * sd,
            "token {id}: drawn {count} times, expected {mean:.1} +- {sd:.1}"
        );
    }
}
