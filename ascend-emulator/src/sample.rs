//! Emulated aclnnGridSampler2D: torch's grid_sample for 4-D inputs (interpolation 0 bilinear,
//! 1 nearest, 2 bicubic; padding 0 zeros, 1 border, 2 reflection).
#![allow(missing_docs, non_snake_case, clippy::missing_safety_doc)]

use super::meta::Kernel;
use super::meta::{tensor_arg, TensorDesc};
use super::ops::{check_dtype, invalid, phase1, phase2_entry_points, Ex, Ws};
use super::view::{map, Vals};
use ascend_acl::dtype::DataType::{self, *};
use ascend_acl::types::*;
use std::sync::Arc;

/// UNCERTAIN: the op doc lists F32/F16 (and F64 on some releases); BF16 is not listed.
const GRID_SAMPLE: &[DataType] = &[F32, F16, F64];

/// Reflects `x` into `[lo, hi]` (torch's reflect_coordinates on the unnormalised coordinate).
fn reflect(x: f64, lo: f64, hi: f64) -> f64 {
    let span = hi - lo;
    if span <= 0.0 {
        return lo;
    }
    let d = (x - lo).abs();
    let flips = (d / span).floor();
    let extra = d - flips * span;
    if flips as i64 % 2 == 0 {
        lo + extra
    } else {
        hi - extra
    }
}

/// Grid coordinate in [-1, 1] to a pixel coordinate, with the padding's clipping.
fn source(coord: f64, size: usize, align: bool, padding: i64) -> f64 {
    let s = size as f64;
    let x = if align {
        (coord + 1.0) / 2.0 * (s - 1.0)
    } else {
        ((coord + 1.0) * s - 1.0) / 2.0
    };
    let clip = |x: f64| x.clamp(0.0, s - 1.0);
    match padding {
        1 => clip(x),
        2 if align => clip(reflect(x, 0.0, s - 1.0)),
        2 => clip(reflect(x, -0.5, s - 0.5)),
        _ => x,
    }
}

fn cubic_weights(t: f64) -> [f64; 4] {
    const A: f64 = -0.75;
    let near = |x: f64| ((A + 2.0) * x - (A + 3.0)) * x * x + 1.0;
    let far = |x: f64| ((A * x - 5.0 * A) * x + 8.0 * A) * x - 4.0 * A;
    [far(t + 1.0), near(t), near(1.0 - t), far(2.0 - t)]
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
    Arc::new(move || {
        let v = map(op, "input", &x)?.read(None)?.into_f64();
        let grid = map(op, "grid", &g)?.read(None)?.into_f64();
        let [n, c, h, w] = [x.shape[0], x.shape[1], x.shape[2], x.shape[3]];
        let (ho, wo) = (g.shape[1], g.shape[2]);
        let mut r = vec![0.0; n * c * ho * wo];
        let pixel = |b: usize, ch: usize, yi: i64, xi: i64| -> f64 {
            let (yi, xi) = if padding == 0 {
                if yi < 0 || xi < 0 || yi >= h as i64 || xi >= w as i64 {
                    return 0.0;
                }
                (yi, xi)
            } else {
                (yi.clamp(0, h as i64 - 1), xi.clamp(0, w as i64 - 1))
            };
            v[((b * c + ch) * h + yi as usize) * w + xi as usize]
        };
        for b in 0..n {
            for oy in 0..ho {
                for ox in 0..wo {
                    let gi = ((b * ho + oy) * wo + ox) * 2;
                    let (sx, sy) = (
                        source(grid[gi], w, align, padding),
                        source(grid[gi + 1], h, align, padding),
                    );
                    for ch in 0..c {
                        let val = match mode {
                            1 => pixel(
                                b,
                                ch,
                                sy.round_ties_even() as i64,
                                sx.round_ties_even() as i64,
                            ),
                            2 => {
                                let (x0, y0) = (sx.floor(), sy.floor());
                                let (wx, wy) = (cubic_weights(sx - x0), cubic_weights(sy - y0));
                                let mut acc = 0.0;
                                for (j, wyj) in wy.iter().enumerate() {
                                    for (i, wxi) in wx.iter().enumerate() {
                                        acc += wyj
                                            * wxi
                                            * pixel(
                                                b,
                                                ch,
                                                y0 as i64 - 1 + j as i64,
                                                x0 as i64 - 1 + i as i64,
                                            );
                                    }
                                }
                                acc
                            }
                            _ => {
                                let (x0, y0) = (sx.floor(), sy.floor());
                                let (fx, fy) = (sx - x0, sy - y0);
                                let (x0, y0) = (x0 as i64, y0 as i64);
                                pixel(b, ch, y0, x0) * (1.0 - fx) * (1.0 - fy)
                                    + pixel(b, ch, y0, x0 + 1) * fx * (1.0 - fy)
                                    + pixel(b, ch, y0 + 1, x0) * (1.0 - fx) * fy
                                    + pixel(b, ch, y0 + 1, x0 + 1) * fx * fy
                            }
                        };
                        r[((b * c + ch) * ho + oy) * wo + ox] = val;
                    }
                }
            }
        }
        map(op, "out", &out)?.write(Vals::F(r))
    })
}

phase2_entry_points!(aclnnGridSampler2D);
