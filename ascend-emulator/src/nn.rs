//! Emulated neural-network operators: constant padding and convolution (forward, transposed
//! and backward). Convolutions run as the cube unit does them: im2col (or its adjoint, col2im)
//! then a GEMM per batch element, group and chunk of columns, in f32 with the input rounding
//! `cubeMathType` selects (HF32 for F32 under modes 1 and 3, F16 under mode 2).
#![allow(missing_docs, non_snake_case, clippy::missing_safety_doc)]

use super::fault::Fault;
use super::meta::Kernel;
use super::meta::ScalarValue;
use super::meta::{bool_array_arg, int_array_arg, scalar_arg, tensor_arg, TensorDesc};
use super::numerics::{cube_operands, element, round_to, CHUNK};
use super::ops::{check_dtype, invalid, phase1, phase2_entry_points, Ex, Ws, SCRATCH_WORKSPACE};
use super::view::{map, take_f32, Walk};
use ascend_acl::dtype::DataType::{self, *};
use ascend_acl::types::*;
use std::sync::Arc;

const PAD: &[DataType] = &[
    F32, F16, I32, I64, I16, I8, U8, U16, U32, U64, Bool, F64, BF16,
];
const CONV: &[DataType] = &[F32, F16, BF16];

/// Largest per-side padding, dilation and transposed kernel extent aclnnConvolution takes on
/// Atlas A2 (op doc).
const CONV_LIMIT: i64 = 255;

pub unsafe extern "C" fn aclnnConstantPadNdGetWorkspaceSize(
    self_: *const aclTensor,
    pad: *const aclIntArray,
    value: *const aclScalar,
    out: *mut aclTensor,
    ws: Ws,
    ex: Ex,
) -> aclnnStatus {
    const OP: &str = "aclnnConstantPadNd";
    phase1(OP, ws, ex, || {
        let (x, out) = (tensor_arg(OP, "self", self_)?, tensor_arg(OP, "out", out)?);
        let pad = int_array_arg(OP, "pad", pad)?;
        let value = scalar_arg(OP, "value", value)?;
        check_dtype(OP, "self", &x, PAD)?;
        check_dtype(OP, "out", &out, PAD)?;
        let rank = x.shape.len();
        if x.dtype != out.dtype || pad.len() % 2 != 0 || pad.len() / 2 > rank {
            return Err(invalid(
                OP,
                format!(
                    "self {}, out {} and pad {pad:?} do not fit (pad holds (before, after) pairs from the last dim)",
                    x.describe(),
                    out.describe()
                ),
            ));
        }
        // Per dim, how many elements come before the input (negative pads crop, as in torch).
        let mut before = vec![0i64; rank];
        let mut expect = x.shape.clone();
        for (i, pair) in pad.chunks(2).enumerate() {
            let d = rank - 1 - i;
            before[d] = pair[0];
            let size = x.shape[d] as i64 + pair[0] + pair[1];
            if size < 0 {
                return Err(invalid(
                    OP,
                    format!("pad {pad:?} leaves dim {d} of {:?} negative", x.shape),
                ));
            }
            expect[d] = size as usize;
        }
        if out.shape != expect {
            return Err(invalid(
                OP,
                format!("out shape {:?} should be {expect:?}", out.shape),
            ));
        }
        Ok((
            0,
            Arc::new(move || {
                let mo = map(OP, "out", &out)?;
                let mut mx = map(OP, "self", &x)?;
                mx.detach_from(&mo, false);
                // The fill value as one element of the dtype, converted once.
                let fill = match value {
                    ScalarValue::Float(v) => element(out.dtype, round_to(out.dtype, v)),
                    ScalarValue::Int(v) => element(out.dtype, v as i128),
                };
                let rank = out.shape.len();
                let mut idx = vec![0usize; rank];
                for (p, o) in Walk::of(&out).enumerate() {
                    let mut rest = p;
                    for d in (0..rank).rev() {
                        idx[d] = rest % out.shape[d];
                        rest /= out.shape[d];
                    }
                    let mut at = Some(x.offset);
                    for d in 0..rank {
                        let i = idx[d] as i64 - before[d];
                        if i < 0 || i >= x.shape[d] as i64 {
                            at = None;
                            break;
                        }
                        at = at.map(|a| a + i as usize * x.strides[d]);
                    }
                    match at {
                        Some(f) => mo.copy_from(o, &mx, f),
                        None => mo.put_bytes(o, &fill),
                    }
                }
                Ok(())
            }) as Kernel,
        ))
    })
}

/// The geometry of one convolution, padded to three spatial dims (leading dims of size 1).
#[derive(Debug, Clone)]
struct Geometry {
    /// Spatial size of the image side (the conv input, or the transposed conv output).
    image: [usize; 3],
    /// Spatial size of the column side (the conv output, or the transposed conv input).
    cols: [usize; 3],
    kernel: [usize; 3],
    stride: [usize; 3],
    padding: [usize; 3],
    dilation: [usize; 3],
}

impl Geometry {
    fn kernel_len(&self) -> usize {
        self.kernel.iter().product()
    }

    fn image_len(&self) -> usize {
        self.image.iter().product()
    }

    fn cols_len(&self) -> usize {
        self.cols.iter().product()
    }

    /// For each (kernel tap, column position in `cols`), the image position it reads, if
    /// inside: `[kernel, cols.len()]`.
    fn taps(&self, cols: std::ops::Range<usize>) -> Vec<Option<usize>> {
        let [kd, kh, kw] = self.kernel;
        let [_, oh, ow] = self.cols;
        let mut out = Vec::with_capacity(self.kernel_len() * cols.len());
        for a in 0..kd {
            for b in 0..kh {
                for c in 0..kw {
                    for col in cols.clone() {
                        let (z, y, x) = (col / (oh * ow), col / ow % oh, col % ow);
                        let at = (
                            self.source(0, z, a),
                            self.source(1, y, b),
                            self.source(2, x, c),
                        );
                        out.push(match at {
                            (Some(iz), Some(iy), Some(ix)) => {
                                Some((iz * self.image[1] + iy) * self.image[2] + ix)
                            }
                            _ => None,
                        });
                    }
                }
            }
        }
        out
    }

    fn source(&self, dim: usize, out: usize, tap: usize) -> Option<usize> {
        let i =
            (out * self.stride[dim] + tap * self.dilation[dim]) as i64 - self.padding[dim] as i64;
        (i >= 0 && i < self.image[dim] as i64).then_some(i as usize)
    }

    /// `[channels * kernel, chunk]` patches of a `[channels, image]` plane stack for the
    /// columns whose taps are given.
    fn im2col(&self, taps: &[Option<usize>], image: &[f32], channels: usize, cols: &mut Vec<f32>) {
        let il = self.image_len();
        cols.clear();
        for c in 0..channels {
            let plane = &image[c * il..(c + 1) * il];
            cols.extend(taps.iter().map(|t| t.map_or(0.0, |i| plane[i])));
        }
    }

    /// The adjoint of [`Self::im2col`]: adds each patch value back onto its image position.
    fn col2im(&self, taps: &[Option<usize>], cols: &[f32], channels: usize, image: &mut [f32]) {
        let (il, per_channel) = (self.image_len(), taps.len());
        for c in 0..channels {
            let plane = &mut image[c * il..(c + 1) * il];
            for (t, &v) in taps
                .iter()
                .zip(&cols[c * per_channel..(c + 1) * per_channel])
            {
                if let Some(i) = t {
                    plane[*i] += v;
                }
            }
        }
    }

    /// The column chunks the patch matrix is built in: at most [`CHUNK`] values (or one
    /// column) at a time, so its host memory does not grow with the image.
    fn col_chunks(&self, rows: usize) -> impl Iterator<Item = std::ops::Range<usize>> {
        let (cl, step) = (self.cols_len(), (CHUNK / rows.max(1)).max(1));
        (0..cl).step_by(step).map(move |c| c..(c + step).min(cl))
    }
}

/// A row-major matrix operand: data and (row stride, column stride).
pub(crate) type Operand<'a> = (&'a [f32], usize, usize);

/// `dst[m, n] (+)= lhs[m, k] @ rhs[k, n]` with the `gemm` crate, in f32 (the cube unit's
/// accumulator).
pub(crate) fn gemm(
    m: usize,
    n: usize,
    k: usize,
    dst: &mut [f32],
    lhs: Operand,
    rhs: Operand,
    add: bool,
) {
    gemm_into(m, n, k, dst, n, lhs, rhs, add)
}

/// [`gemm`] into a destination whose rows are `dst_stride` apart.
#[allow(clippy::too_many_arguments)]
fn gemm_into(
    m: usize,
    n: usize,
    k: usize,
    dst: &mut [f32],
    dst_stride: usize,
    lhs: Operand,
    rhs: Operand,
    add: bool,
) {
    if m == 0 || n == 0 {
        return;
    }
    assert!(
        (m - 1) * dst_stride + n <= dst.len(),
        "gemm destination too small"
    );
    if k == 0 {
        if !add {
            (0..m).for_each(|r| dst[r * dst_stride..][..n].fill(0.0));
        }
        return;
    }
    // A large product runs on the emulation's host threads: `gemm` splits the output, never the
    // sum over k, so the result does not depend on the thread count. A small one stays on this
    // thread (handing it over costs more than it saves).
    const MIN_PARALLEL_MACS: usize = 1 << 22;
    let pool = &super::machine::machine().pool;
    let threads = pool.current_num_threads();
    let parallel = threads > 1 && m * n * k >= MIN_PARALLEL_MACS;
    // SAFETY: the strides describe matrices inside the given slices (callers size them).
    let dst = dst.as_mut_ptr() as usize;
    let run = || unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst as *mut f32,
            1,
            dst_stride as isize,
            add,
            lhs.0.as_ptr(),
            lhs.2 as isize,
            lhs.1 as isize,
            rhs.0.as_ptr(),
            rhs.2 as isize,
            rhs.1 as isize,
            if add { 1.0 } else { 0.0 },
            1.0,
            false,
            false,
            false,
            if parallel {
                gemm::Parallelism::Rayon(threads)
            } else {
                gemm::Parallelism::None
            },
        );
    };
    if parallel {
        pool.install(run)
    } else {
        run()
    }
}

/// A cube operand as f32 (`numerics::cube_operands`), in row-major order: the one host copy of
/// an operand the convolution holds (at most twice its bytes, for F16/BF16).
fn read_cube(op: &str, name: &str, t: &TensorDesc, cube: i8) -> Result<Vec<f32>, Fault> {
    let m = map(op, name, t)?;
    let mut values = Vec::with_capacity(t.numel());
    take_f32(&mut values, &m, &mut Walk::of(t), t.numel());
    cube_operands(&mut values, t.dtype, cube);
    Ok(values)
}

/// Writes f32 results (row-major) to `t`, rounded once to its dtype.
fn write_f32(op: &str, name: &str, t: &TensorDesc, v: &[f32]) -> Result<(), Fault> {
    let m = map(op, name, t)?;
    let set = m.setter::<f32>();
    Walk::of(t).zip(v).for_each(|(o, &v)| set(o, v));
    Ok(())
}

/// The checked parameters of a convolution call.
#[derive(Debug, Clone)]
struct Conv {
    transposed: bool,
    groups: usize,
    batch: usize,
    /// Channels of the conv input (`x`).
    c_in: usize,
    /// Channels of the conv output.
    c_out: usize,
    geometry: Geometry,
    cube: i8,
}

fn positive(op: &str, name: &str, v: &[i64], min: i64, max: i64) -> Result<Vec<usize>, Fault> {
    match v.iter().find(|&&x| x < min || x > max) {
        Some(x) => Err(invalid(
            op,
            format!("{name} {v:?} has {x}, outside [{min}, {max}] on Atlas A2"),
        )),
        None => Ok(v.iter().map(|&x| x as usize).collect()),
    }
}

fn pad3(v: &[usize], fill: usize) -> [usize; 3] {
    let mut out = [fill; 3];
    out[3 - v.len()..].copy_from_slice(v);
    out
}

#[allow(clippy::too_many_arguments)]
fn check_conv(
    op: &str,
    x: &TensorDesc,
    w: &TensorDesc,
    out_shape: &[usize],
    stride: &[i64],
    padding: &[i64],
    dilation: &[i64],
    transposed: bool,
    output_padding: &[i64],
    groups: i64,
    cube: i8,
) -> Result<Conv, Fault> {
    let rank = x.shape.len();
    let spatial = rank.saturating_sub(2);
    if !(3..=5).contains(&rank) || w.shape.len() != rank {
        return Err(invalid(
            op,
            format!(
                "input {} and weight {} must both be 3-D (NCL), 4-D (NCHW) or 5-D (NCDHW)",
                x.describe(),
                w.describe()
            ),
        ));
    }
    if x.dtype != w.dtype {
        return Err(invalid(
            op,
            format!(
                "input dtype {} differs from weight dtype {}",
                x.dtype, w.dtype
            ),
        ));
    }
    if !(0..=3).contains(&cube) || (cube == 2 && x.dtype == BF16) {
        return Err(invalid(
            op,
            format!("cubeMathType {cube} is not valid for {}", x.dtype),
        ));
    }
    for (name, v) in [
        ("stride", stride),
        ("padding", padding),
        ("dilation", dilation),
        ("outputPadding", output_padding),
    ] {
        if v.len() != spatial {
            return Err(invalid(
                op,
                format!("{name} {v:?} needs {spatial} values for a {rank}-D input"),
            ));
        }
    }
    let stride = positive(op, "stride", stride, 1, i64::MAX)?;
    let padding = positive(op, "padding", padding, 0, CONV_LIMIT)?;
    let dilation = positive(op, "dilation", dilation, 1, CONV_LIMIT)?;
    let output_padding = positive(op, "outputPadding", output_padding, 0, CONV_LIMIT)?;
    if !(1..=65535).contains(&groups) {
        return Err(invalid(
            op,
            format!("groups {groups} is outside [1, 65535]"),
        ));
    }
    let groups = groups as usize;
    let (n, c_in) = (x.shape[0], x.shape[1]);
    let kernel = &w.shape[2..];
    let (c_out, fits) = if transposed {
        let c_out = w.shape[1] * groups;
        (c_out, w.shape[0] == c_in && c_in.is_multiple_of(groups))
    } else {
        let c_out = w.shape[0];
        (
            c_out,
            w.shape[1] * groups == c_in && c_out.is_multiple_of(groups),
        )
    };
    if !fits || kernel.contains(&0) {
        return Err(invalid(
            op,
            format!(
                "input {} and weight {} do not fit with groups {groups} (transposed: {transposed})",
                x.describe(),
                w.describe()
            ),
        ));
    }
    if transposed && kernel.iter().any(|&k| k as i64 > CONV_LIMIT) {
        return Err(invalid(
            op,
            format!("transposed kernel {kernel:?} exceeds {CONV_LIMIT} on Atlas A2"),
        ));
    }
    if transposed
        && output_padding
            .iter()
            .zip(stride.iter().zip(&dilation))
            .any(|(&p, (&s, &d))| p >= s.max(d))
    {
        return Err(invalid(
            op,
            format!("outputPadding {output_padding:?} must be smaller than stride or dilation"),
        ));
    }
    let in_spatial = &x.shape[2..];
    let mut expect = vec![n, c_out];
    for i in 0..spatial {
        let reach = dilation[i] * (kernel[i] - 1) + 1;
        let size = if transposed {
            ((in_spatial[i] as i64 - 1) * stride[i] as i64 - 2 * padding[i] as i64
                + reach as i64
                + output_padding[i] as i64)
                .max(0) as usize
        } else {
            let padded = in_spatial[i] + 2 * padding[i];
            if padded < reach {
                0
            } else {
                (padded - reach) / stride[i] + 1
            }
        };
        expect.push(size);
    }
    if out_shape != expect.as_slice() || expect.contains(&0) {
        return Err(invalid(
            op,
            format!(
                "output shape {out_shape:?} should be {expect:?} (input {}, weight {})",
                x.describe(),
                w.describe()
            ),
        ));
    }
    let (image, cols) = if transposed {
        (&expect[2..], in_spatial)
    } else {
        (in_spatial, &expect[2..])
    };
    Ok(Conv {
        transposed,
        groups,
        batch: n,
        c_in,
        c_out,
        geometry: Geometry {
            image: pad3(image, 1),
            cols: pad3(cols, 1),
            kernel: pad3(kernel, 1),
            stride: pad3(&stride, 1),
            padding: pad3(&padding, 0),
            dilation: pad3(&dilation, 1),
        },
        cube,
    })
}

impl Conv {
    /// Channels per group on the image side and on the column side of the GEMM.
    fn split(&self) -> (usize, usize) {
        let (ci, co) = (self.c_in / self.groups, self.c_out / self.groups);
        if self.transposed {
            (co, ci)
        } else {
            (ci, co)
        }
    }

    /// The forward pass: `[N, c_out, out]` from `x` and `w`, the patch matrix built a chunk
    /// of columns at a time.
    fn forward(&self, x: &[f32], w: &[f32]) -> Vec<f32> {
        let g = &self.geometry;
        let (kl, il, cl) = (g.kernel_len(), g.image_len(), g.cols_len());
        let (img_c, col_c) = self.split();
        let per_out = if self.transposed { il } else { cl };
        let mut out = vec![0f32; self.batch * self.c_out * per_out];
        let mut cols = Vec::new();
        for n in 0..self.batch {
            for grp in 0..self.groups {
                let wg = &w[grp * col_c * img_c * kl..][..col_c * img_c * kl];
                for chunk in g.col_chunks(img_c * kl) {
                    let (c0, cc) = (chunk.start, chunk.len());
                    let taps = g.taps(chunk);
                    if self.transposed {
                        // x_g: [col_c, cl]; w_g: [col_c, img_c * kl]; cols = w_g^T @ x_g.
                        let xg = &x[(n * self.c_in + grp * col_c) * cl..][..col_c * cl];
                        cols.resize(img_c * kl * cc, 0.0);
                        gemm(
                            img_c * kl,
                            cc,
                            col_c,
                            &mut cols,
                            (wg, 1, img_c * kl),
                            (&xg[c0..], cl, 1),
                            false,
                        );
                        let og = &mut out[(n * self.c_out + grp * img_c) * il..][..img_c * il];
                        g.col2im(&taps, &cols, img_c, og);
                    } else {
                        // cols = im2col(x_g): [img_c * kl, cc]; out_g = w_g @ cols.
                        let xg = &x[(n * self.c_in + grp * img_c) * il..][..img_c * il];
                        g.im2col(&taps, xg, img_c, &mut cols);
                        let og = &mut out[(n * self.c_out + grp * col_c) * cl..][..col_c * cl];
                        gemm_into(
                            col_c,
                            cc,
                            img_c * kl,
                            &mut og[c0..],
                            cl,
                            (wg, img_c * kl, 1),
                            (&cols, cc, 1),
                            false,
                        );
                    }
                }
            }
        }
        out
    }

    /// The gradients with respect to `x` and `w` (each only if asked for).
    fn backward(
        &self,
        grad: &[f32],
        x: &[f32],
        w: &[f32],
        want_x: bool,
        want_w: bool,
    ) -> (Vec<f32>, Vec<f32>) {
        let g = &self.geometry;
        let (kl, il, cl) = (g.kernel_len(), g.image_len(), g.cols_len());
        let (img_c, col_c) = self.split();
        let mut gx = vec![0f32; if want_x { x.len() } else { 0 }];
        let mut gw = vec![0f32; if want_w { w.len() } else { 0 }];
        let mut cols = Vec::new();
        for n in 0..self.batch {
            for grp in 0..self.groups {
                let w_at = grp * col_c * img_c * kl;
                let wg = &w[w_at..][..col_c * img_c * kl];
                for chunk in g.col_chunks(img_c * kl) {
                    let (c0, cc) = (chunk.start, chunk.len());
                    let taps = g.taps(chunk);
                    if self.transposed {
                        // y = col2im(w_g^T @ x_g), so with C = im2col(gy):
                        // gx_g = w_g @ C and gw_g += x_g @ C^T.
                        let gy = &grad[(n * self.c_out + grp * img_c) * il..][..img_c * il];
                        g.im2col(&taps, gy, img_c, &mut cols);
                        let x_at = (n * self.c_in + grp * col_c) * cl;
                        if want_x {
                            gemm_into(
                                col_c,
                                cc,
                                img_c * kl,
                                &mut gx[x_at + c0..x_at + col_c * cl],
                                cl,
                                (wg, img_c * kl, 1),
                                (&cols, cc, 1),
                                false,
                            );
                        }
                        if want_w {
                            gemm(
                                col_c,
                                img_c * kl,
                                cc,
                                &mut gw[w_at..][..col_c * img_c * kl],
                                (&x[x_at + c0..x_at + col_c * cl], cl, 1),
                                (&cols, 1, cc),
                                true,
                            );
                        }
                    } else {
                        // out_g = w_g @ im2col(x_g): gx_g = col2im(w_g^T @ go_g),
                        // gw_g += go_g @ im2col(x_g)^T.
                        let go_at = (n * self.c_out + grp * col_c) * cl;
                        let go = &grad[go_at + c0..go_at + col_c * cl];
                        let x_at = (n * self.c_in + grp * img_c) * il;
                        if want_x {
                            cols.resize(img_c * kl * cc, 0.0);
                            gemm(
                                img_c * kl,
                                cc,
                                col_c,
                                &mut cols,
                                (wg, 1, img_c * kl),
                                (go, cl, 1),
                                false,
                            );
                            g.col2im(&taps, &cols, img_c, &mut gx[x_at..x_at + img_c * il]);
                        }
                        if want_w {
                            g.im2col(&taps, &x[x_at..x_at + img_c * il], img_c, &mut cols);
                            gemm(
                                col_c,
                                img_c * kl,
                                cc,
                                &mut gw[w_at..][..col_c * img_c * kl],
                                (go, cl, 1),
                                (&cols, 1, cc),
                                true,
                            );
                        }
                    }
                }
            }
        }
        (gx, gw)
    }
}

/// Sums `[N, C, spatial]` over N and spatial: `[C]`.
fn channel_sums(v: &[f32], channels: usize, per: usize) -> Vec<f32> {
    let mut out = vec![0f32; channels];
    for (i, chunk) in v.chunks(per).enumerate() {
        out[i % channels] += chunk.iter().sum::<f32>();
    }
    out
}

pub unsafe extern "C" fn aclnnConvolutionGetWorkspaceSize(
    input: *const aclTensor,
    weight: *const aclTensor,
    bias: *const aclTensor,
    stride: *const aclIntArray,
    padding: *const aclIntArray,
    dilation: *const aclIntArray,
    transposed: bool,
    output_padding: *const aclIntArray,
    groups: i64,
    output: *mut aclTensor,
    cube_math_type: i8,
    ws: Ws,
    ex: Ex,
) -> aclnnStatus {
    const OP: &str = "aclnnConvolution";
    phase1(OP, ws, ex, || {
        let (x, w, out) = (
            tensor_arg(OP, "input", input)?,
            tensor_arg(OP, "weight", weight)?,
            tensor_arg(OP, "output", output)?,
        );
        let bias = if bias.is_null() {
            None
        } else {
            Some(tensor_arg(OP, "bias", bias)?)
        };
        for (n, t) in [("input", &x), ("weight", &w), ("output", &out)] {
            check_dtype(OP, n, t, CONV)?;
        }
        if out.dtype != x.dtype {
            return Err(invalid(
                OP,
                format!(
                    "output dtype {} differs from input dtype {}",
                    out.dtype, x.dtype
                ),
            ));
        }
        let conv = check_conv(
            OP,
            &x,
            &w,
            &out.shape,
            &int_array_arg(OP, "stride", stride)?,
            &int_array_arg(OP, "padding", padding)?,
            &int_array_arg(OP, "dilation", dilation)?,
            transposed,
            &int_array_arg(OP, "outputPadding", output_padding)?,
            groups,
            cube_math_type,
        )?;
        if let Some(b) = &bias {
            check_dtype(OP, "bias", b, CONV)?;
            if b.shape != [conv.c_out] {
                return Err(invalid(
                    OP,
                    format!("bias {} should be [{}]", b.describe(), conv.c_out),
                ));
            }
        }
        Ok((
            SCRATCH_WORKSPACE,
            Arc::new(move || {
                let xv = read_cube(OP, "input", &x, conv.cube)?;
                let wv = read_cube(OP, "weight", &w, conv.cube)?;
                let mut y = conv.forward(&xv, &wv);
                if let Some(b) = &bias {
                    let mb = map(OP, "bias", b)?;
                    let get = mb.getter::<f32>();
                    let bv: Vec<f32> = Walk::of(b).map(get).collect();
                    let per = y.len() / (conv.batch * conv.c_out);
                    for (i, chunk) in y.chunks_mut(per).enumerate() {
                        let add = bv[i % conv.c_out];
                        chunk.iter_mut().for_each(|v| *v += add);
                    }
                }
                write_f32(OP, "output", &out, &y)
            }) as Kernel,
        ))
    })
}

pub unsafe extern "C" fn aclnnConvolutionBackwardGetWorkspaceSize(
    grad_output: *const aclTensor,
    input: *const aclTensor,
    weight: *const aclTensor,
    bias_sizes: *const aclIntArray,
    stride: *const aclIntArray,
    padding: *const aclIntArray,
    dilation: *const aclIntArray,
    transposed: bool,
    output_padding: *const aclIntArray,
    groups: std::ffi::c_int,
    output_mask: *const aclBoolArray,
    cube_math_type: i8,
    grad_input: *mut aclTensor,
    grad_weight: *mut aclTensor,
    grad_bias: *mut aclTensor,
    ws: Ws,
    ex: Ex,
) -> aclnnStatus {
    const OP: &str = "aclnnConvolutionBackward";
    phase1(OP, ws, ex, || {
        let (go, x, w) = (
            tensor_arg(OP, "gradOutput", grad_output)?,
            tensor_arg(OP, "input", input)?,
            tensor_arg(OP, "weight", weight)?,
        );
        for (n, t) in [("gradOutput", &go), ("input", &x), ("weight", &w)] {
            check_dtype(OP, n, t, CONV)?;
        }
        if go.dtype != x.dtype {
            return Err(invalid(
                OP,
                format!(
                    "gradOutput dtype {} differs from input dtype {}",
                    go.dtype, x.dtype
                ),
            ));
        }
        let mask = bool_array_arg(OP, "outputMask", output_mask)?;
        if mask.len() != 3 {
            return Err(invalid(
                OP,
                format!("outputMask {mask:?} must hold 3 values (input, weight, bias)"),
            ));
        }
        let conv = check_conv(
            OP,
            &x,
            &w,
            &go.shape,
            &int_array_arg(OP, "stride", stride)?,
            &int_array_arg(OP, "padding", padding)?,
            &int_array_arg(OP, "dilation", dilation)?,
            transposed,
            &int_array_arg(OP, "outputPadding", output_padding)?,
            groups as i64,
            cube_math_type,
        )?;
        // Each selected gradient must be a pre-created contiguous tensor of its operand's
        // shape and dtype (the doc marks these outputs as not supporting strides).
        let out = |name: &str, p: *mut aclTensor, want: bool, shape: &[usize]| {
            if !want {
                return Ok(None);
            }
            let t = tensor_arg(OP, name, p)?;
            check_dtype(OP, name, &t, CONV)?;
            if t.shape != shape || t.dtype != x.dtype || !t.is_contiguous() {
                return Err(invalid(
                    OP,
                    format!(
                        "{name} {} must be a contiguous {shape:?} {} tensor",
                        t.describe(),
                        x.dtype
                    ),
                ));
            }
            Ok(Some(t))
        };
        let gi = out("gradInput", grad_input, mask[0], &x.shape)?;
        let gw = out("gradWeight", grad_weight, mask[1], &w.shape)?;
        let gb = out("gradBias", grad_bias, mask[2], &[conv.c_out])?;
        if mask[2] {
            let sizes = int_array_arg(OP, "biasSizes", bias_sizes)?;
            if sizes != [conv.c_out as i64] {
                return Err(invalid(
                    OP,
                    format!("biasSizes {sizes:?} should be [{}]", conv.c_out),
                ));
            }
        }
        Ok((
            SCRATCH_WORKSPACE,
            Arc::new(move || {
                let gv = read_cube(OP, "gradOutput", &go, conv.cube)?;
                if gi.is_some() || gw.is_some() {
                    let xv = read_cube(OP, "input", &x, conv.cube)?;
                    let wv = read_cube(OP, "weight", &w, conv.cube)?;
                    let (dx, dw) = conv.backward(&gv, &xv, &wv, gi.is_some(), gw.is_some());
                    if let Some(t) = &gi {
                        write_f32(OP, "gradInput", t, &dx)?;
                    }
                    if let Some(t) = &gw {
                        write_f32(OP, "gradWeight", t, &dw)?;
                    }
                }
                if let Some(t) = &gb {
                    let per = gv.len() / (conv.batch * conv.c_out);
                    write_f32(OP, "gradBias", t, &channel_sums(&gv, conv.c_out, per))?;
                }
                Ok(())
            }) as Kernel,
        ))
    })
}

phase2_entry_points!(
    aclnnConstantPadNd,
    aclnnConvolution,
    aclnnConvolutionBackward
);

#[cfg(test)]
mod tests {
    /// A product large enough for the host threads gives the bits of the one-thread product:
    /// `gemm` splits the output among threads, never the sum over k.
    #[test]
    fn threaded_products_equal_the_single_thread_ones() {
        let (m, n, k) = (96, 160, 512);
        assert!(m * n * k >= 1 << 22, "large enough to be split");
        // Values whose sums round differently in another order.
        let value = |i: usize| ((i * 2654435761) % 1000) as f32 / 7.0 - 70.0;
        let lhs: Vec<f32> = (0..m * k).map(value).collect();
        let rhs: Vec<f32> = (0..k * n).map(|i| value(i + 17)).collect();
        let mut threaded = vec![0f32; m * n];
        super::gemm(m, n, k, &mut threaded, (&lhs, k, 1), (&rhs, n, 1), false);
        let mut single = vec![0f32; m * n];
        // SAFETY: row-major matrices of the given sizes.
        unsafe {
            gemm::gemm(
                m,
                n,
                k,
                single.as_mut_ptr(),
                1,
                n as isize,
                false,
                lhs.as_ptr(),
                1,
                k as isize,
                rhs.as_ptr(),
                1,
                n as isize,
                0.0,
                1.0,
                false,
                false,
                false,
                gemm::Parallelism::None,
            );
        }
        let threads = super::super::machine::machine().pool.current_num_threads();
        let differ = threaded
            .iter()
            .zip(&single)
            .filter(|(a, b)| a.to_bits() != b.to_bits())
            .count();
        assert_eq!(
            differ,
            0,
            "{differ} of {} differ on {threads} threads",
            m * n
        );
    }
}
