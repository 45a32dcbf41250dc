//! Strided layouts: shape, element strides and element offset into a storage buffer. View
//! operations (reshape where the strides allow it, permute, slice with positive steps, expand)
//! only change the layout; aclnn takes such views directly through `aclCreateTensor`.

/// The layout of a tensor view.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// Size of each dimension.
    pub shape: Vec<usize>,
    /// Distance in elements between neighbours along each dimension (0 for broadcast dims).
    pub strides: Vec<usize>,
    /// Element offset of the first element in the storage.
    pub offset: usize,
}

pub use crate::acl::shape::contiguous_strides;

impl Layout {
    /// A fresh row-major layout.
    pub fn contiguous(shape: Vec<usize>) -> Self {
        let strides = contiguous_strides(&shape);
        Self {
            shape,
            strides,
            offset: 0,
        }
    }

    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// Whether the view is row-major and dense (size-1 dims may have any stride).
    pub fn is_contiguous(&self) -> bool {
        crate::acl::shape::is_contiguous(&self.shape, &self.strides)
    }

    /// One past the highest storage element the view reaches.
    pub fn extent(&self) -> usize {
        crate::acl::shape::extent(&self.shape, &self.strides, self.offset)
    }

    /// The same elements under a new shape, if that needs no copy (contiguous data).
    pub fn reshape(&self, shape: Vec<usize>) -> Option<Self> {
        debug_assert_eq!(self.numel(), shape.iter().product::<usize>());
        self.is_contiguous().then(|| Self {
            strides: contiguous_strides(&shape),
            shape,
            offset: self.offset,
        })
    }

    /// The same elements under a new shape without a copy, if the strides allow it: contiguous
    /// data, or a strided view in which each run of new dims falls inside a run of old dims
    /// laid out as one block (the rule of torch's `view`). A transposed matrix takes leading
    /// size-1 dims, and a matrix whose columns are a narrowed range folds its rows, as views.
    pub fn view(&self, shape: Vec<usize>) -> Option<Self> {
        debug_assert_eq!(self.numel(), shape.iter().product::<usize>());
        if self.is_contiguous() {
            return self.reshape(shape);
        }
        let mut strides = vec![0; shape.len()];
        // Old dims are grouped, from the last, into chunks whose elements are one strided
        // block: `base` is the chunk's innermost stride, `old` and `new` the element counts
        // of the chunk and of the new dims given to it so far.
        let mut next = shape.len();
        let mut base = *self.strides.last()?;
        let (mut old, mut new) = (1, 1);
        for d in (0..self.shape.len()).rev() {
            old *= self.shape[d];
            let chunk_ends =
                d == 0 || (self.shape[d - 1] != 1 && self.strides[d - 1] != old * base);
            if !chunk_ends {
                continue;
            }
            while next > 0 && (new < old || shape[next - 1] == 1) {
                next -= 1;
                strides[next] = new * base;
                new *= shape[next];
            }
            if new != old {
                return None;
            }
            if d > 0 {
                base = self.strides[d - 1];
                (old, new) = (1, 1);
            }
        }
        (next == 0).then_some(Self {
            shape,
            strides,
            offset: self.offset,
        })
    }

    /// Reorders the dimensions: dimension `i` of the result is dimension `axes[i]`.
    pub fn permute(&self, axes: &[usize]) -> Self {
        Self {
            shape: axes.iter().map(|&a| self.shape[a]).collect(),
            strides: axes.iter().map(|&a| self.strides[a]).collect(),
            offset: self.offset,
        }
    }

    /// Exchanges two dimensions.
    pub fn swap_dims(&self, a: usize, b: usize) -> Self {
        let mut out = self.clone();
        out.shape.swap(a, b);
        out.strides.swap(a, b);
        out
    }

    /// Broadcasts to `shape` (right-aligned; size-1 dims get stride 0), if compatible.
    pub fn expand(&self, shape: &[usize]) -> Option<Self> {
        if shape.len() < self.shape.len() {
            return None;
        }
        let lead = shape.len() - self.shape.len();
        let mut strides = vec![0; shape.len()];
        for (i, (&d, &s)) in self.shape.iter().zip(&self.strides).enumerate() {
            strides[lead + i] = match (d, shape[lead + i]) {
                (a, b) if a == b => s,
                (1, _) => 0,
                _ => return None,
            };
        }
        Some(Self {
            shape: shape.to_vec(),
            strides,
            offset: self.offset,
        })
    }

    /// Selects `start..end` by `step > 0` along `dim`.
    pub fn narrow(&self, dim: usize, start: usize, end: usize, step: usize) -> Self {
        let mut out = self.clone();
        let len = end.saturating_sub(start).div_ceil(step);
        out.shape[dim] = len;
        if len > 0 {
            out.offset += start * self.strides[dim];
        }
        out.strides[dim] *= step;
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permute_then_reshape_needs_a_copy() {
        let l = Layout::contiguous(vec![2, 3]).permute(&[1, 0]);
        assert_eq!(l.strides, vec![1, 3]);
        assert!(!l.is_contiguous());
        assert!(l.reshape(vec![6]).is_none());
    }

    /// The storage element of row-major index `i` of the view.
    fn element(l: &Layout, mut i: usize) -> usize {
        let mut at = l.offset;
        for (&d, &s) in l.shape.iter().zip(&l.strides).rev() {
            at += (i % d) * s;
            i /= d;
        }
        at
    }

    /// `view` of `l` as `shape`, checked element by element when it is a view.
    fn viewed(l: &Layout, shape: &[usize]) -> Option<Layout> {
        let v = l.view(shape.to_vec())?;
        for i in 0..l.numel() {
            assert_eq!(
                element(&v, i),
                element(l, i),
                "{l:?} as {shape:?}: element {i}"
            );
        }
        Some(v)
    }

    #[test]
    fn strided_views_reshape_without_a_copy_where_their_strides_allow() {
        let t = Layout::contiguous(vec![4, 6]).permute(&[1, 0]);
        // A transposed weight takes leading ones (whose strides do not matter).
        assert_eq!(viewed(&t, &[1, 6, 4]).unwrap().strides[1..], [1, 6]);
        assert!(viewed(&t, &[1, 1, 6, 1, 4]).is_some());
        // Its first dim splits (MLA's kv_b_proj into heads), but the two do not merge.
        assert_eq!(viewed(&t, &[2, 3, 4]).unwrap().strides, vec![3, 1, 6]);
        assert!(viewed(&t, &[24]).is_none());
        assert!(viewed(&t, &[4, 6]).is_none());
        // Narrowed columns fold the rows above them, not the columns.
        let n = Layout::contiguous(vec![2, 3, 8]).narrow(2, 2, 6, 1);
        assert_eq!(viewed(&n, &[6, 4]).unwrap().strides, vec![8, 1]);
        assert!(viewed(&n, &[2, 12]).is_none());
        // Broadcast dims stay broadcast; they cannot merge with a real one.
        let e = Layout::contiguous(vec![3, 1]).expand(&[3, 4]).unwrap();
        assert_eq!(viewed(&e, &[3, 2, 2]).unwrap().strides, vec![1, 0, 0]);
        assert!(viewed(&e, &[12]).is_none());
        // Every split and merge of a permuted 3-D view that exists is element-exact.
        let p = Layout::contiguous(vec![2, 3, 4]).permute(&[2, 0, 1]);
        let shapes: [&[usize]; 6] = [&[4, 6], &[2, 2, 6], &[4, 2, 3], &[24, 1], &[8, 3], &[1, 24]];
        for shape in shapes {
            viewed(&p, shape);
        }
        assert!(viewed(&p, &[4, 2, 3]).is_some());
    }

    #[test]
    fn narrow_with_step_counts_elements_like_python() {
        let l = Layout::contiguous(vec![10]).narrow(0, 1, 8, 3);
        assert_eq!((l.shape[0], l.strides[0], l.offset), (3, 3, 1));
        assert_eq!(l.extent(), 8);
    }

    #[test]
    fn expand_sets_zero_strides_and_rejects_mismatches() {
        let l = Layout::contiguous(vec![3, 1]);
        assert_eq!(l.expand(&[2, 3, 4]).unwrap().strides, vec![0, 1, 0]);
        assert!(l.expand(&[2, 4]).is_none());
    }

    #[test]
    fn size_one_dims_do_not_break_contiguity() {
        let mut l = Layout::contiguous(vec![1, 4]);
        l.strides[0] = 99;
        assert!(l.is_contiguous());
    }
}
