//! Emulated aclnnGridSampler2D: torch's grid_sample for 4-D inputs (interpolation 0 bilinear,
//! 1 nearest, 2 bicubic; padding 0 zeros, 1 border, 2 reflection).
#![allow(missing_docs, non_snake_case, clippy::missing_safety_doc)]

use super::fault::Fault;
use super::meta::Kernel;
use super::meta::{tensor_arg, TensorDesc};
use super::numerics::{Domain, Real};
use super::ops::{check_dtype, invalid, phase1, phase2_entry_points, Ex, Ws};
use super::view::map;
use ascend_acl::dtype::DataType::{self, *};
use ascend_acl::types::*;
use std::sync::Arc;

/// UNCERTAIN: the op doc lists F32/F16 (and F64 on some releases); BF16 is not listed.
const GRID_SAMPLE: &[DataType] = &[F32, F16, F64];

/// Reflects `x` into `[lo, hi]` (torch's reflect_coordinates on the unnormalised coordinate).
fn reflect<T: Real>(x: T, lo: T, hi: T) -> T {
    let span = hi - lo;
    if span <= T::zero() {
        return lo;
    }
    let d = (x - lo).abs();
    let flips = (d / span).floor();
    let extra = d - flips * span;
    if flips.to_f64().map_or(0, |f| f as i64) % 2 == 0 {
        lo + extra
    } else {
        hi - extra
    }
}

/// Grid coordinate in [-1, 1] to a pixel coordinate, with the padding's clipping.
fn source<T: Real>(coord: T, size: usize, align: bool, padding: i64) -> T {
    let (one, two) = (T::one(), T::c(2.0));
    let s = T::c(size as f64);
    let x = if align {
        (coord + one) / two * (s - one)
    } else {
        ((coord + one) * s - one) / two
    };
    let clip = |x: T| x.max(T::zero()).min(s - one);
    match padding {
        1 => clip(x),
        2 if align => clip(reflect(x, T::zero(), s - one)),
        2 => clip(reflect(x, T::c(-0.5), s - T::c(0.5))),
        _ => x,
    }
}

fn cubic_weights<T: Real>(t: T) -> [T; 4] {
    let a = T::c(-0.75);
    let (one, two) = (T::one(), T::c(2.0));
    let near = |x: T| ((a + two) * x - (a + T::c(3.0))) * x * x + one;
    let far = |x: T| ((a * x - T::c(5.0) * a) * x + T::c(8.0) * a) * x - T::c(4.0) * a;
    [far(t + one), near(t), near(one - t), far(two - t)]
}

pub unsafe extern "C" fn aclnnGridSampler2DGetWorkspaceSize(
    input: *const aclTensor,
    grid: *const aclTensor,
    interpolation_mode: i64,
    padding_mode: i64,
    align_corners: bool,
    out: *mut aclTensor,
    ws: Ws,
    ex: Ex,
) -> aclnnStatus {
    const OP: &str = "aclnnGridSampler2D";
    phase1(OP, ws, ex, || {
        let (x, g, out) = (
            tensor_arg(OP, "input", input)?,
            tensor_arg(OP, "grid", grid)?,
            tensor_arg(OP, "out", out)?,
        );
        for (n, t) in [("input", &x), ("grid", &g), ("out", &out)] {
            check_dtype(OP, n, t, GRID_SAMPLE)?;
        }
        if !(0..=2).contains(&interpolation_mode) || !(0..=2).contains(&padding_mode) {
            return Err(invalid(OP, format!("interpolationMode {interpolation_mode} and paddingMode {padding_mode} must be in 0..=2")));
        }
        let ok = x.shape.len() == 4
            && g.shape.len() == 4
            && g.shape[3] == 2
            && g.shape[0] == x.shape[0]
            && out.shape == [x.shape[0], x.shape[1], g.shape[1], g.shape[2]];
        if !ok {
            return Err(invalid(
                OP,
                format!(
                    "input {}, grid {}, out {} do not fit (N,C,H,W), (N,Ho,Wo,2), (N,C,Ho,Wo)",
                    x.describe(),
                    g.describe(),
                    out.describe()
                ),
            ));
        }
        Ok((
            0,
            sample(
                OP,
                x,
                g,
                out,
                interpolation_mode,
                padding_mode,
                align_corners,
            ),
        ))
    })
}

fn sample(
    op: &'static str,
    x: TensorDesc,
    g: TensorDesc,
    out: TensorDesc,
    mode: i64,
    padding: i64,
    align: bool,
) -> Kernel {
    Arc::new(move || match Domain::of(&[x.dtype, g.dtype, out.dtype]) {
        Domain::F64 => sample_run::<f64>(op, &x, &g, &out, mode, padding, align),
        _ => sample_run::<f32>(op, &x, &g, &out, mode, padding, align),
    })
}

/// The sampling in `T` (f32 unless an operand is F64), reading pixels straight from the input.
fn sample_run<T: Real>(
    op: &str,
    x: &TensorDesc,
    g: &TensorDesc,
    out: &TensorDesc,
    mode: i64,
    padding: i64,
    align: bool,
) -> Result<(), Fault> {
    let mo = map(op, "out", out)?;
    let (mut mx, mut mg) = (map(op, "input", x)?, map(op, "grid", g)?);
    mx.detach_from(&mo, false);
    mg.detach_from(&mo, false);
    let (get, grid, set) = (mx.getter::<T>(), mg.getter::<T>(), mo.setter::<T>());
    let [n, c, h, w] = [x.shape[0], x.shape[1], x.shape[2], x.shape[3]];
    let (ho, wo) = (g.shape[1], g.shape[2]);
    let (xs, gs, os) = (&x.strides, &g.strides, &out.strides);
    let pixel = |b: usize, ch: usize, yi: i64, xi: i64| -> T {
        let (yi, xi) = if padding == 0 {
            if yi < 0 || xi < 0 || yi >= h as i64 || xi >= w as i64 {
                return T::zero();
            }
            (yi, xi)
        } else {
            (yi.clamp(0, h as i64 - 1), xi.clamp(0, w as i64 - 1))
        };
        get(x.offset + b * xs[0] + ch * xs[1] + yi as usize * xs[2] + xi as usize * xs[3])
    };
    let whole = |v: T| v.to_f64().map_or(0, |f| f as i64);
    for b in 0..n {
        for oy in 0..ho {
            for ox in 0..wo {
                let gi = g.offset + b * gs[0] + oy * gs[1] + ox * gs[2];
                let (sx, sy) = (
                    source(grid(gi), w, align, padding),
                    source(grid(gi + gs[3]), h, align, padding),
                );
                for ch in 0..c {
                    let val = match mode {
                        1 => pixel(b, ch, whole(sy.round_even()), whole(sx.round_even())),
                        2 => {
                            let (x0, y0) = (sx.floor(), sy.floor());
                            let (wx, wy) = (cubic_weights(sx - x0), cubic_weights(sy - y0));
                            let mut acc = T::zero();
                            for (j, &wyj) in wy.iter().enumerate() {
                                for (i, &wxi) in wx.iter().enumerate() {
                                    acc = acc
                                        + wyj
                                            * wxi
                                            * pixel(
                                                b,
                                                ch,
                                                whole(y0) - 1 + j as i64,
                                                whole(x0) - 1 + i as i64,
                                            );
                                }
                            }
                            acc
                        }
                        _ => {
                            let (x0, y0) = (sx.floor(), sy.floor());
                            let (fx, fy) = (sx - x0, sy - y0);
                            let (x0, y0) = (whole(x0), whole(y0));
                            let one = T::one();
                            pixel(b, ch, y0, x0) * (one - fx) * (one - fy)
                                + pixel(b, ch, y0, x0 + 1) * fx * (one - fy)
                                + pixel(b, ch, y0 + 1, x0) * (one - fx) * fy
                                + pixel(b, ch, y0 + 1, x0 + 1) * fx * fy
                        }
                    };
                    set(
                        out.offset + b * os[0] + ch * os[1] + oy * os[2] + ox * os[3],
                        val,
                    );
                }
            }
        }
    }
    Ok(())
}

phase2_entry_points!(aclnnGridSampler2D);
