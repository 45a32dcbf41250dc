//! Inputs of the paged-attention tests (`fused_prefill.rs`, `fused_extend.rs`).

/// Deterministic values in [-1, 1).
pub fn values(n: usize, seed: u64) -> Vec<f32> {
    (0..n as u64)
        .map(|i| {
            let x = (i.wrapping_add(seed).wrapping_mul(0x9E3779B97F4A7C15) >> 40) as f32;
            x / (1u64 << 23) as f32 - 1.0
        })
        .collect()
}

/// The block table of requests `(prefix, chunk)` over `pages` pages of `page_size` slots, each
/// request's pages handed out in a shuffled order: the table `[requests, width]` (row-major,
/// unused entries 0) and its width.
pub fn shuffled_block_table(
    requests: &[(usize, usize)],
    page_size: usize,
    pages: usize,
) -> (Vec<i32>, usize) {
    let width = requests
        .iter()
        .map(|&(p, c)| (p + c).div_ceil(page_size))
        .max()
        .unwrap();
    let mut order: Vec<usize> = (0..pages).collect();
    order.sort_by_key(|&i| (i * 7919) % pages);
    let mut next = order.into_iter();
    let mut table = vec![0i32; requests.len() * width];
    for (r, &(p, c)) in requests.iter().enumerate() {
        for i in 0..(p + c).div_ceil(page_size) {
            table[r * width + i] = next.next().expect("enough pages") as i32;
        }
    }
    (table, width)
}
