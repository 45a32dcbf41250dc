//! How emulated kernels touch device memory: a descriptor is mapped to its allocation when the
//! kernel runs (so stale, freed or out-of-range views fault there, as on hardware); kernels then
//! walk the view's elements in row-major order ([`Walk`]) and read or write them one at a time,
//! converted to and from their compute type (`numerics`). No kernel holds a host copy of a whole
//! tensor, except where the op itself needs one (a sort lane, the cube operands as f32) or an
//! output overlaps an input ([`Mapped::detach_from`]).

use std::sync::Arc;

use super::fault::{fault, Fault};
use super::machine::machine;
use super::memory::Block;
use super::meta::{TensorDesc, MAX_RANK};
use super::numerics::Elem;
use ascend_acl::dtype::DataType;
pub(crate) use ascend_acl::shape::broadcast_dims as broadcast_shape;
use ascend_acl::types::status::*;
use half::{bf16, f16};

/// A descriptor whose storage has been located in emulated HBM.
pub(crate) struct Mapped {
    /// The allocation; `None` for an empty view or a detached copy.
    block: Option<Arc<Block>>,
    /// A private copy of the view's elements (see [`Mapped::detach_from`]), kept alive here.
    _copy: Vec<u64>,
    /// Host address of storage element 0 (only elements in `lo..hi` are ever touched).
    base: *mut u8,
    lo: usize,
    hi: usize,
    /// Bytes per element.
    es: usize,
    pub desc: TensorDesc,
}

/// Maps a view for a kernel of `op`; faults name the op and the argument.
pub(crate) fn map(op: &str, name: &str, desc: &TensorDesc) -> Result<Mapped, Fault> {
    let es = desc.dtype.size();
    if desc.numel() == 0 {
        return Ok(Mapped {
            block: None,
            _copy: Vec::new(),
            base: std::ptr::null_mut(),
            lo: 0,
            hi: 0,
            es,
            desc: desc.clone(),
        });
    }
    let extent = desc.extent();
    let addr = desc.device_addr();
    let npu = machine().npu_of(addr).ok_or_else(|| {
        fault(
            ACL_ERROR_RT_AICORE_EXCEPTION,
            format!("{op}: {name} points at 0x{addr:x}, which is not device memory"),
        )
    })?;
    let (block, start) = npu.memory.resolve(addr, extent * es).map_err(|f| Fault {
        code: f.code,
        message: format!("{op}: {name} {}: {}", desc.describe(), f.message),
    })?;
    Ok(Mapped {
        base: block.host_ptr(start),
        block: Some(block),
        _copy: Vec::new(),
        lo: desc.offset,
        hi: extent,
        es,
        desc: desc.clone(),
    })
}

impl Mapped {
    /// Host address of the element at storage offset `o`; offsets outside the view's range are
    /// an emulator bug, caught here rather than touching other memory.
    #[inline(always)]
    fn at(&self, o: usize) -> *mut u8 {
        if o < self.lo || o >= self.hi {
            self.out_of_range(o);
        }
        self.base.wrapping_add(o * self.es)
    }

    #[cold]
    #[inline(never)]
    fn out_of_range(&self, o: usize) -> ! {
        panic!(
            "element {o} is outside the mapped range {}..{} of {}",
            self.lo,
            self.hi,
            self.desc.describe()
        )
    }

    /// Reads elements by storage offset, converted to `T`.
    #[inline]
    pub fn getter<T: Elem>(&self) -> impl Fn(usize) -> T + '_ {
        let load = T::loader(self.desc.dtype);
        // SAFETY: `at` keeps every address inside the mapped view, whose range `map` checked.
        move |o| unsafe { load(self.at(o)) }
    }

    /// Writes elements by storage offset, converted from `T` with the dtype's rounding or
    /// wrapping.
    pub fn setter<T: Elem>(&self) -> impl Fn(usize, T) + '_ {
        let store = T::storer(self.desc.dtype);
        // SAFETY: as in `getter`.
        move |o, v| unsafe { store(self.at(o), v) }
    }

    /// Copies the element at storage offset `from` of `src` (same dtype) to offset `to`.
    pub fn copy_from(&self, to: usize, src: &Mapped, from: usize) {
        let es = self.desc.dtype.size();
        debug_assert_eq!(es, src.desc.dtype.size());
        // SAFETY: both addresses lie inside their mapped views (`at`); `copy` allows overlap.
        unsafe { std::ptr::copy(src.at(from), self.at(to), es) }
    }

    /// Writes one element's raw bytes (`numerics::element`, the first `dtype.size()` of them).
    pub fn put_bytes(&self, o: usize, bytes: &[u8; 8]) {
        // SAFETY: as in `copy_from`.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.at(o), self.desc.dtype.size())
        };
    }

    /// Writes one element's raw bytes to every element of the view: block moves of doubling
    /// size when the view is dense, else element by element.
    pub fn fill_bytes(&self, bytes: &[u8; 8]) {
        let walk = Walk::of(&self.desc);
        let Some((first, n)) = walk.dense_run() else {
            walk.for_each(|o| self.put_bytes(o, bytes));
            return;
        };
        if n == 0 {
            return;
        }
        let es = self.desc.dtype.size();
        let (start, _) = (self.at(first), self.at(first + n - 1));
        if self.block.is_some() && bytes[..es].iter().all(|&b| b == 0) {
            // SAFETY: `start..start + n * es` is the dense run, inside a device block's backing
            // (both ends checked above).
            unsafe { crate::memory::zero_device_bytes(start, n * es) };
            return;
        }
        self.put_bytes(first, bytes);
        let (mut done, total) = (es, n * es);
        while done < total {
            let step = done.min(total - done);
            // SAFETY: `start..start + total` is the dense run, inside the mapped view (both
            // ends checked above); the source and destination halves do not overlap.
            unsafe { std::ptr::copy_nonoverlapping(start, start.add(done), step) };
            done += step;
        }
    }

    /// Whether this view's storage range shares bytes with `other`'s.
    fn overlaps(&self, other: &Mapped) -> bool {
        let (Some(a), Some(b)) = (&self.block, &other.block) else {
            return false;
        };
        if !Arc::ptr_eq(a, b) {
            return false;
        }
        let range = |m: &Mapped| {
            let es = m.desc.dtype.size();
            let start = m.base as usize + m.lo * es;
            (start, m.base as usize + m.hi * es)
        };
        let ((a0, a1), (b0, b1)) = (range(self), range(other));
        a0 < b1 && b0 < a1
    }

    /// Makes this input independent of an output it overlaps: a kernel that streams (reading a
    /// chunk, writing a chunk) must not see its own writes, which a whole-tensor device kernel
    /// with input and output in one buffer would not either. With `in_step`, an input read at
    /// exactly the element the kernel then writes (an in-place elementwise op) is left as is.
    /// The copy holds the view's range only; it is the one case where a kernel's host memory
    /// grows with an operand (at most the input's own bytes).
    pub fn detach_from(&mut self, out: &Mapped, in_step: bool) {
        if !self.overlaps(out) {
            return;
        }
        let same_walk = self.base == out.base
            && self.desc.dtype == out.desc.dtype
            && self.desc.offset == out.desc.offset
            && self.desc.strides == out.desc.strides
            && self.desc.shape == out.desc.shape;
        if in_step && same_walk {
            return;
        }
        let es = self.desc.dtype.size();
        let bytes = (self.hi - self.lo) * es;
        let mut copy = vec![0u64; bytes.div_ceil(8)];
        // SAFETY: the source range lies inside the mapped view; the copy is large enough.
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.base.wrapping_add(self.lo * es),
                copy.as_mut_ptr() as *mut u8,
                bytes,
            )
        };
        self.base = (copy.as_mut_ptr() as *mut u8).wrapping_sub(self.lo * es);
        self.block = None;
        self._copy = copy;
    }
}

/// Storage offsets of a view's elements, in row-major order of a shape (the view's own or one
/// it broadcasts to). Strides may be negative (flip); dims are merged where the strides allow,
/// so a dense view is walked as one run. Holds no heap memory (ranks are at most
/// [`MAX_RANK`]).
#[derive(Debug, Clone)]
pub(crate) struct Walk {
    rank: usize,
    shape: [usize; MAX_RANK],
    strides: [isize; MAX_RANK],
    idx: [usize; MAX_RANK],
    at: isize,
    left: usize,
}

impl Walk {
    pub fn new(shape: &[usize], strides: &[isize], offset: usize) -> Walk {
        let mut w = Walk {
            rank: 0,
            shape: [0; MAX_RANK],
            strides: [0; MAX_RANK],
            idx: [0; MAX_RANK],
            at: offset as isize,
            left: shape.iter().product(),
        };
        for (&n, &k) in shape.iter().zip(strides) {
            if n == 1 {
                continue;
            }
            if w.rank > 0 && w.strides[w.rank - 1] == k * n as isize {
                w.shape[w.rank - 1] *= n;
                w.strides[w.rank - 1] = k;
            } else {
                assert!(
                    w.rank < MAX_RANK,
                    "a view of rank {} is walked",
                    shape.len()
                );
                w.shape[w.rank] = n;
                w.strides[w.rank] = k;
                w.rank += 1;
            }
        }
        w
    }

    /// The view's elements in its own shape.
    pub fn of(desc: &TensorDesc) -> Walk {
        let mut strides = [0isize; MAX_RANK];
        for (s, &d) in strides.iter_mut().zip(&desc.strides) {
            *s = d as isize;
        }
        Walk::new(&desc.shape, &strides[..desc.strides.len()], desc.offset)
    }

    /// The remaining elements as one dense run `(first offset, count)`, if they form one.
    pub fn dense_run(&self) -> Option<(usize, usize)> {
        let dense = self.rank == 0 || (self.rank == 1 && self.strides[0] == 1);
        dense.then_some((self.at as usize, self.left))
    }

    /// Skips `n` elements of a walk whose remaining elements form a dense run.
    fn skip_dense(&mut self, n: usize) {
        debug_assert!(self.dense_run().is_some() && n <= self.left);
        if self.rank == 1 {
            self.idx[0] += n;
        }
        self.at += n as isize;
        self.left -= n;
    }

    /// Calls `f` with the storage offsets of the next `n` elements (fewer if the walk ends
    /// first), a tight loop along the innermost dim: what `take(n)` yields, without the
    /// odometer step per element.
    pub fn take_each(&mut self, mut n: usize, mut f: impl FnMut(usize)) {
        while n > 0 && self.left > 0 {
            if self.rank == 0 {
                f(self.at as usize);
                self.left -= 1;
                return;
            }
            let d = self.rank - 1;
            let (s, run) = (
                self.strides[d],
                (self.shape[d] - self.idx[d]).min(n).min(self.left),
            );
            for i in 0..run as isize {
                f((self.at + i * s) as usize);
            }
            (n, self.left) = (n - run, self.left - run);
            self.idx[d] += run;
            self.at += run as isize * s;
            if self.left == 0 || self.idx[d] < self.shape[d] {
                continue;
            }
            // The innermost dim is done: carry into the outer ones as `next` does.
            let mut d = d;
            loop {
                self.at -= self.strides[d] * self.shape[d] as isize;
                self.idx[d] = 0;
                d -= 1;
                self.idx[d] += 1;
                self.at += self.strides[d];
                if self.idx[d] < self.shape[d] {
                    break;
                }
            }
        }
    }

    /// The view read broadcast to `target` (stride 0 along broadcast dims).
    pub fn broadcast(desc: &TensorDesc, target: &[usize]) -> Result<Walk, Fault> {
        let strides = broadcast_strides(&desc.shape, &desc.strides, target).ok_or_else(|| {
            fault(
                ACLNN_ERR_PARAM_INVALID,
                format!("shape {:?} does not broadcast to {target:?}", desc.shape),
            )
        })?;
        let mut signed = [0isize; MAX_RANK];
        for (s, &d) in signed.iter_mut().zip(&strides) {
            *s = d as isize;
        }
        Ok(Walk::new(target, &signed[..strides.len()], desc.offset))
    }
}

impl Iterator for Walk {
    type Item = usize;

    #[inline]
    fn next(&mut self) -> Option<usize> {
        if self.left == 0 {
            return None;
        }
        let current = self.at as usize;
        self.left -= 1;
        if self.left > 0 {
            let mut d = self.rank;
            loop {
                d -= 1;
                self.idx[d] += 1;
                self.at += self.strides[d];
                if self.idx[d] < self.shape[d] {
                    break;
                }
                self.at -= self.strides[d] * self.shape[d] as isize;
                self.idx[d] = 0;
            }
        }
        Some(current)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

impl ExactSizeIterator for Walk {}

/// Strides that read `shape` broadcast to `target` (right-aligned, stride 0 where broadcast).
pub(crate) fn broadcast_strides(
    shape: &[usize],
    strides: &[usize],
    target: &[usize],
) -> Option<Vec<usize>> {
    if shape.len() > target.len() {
        return None;
    }
    let lead = target.len() - shape.len();
    let mut out = vec![0; target.len()];
    for i in 0..shape.len() {
        let (s, t) = (shape[i], target[lead + i]);
        out[lead + i] = if s == t {
            strides[i]
        } else if s == 1 {
            0
        } else {
            return None;
        };
    }
    Some(out)
}

/// Reads the next `len` elements of `walk` into `buf` (cleared first) as f32, exact for F32,
/// F16 and BF16; dense runs of those dtypes are converted without per-element dispatch.
pub(crate) fn take_f32(buf: &mut Vec<f32>, m: &Mapped, walk: &mut Walk, len: usize) {
    buf.clear();
    if len == 0 {
        return;
    }
    if let Some((first, _)) = walk.dense_run() {
        let (p, _) = (m.at(first), m.at(first + len - 1));
        /// Fills `buf` with `len` values converted from 2-byte elements at `p`.
        ///
        /// # Safety
        /// The `len` elements from `p` lie inside a mapped view.
        unsafe fn widen(buf: &mut Vec<f32>, p: *const u16, len: usize, f: impl Fn(u16) -> f32) {
            let dst = &mut buf.spare_capacity_mut()[..len];
            for (i, d) in dst.iter_mut().enumerate() {
                d.write(f(p.add(i).read_unaligned()));
            }
            buf.set_len(len);
        }
        buf.reserve(len);
        // SAFETY: the `len` elements from `p` lie inside the mapped view (both ends checked);
        // reads are unaligned-safe; `buf` has room for `len` values and is empty.
        let done = unsafe {
            match m.desc.dtype {
                DataType::F32 => {
                    std::ptr::copy_nonoverlapping(p, buf.as_mut_ptr().cast::<u8>(), len * 4);
                    buf.set_len(len);
                    true
                }
                DataType::F16 => {
                    widen(buf, p as *const u16, len, |b| f16::from_bits(b).to_f32());
                    true
                }
                DataType::BF16 => {
                    widen(buf, p as *const u16, len, |b| bf16::from_bits(b).to_f32());
                    true
                }
                _ => false,
            }
        };
        if done {
            walk.skip_dense(len);
            return;
        }
    }
    // A strided view (a transposed operand): row by row along the innermost dim, f32 read
    // directly.
    buf.reserve(len);
    let (dst, mut i) = (buf.as_mut_ptr(), 0);
    let get = m.getter::<f32>();
    let f32_view = m.desc.dtype == DataType::F32;
    walk.take_each(len, |o| {
        // SAFETY: at most `len` offsets come, and `buf` has room for `len` values; `at` keeps
        // every address inside the mapped view; reads are unaligned-safe.
        unsafe {
            let v = if f32_view {
                (m.at(o) as *const f32).read_unaligned()
            } else {
                get(o)
            };
            dst.add(i).write(v);
        }
        i += 1;
    });
    // SAFETY: the first `i` values were written above.
    unsafe { buf.set_len(i) };
}

/// Elements a streaming kernel gathers per operand at a time when its operands are strided or
/// broadcast.
pub(crate) const STREAM_CHUNK: usize = 1024;

/// Replaces the contents of `into` with the next `n` elements of `walk` (fewer if it ends),
/// read from `m` in `T`, gathered along the innermost dim.
pub(crate) fn gather<T: Elem>(m: &Mapped, walk: &mut Walk, n: usize, into: &mut Vec<T>) {
    let get = m.getter::<T>();
    into.clear();
    walk.take_each(n, |i| into.push(get(i)));
}

/// Writes `values` (f32) to the next `values.len()` elements of `walk`, rounded once to the
/// view's dtype as [`Mapped::setter`] does; a dense F32 run is one block move.
pub(crate) fn put_f32(m: &Mapped, walk: &mut Walk, values: &[f32]) {
    let len = values.len();
    if len == 0 {
        return;
    }
    if let (DataType::F32, Some((first, _))) = (m.desc.dtype, walk.dense_run()) {
        let (p, _) = (m.at(first), m.at(first + len - 1));
        // SAFETY: the `len` elements from `p` lie inside the mapped view (both ends checked);
        // `values` is host memory apart from any mapped view.
        unsafe { std::ptr::copy_nonoverlapping(values.as_ptr().cast::<u8>(), p, len * 4) };
        walk.skip_dense(len);
        return;
    }
    let set = m.setter::<f32>();
    for (&v, o) in values.iter().zip(walk.by_ref()) {
        set(o, v);
    }
}

/// The elements of a dense, aligned F32 view as a slice of its device memory, when `out` (what
/// the kernel writes) shares none of it; `None` otherwise, and the caller copies the values.
pub(crate) fn dense_f32<'a>(m: &'a Mapped, out: &Mapped) -> Option<&'a [f32]> {
    if m.overlaps(out) {
        return None;
    }
    let walk = Walk::of(&m.desc);
    let (_, n) = walk.dense_run()?;
    if n == 0 {
        return Some(&[]);
    }
    let p = native_run::<f32>(m, &walk)?;
    // SAFETY: `native_run` checked that the `n` elements from `p` lie inside the mapped view,
    // which lives as long as `m`; the pointer is f32-aligned (checked); nothing writes the view
    // while the slice lives (`out` does not overlap it, and the kernel writes only `out`).
    (p as usize)
        .is_multiple_of(std::mem::align_of::<f32>())
        .then(|| unsafe { std::slice::from_raw_parts(p, n) })
}

/// Where the elements of `m`, walked by `walk`, are one dense run stored as `T` itself (F32 for
/// f32, F64 for f64): a pointer to the first of them, for kernels' fast paths.
pub(crate) fn native_run<T: Elem>(m: &Mapped, walk: &Walk) -> Option<*mut T> {
    let (first, n) = walk.dense_run()?;
    if !T::is_native(m.desc.dtype) {
        return None;
    }
    if n == 0 {
        return Some(std::ptr::null_mut());
    }
    let (p, _) = (m.at(first), m.at(first + n - 1));
    Some(p as *mut T)
}

/// Copies every element of `src` (read broadcast to `dst`'s shape, same dtype) into `dst`:
/// one block move when both are dense, else element by element.
pub(crate) fn copy_elements(src: &Mapped, dst: &Mapped) -> Result<(), Fault> {
    let from = Walk::broadcast(&src.desc, &dst.desc.shape)?;
    let to = Walk::of(&dst.desc);
    if let (Some((f, n)), Some((t, _))) = (from.dense_run(), to.dense_run()) {
        if n > 0 {
            let es = dst.desc.dtype.size();
            // Bounds: the first and last elements of both runs lie in their mapped views.
            let (s0, d0) = (src.at(f), dst.at(t));
            let _ = (src.at(f + n - 1), dst.at(t + n - 1));
            // SAFETY: both ranges lie inside their mapped views (checked above); `copy`
            // allows overlap.
            unsafe { std::ptr::copy(s0, d0, n * es) };
        }
        return Ok(());
    }
    for (f, t) in from.zip(to) {
        dst.copy_from(t, src, f);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::Walk;

    /// `take_each` yields what the iterator yields, in the same chunks, and leaves the walk
    /// where the iterator would (checked by walking on with the iterator afterwards).
    #[test]
    fn take_each_matches_the_iterator() {
        let views: [(&[usize], &[isize], usize); 6] = [
            (&[3, 4], &[1, 3], 0),             // transposed
            (&[2, 3, 4], &[12, 1, 3], 0),      // batched transposed
            (&[5], &[2], 1),                   // strided
            (&[3, 4], &[0, 1], 0),             // broadcast rows
            (&[4, 3], &[-3, 1], 9),            // flipped rows
            (&[2, 1, 3, 2], &[0, 7, 2, 1], 0), // broadcast, unit dim, mergeable pair
        ];
        for (shape, strides, offset) in views {
            let total: usize = shape.iter().product();
            for chunk in 1..=total + 1 {
                let mut fast = Walk::new(shape, strides, offset);
                let mut slow = Walk::new(shape, strides, offset);
                let mut taken = 0;
                while taken < total {
                    let mut got = Vec::new();
                    fast.take_each(chunk, |o| got.push(o));
                    let want: Vec<usize> = slow.by_ref().take(chunk).collect();
                    assert_eq!(got, want, "{shape:?} {strides:?} chunk {chunk} at {taken}");
                    taken += want.len();
                }
                assert_eq!(fast.next(), None);
                let mut rest = Walk::new(shape, strides, offset);
                rest.take_each(total / 2, |_| {});
                let skip: Vec<usize> = Walk::new(shape, strides, offset).skip(total / 2).collect();
                assert_eq!(
                    rest.collect::<Vec<_>>(),
                    skip,
                    "{shape:?} resumed by the iterator"
                );
            }
        }
    }
}
