//! Shape arithmetic shared by the device runtime's views and the emulated operators.

/// Row-major strides (in elements) of `shape`.
pub fn contiguous_strides(shape: &[usize]) -> Vec<usize> {
    let mut strides = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        strides[i] = strides[i + 1] * shape[i + 1].max(1);
    }
    strides
}

/// The broadcast of two shapes (right-aligned, size-1 dims stretch), if compatible.
pub fn broadcast_dims(a: &[usize], b: &[usize]) -> Option<Vec<usize>> {
    let rank = a.len().max(b.len());
    (0..rank)
        .map(|i| {
            let da = (i + a.len()).checked_sub(rank).map_or(1, |j| a[j]);
            let db = (i + b.len()).checked_sub(rank).map_or(1, |j| b[j]);
            match (da, db) {
                (x, y) if x == y => Some(x),
                (1, y) => Some(y),
                (x, 1) => Some(x),
                _ => None,
            }
        })
        .collect()
}

/// Whether a view is row-major and dense (size-1 dims may have any stride; empty views are).
pub fn is_contiguous(shape: &[usize], strides: &[usize]) -> bool {
    if shape.contains(&0) {
        return true;
    }
    let mut expected = 1;
    for (&d, &s) in shape.iter().zip(strides).rev() {
        if d != 1 && s != expected {
            return false;
        }
        expected *= d;
    }
    true
}

/// One past the highest storage element a view reaches (its offset when it is empty).
pub fn extent(shape: &[usize], strides: &[usize], offset: usize) -> usize {
    if shape.contains(&0) {
        return offset;
    }
    offset
        + shape
            .iter()
            .zip(strides)
            .map(|(&d, &s)| (d - 1) * s)
            .sum::<usize>()
        + 1
}
