//! Strided layouts: shape, element strides and element offset into a storage buffer. View
//! operations (reshape of contiguous data, permute, slice with positive steps, expand) only
//! change the layout; aclnn takes such views directly through `aclCreateTensor`.

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
