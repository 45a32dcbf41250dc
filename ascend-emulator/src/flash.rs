//! Emulated flash attention: `aclnnFlashAttentionScore` and `aclnnFlashAttentionScoreGrad`
//! (prototypes: ../shared/ascend/aclnn-quant-attention-norm.md; semantics: CANN's operator docs
//! `attention/flash_attention_score/docs/aclnnFlashAttentionScore.md` and
//! `aclnnFlashAttentionScoreGrad.md`, Atlas A2 rows).
//!
//! `attention_out = softmax(mask(scale * (q k^T))) v`, computed as the kernel does: blockwise,
//! a tile of queries against a tile of keys at a time with an online softmax, so the host never
//! holds more than a `[TILE, TILE]` block of scores. The cube reads f16/bf16 operands exactly
//! and accumulates in f32; the probabilities enter the second product rounded to the inputs'
//! dtype (the cube's operand type), the softmax statistics stay f32. `softmaxMaxOut` and
//! `softmaxSumOut` are `[B, N1, Sq, 8]` f32, each row's value repeated 8 times. The backward
//! recomputes each score block from q, k and the saved statistics (no score matrix either).
//!
//! Readings the docs leave open (the stricter one taken):
//! - A masked score becomes "负的极小值" (the doc's implementation notes), emulated as f32's
//!   lowest finite value: a row whose every key is masked thus gets a uniform softmax (the mean
//!   of v), and callers must not rely on that row's output. `innerPrecise = 2` (the documented
//!   "invalid rows" mode, whose output the docs do not give) is refused; 0 and 1 (reserved)
//!   compute the same.
//! - Only the BNSD and BSND layouts are emulated (BSH, SBH are refused as not emulated; TND
//!   belongs to the VarLen variant). `sparseMode` 0 (full mask, with the preTokens/nextTokens
//!   band), 2 (leftUpCausal) and 3 (rightDownCausal) are emulated; 1, 4, 5, 6 are refused.
//!   Modes 2 and 3 read the compressed `[2048, 2048]` upper-triangular attenMask at the
//!   diagonal offset of each position, so a wrong mask gives wrong results, as on hardware.
//! - pse (`realShiftOptional`), dropout (`keepProb < 1`, `dropMaskOptional`), the reserved
//!   `paddingMaskOptional` and `prefixOptional` (sparse modes 5/6 only) are refused as not
//!   emulated; `softmaxOutOut` (reserved) must be NULL or empty. The grad requires the saved
//!   softmax max/sum and attentionIn (the recompute-from-softmaxIn path is not emulated).
//! - Every sequence length must be 1 to 1M (doc: "S：取值范围为1~1M"): an empty sequence is
//!   refused.

#![allow(
    missing_docs,
    non_snake_case,
    clippy::missing_safety_doc,
    clippy::too_many_arguments
)]

use std::ffi::{c_char, CStr};
use std::sync::Arc;

use super::fault::Fault;
use super::meta::{tensor_arg, Kernel, TensorDesc};
use super::numerics::round_to;
use super::ops::{check_dtype, invalid, phase1, phase2_entry_points, Ex, Ws, SCRATCH_WORKSPACE};
use super::view::{map, put_f32, take_f32, Mapped, Walk};
use ascend_acl::dtype::DataType::{self, *};
use ascend_acl::types::*;

phase2_entry_points!(aclnnFlashAttentionScore, aclnnFlashAttentionScoreGrad);

/// q/k/v dtypes on Atlas A2 (doc parameter table: FLOAT16, BFLOAT16, FLOAT32).
const FLOATS: &[DataType] = &[F16, BF16, F32];
const MASKS: &[DataType] = &[Bool, U8];
const STAT: &[DataType] = &[F32];
/// Doc limits: N1 1..=256, D 1..=768, S 1..=1M.
const MAX_HEADS: usize = 256;
const MAX_HEAD_DIM: usize = 768;
const MAX_SEQ: usize = 1 << 20;
/// The statistics' trailing dim on A2.
const STAT_LANES: usize = 8;
/// The compressed causal mask of sparse modes 2 and 3.
const COMPRESSED: usize = 2048;
/// Rows and columns of one score block.
const TILE: usize = 128;

/// `[B, N, S, D]` view of a q/k/v-like tensor, whatever its layout.
#[derive(Debug, Clone)]
struct Bnsd {
    desc: TensorDesc,
    shape: [usize; 4],
    strides: [isize; 4],
}

impl Bnsd {
    fn of(desc: TensorDesc, layout: Layout) -> Bnsd {
        let (s, st) = (&desc.shape, &desc.strides);
        let (shape, strides) = match layout {
            Layout::Bnsd => ([s[0], s[1], s[2], s[3]], [st[0], st[1], st[2], st[3]]),
            Layout::Bsnd => ([s[0], s[2], s[1], s[3]], [st[0], st[2], st[1], st[3]]),
        };
        Bnsd {
            desc,
            shape,
            strides: strides.map(|x| x as isize),
        }
    }

    /// The `[S, D]` slab of batch `b`, head `n`, rows `r0..r0 + rows`.
    fn walk(&self, b: usize, n: usize, r0: usize, rows: usize) -> Walk {
        let st = self.strides;
        let off = self.desc.offset as isize
            + b as isize * st[0]
            + n as isize * st[1]
            + r0 as isize * st[2];
        Walk::new(&[rows, self.shape[3]], &[st[2], st[3]], off as usize)
    }
}

#[derive(Debug, Clone, Copy)]
enum Layout {
    Bnsd,
    Bsnd,
}

fn layout_of(op: &str, p: *const c_char) -> Result<Layout, Fault> {
    if p.is_null() {
        return Err(invalid(op, "inputLayout is NULL"));
    }
    // SAFETY: the caller passes a NUL-terminated string (the header's `char *inputLayout`).
    let s = unsafe { CStr::from_ptr(p) }.to_string_lossy();
    match s.as_ref() {
        "BNSD" => Ok(Layout::Bnsd),
        "BSND" => Ok(Layout::Bsnd),
        "BSH" | "SBH" => Err(invalid(
            op,
            format!("inputLayout {s} is a documented layout the emulation does not implement (BNSD, BSND)"),
        )),
        _ => Err(invalid(
            op,
            format!("inputLayout {s:?} is not one of BSH, SBH, BSND, BNSD"),
        )),
    }
}

/// Which positions are masked.
#[derive(Debug, Clone)]
enum Sparse {
    /// Nothing masked (no attenMask: "固定为全计算").
    Full,
    /// Mode 0: the mask, and the band `r - pre <= c <= r + next`.
    Mask { mask: MaskView, pre: i64, next: i64 },
    /// Modes 2 and 3: the compressed mask at diagonal `c - r - offset`.
    Causal { mask: TensorDesc, offset: i64 },
}

/// attenMask as `[Bm, Nm, Sq, Sk]` with `Bm`, `Nm` 1 or the full extent.
#[derive(Debug, Clone)]
struct MaskView {
    desc: TensorDesc,
    strides: [isize; 4],
}

/// The checked call: the three operands as BNSD views and the masking.
#[derive(Debug, Clone)]
struct Call {
    q: Bnsd,
    k: Bnsd,
    v: Bnsd,
    scale: f32,
    sparse: Sparse,
}

impl Call {
    fn dims(&self) -> (usize, usize, usize, usize, usize, usize, usize) {
        let [b, n1, sq, d] = self.q.shape;
        let [_, n2, sk, _] = self.k.shape;
        (b, n1, n2, sq, sk, d, self.v.shape[3])
    }
}

/// The checks both operators share; returns the call and the attention output's BNSD shape.
fn check_call(
    op: &str,
    q: TensorDesc,
    k: TensorDesc,
    v: TensorDesc,
    mask: Option<TensorDesc>,
    scale: f64,
    keep_prob: f64,
    pre: i64,
    next: i64,
    head_num: i64,
    layout: Layout,
    inner_precise: i64,
    sparse_mode: i64,
) -> Result<Call, Fault> {
    for (name, t) in [("query", &q), ("key", &k), ("value", &v)] {
        check_dtype(op, name, t, FLOATS)?;
        if t.shape.len() != 4 {
            return Err(invalid(
                op,
                format!("{name} {} must have 4 dims in its layout", t.describe()),
            ));
        }
    }
    if k.dtype != q.dtype || v.dtype != q.dtype {
        return Err(invalid(
            op,
            format!(
                "query {}, key {} and value {} must share one dtype",
                q.describe(),
                k.describe(),
                v.describe()
            ),
        ));
    }
    let (q, k, v) = (
        Bnsd::of(q, layout),
        Bnsd::of(k, layout),
        Bnsd::of(v, layout),
    );
    let shapes = || {
        format!(
            "query {:?}, key {:?}, value {:?} (as BNSD)",
            q.shape, k.shape, v.shape
        )
    };
    let [b, n1, sq, d] = q.shape;
    let [kb, n2, sk, kd] = k.shape;
    let [vb, vn, vs, dv] = v.shape;
    if kb != b || vb != b || vn != n2 || vs != sk {
        return Err(invalid(
            op,
            format!("{}: B must agree and key/value differ only in D", shapes()),
        ));
    }
    if !(1..=MAX_SEQ).contains(&sq) || !(1..=MAX_SEQ).contains(&sk) || b == 0 {
        return Err(invalid(
            op,
            format!(
                "{}: B and S must be at least 1, S at most {MAX_SEQ}",
                shapes()
            ),
        ));
    }
    if kd != d || dv > d || !(1..=MAX_HEAD_DIM).contains(&d) || dv == 0 {
        return Err(invalid(
            op,
            format!(
                "{}: head dims must satisfy qD == kD >= vD >= 1, D <= {MAX_HEAD_DIM}",
                shapes()
            ),
        ));
    }
    if !(1..=MAX_HEADS).contains(&n1) || n2 == 0 || n1 % n2 != 0 {
        return Err(invalid(
            op,
            format!(
                "{}: query heads must be 1 to {MAX_HEADS} and a multiple of the key/value heads",
                shapes()
            ),
        ));
    }
    if head_num != n1 as i64 {
        return Err(invalid(
            op,
            format!("headNum {head_num} differs from query's N {n1}"),
        ));
    }
    if !scale.is_finite() {
        return Err(invalid(op, format!("scaleValue {scale} must be finite")));
    }
    if !(keep_prob > 0.0 && keep_prob <= 1.0) {
        return Err(invalid(
            op,
            format!("keepProb {keep_prob} must be in (0, 1]"),
        ));
    }
    if keep_prob != 1.0 {
        return Err(invalid(
            op,
            format!("keepProb {keep_prob}: dropout is not emulated (keepProb must be 1)"),
        ));
    }
    match inner_precise {
        0 | 1 => {}
        2 => {
            return Err(invalid(
                op,
                "innerPrecise 2 (invalid-row computation) is not emulated: its output for \
                 fully masked rows is undocumented",
            ))
        }
        _ => {
            return Err(invalid(
                op,
                format!("innerPrecise {inner_precise} is not 0, 1 or 2"),
            ))
        }
    }
    let sparse = match (sparse_mode, mask) {
        (0..=6, None) => Sparse::Full,
        (0, Some(m)) => {
            check_dtype(op, "attenMask", &m, MASKS)?;
            let (s, st) = (&m.shape, &m.strides);
            let fits = match s.len() {
                2 => s[..] == [sq, sk],
                4 => [(b, n1), (b, 1), (1, 1)].contains(&(s[0], s[1])) && s[2..] == [sq, sk],
                _ => false,
            };
            if !fits {
                return Err(invalid(
                    op,
                    format!(
                        "attenMask {} must be [B,N,Sq,Skv], [B,1,Sq,Skv], [1,1,Sq,Skv] or \
                         [Sq,Skv] for {}",
                        m.describe(),
                        shapes()
                    ),
                ));
            }
            if pre.saturating_add(next) < 0 {
                return Err(invalid(
                    op,
                    format!("preTokens {pre} and nextTokens {next} leave an empty band"),
                ));
            }
            let strides = if s.len() == 2 {
                [0, 0, st[0] as isize, st[1] as isize]
            } else {
                let z = |i: usize| if s[i] == 1 { 0 } else { st[i] as isize };
                [z(0), z(1), st[2] as isize, st[3] as isize]
            };
            Sparse::Mask {
                mask: MaskView { desc: m, strides },
                pre,
                next,
            }
        }
        (2 | 3, Some(m)) => {
            check_dtype(op, "attenMask", &m, MASKS)?;
            if m.shape[..] != [COMPRESSED, COMPRESSED] {
                return Err(invalid(
                    op,
                    format!(
                        "sparseMode {sparse_mode} takes the compressed [2048, 2048] attenMask, \
                         got {}",
                        m.describe()
                    ),
                ));
            }
            let offset = if sparse_mode == 3 {
                sk as i64 - sq as i64
            } else {
                0
            };
            Sparse::Causal { mask: m, offset }
        }
        (1 | 4 | 5 | 6, Some(_)) => {
            return Err(invalid(
                op,
                format!("sparseMode {sparse_mode} is documented but not emulated (0, 2, 3)"),
            ))
        }
        _ => {
            return Err(invalid(
                op,
                format!("sparseMode {sparse_mode} is not 0 to 6"),
            ))
        }
    };
    Ok(Call {
        q,
        k,
        v,
        scale: scale as f32,
        sparse,
    })
}

fn refuse_present(op: &str, name: &str, p: *const aclTensor, why: &str) -> Result<(), Fault> {
    if p.is_null() {
        Ok(())
    } else {
        Err(invalid(op, format!("{name} is not NULL: {why}")))
    }
}

/// The inputs both operators take and the emulation does not implement: dropout's mask, the
/// reserved padding mask, and the prefix of sparse modes 5/6.
fn refuse_unemulated(
    op: &str,
    drop_mask: *const aclTensor,
    padding_mask: *const aclTensor,
    prefix: *const aclIntArray,
) -> Result<(), Fault> {
    refuse_present(op, "dropMaskOptional", drop_mask, "dropout is not emulated")?;
    refuse_present(op, "paddingMaskOptional", padding_mask, "it is reserved")?;
    if prefix.is_null() {
        Ok(())
    } else {
        Err(invalid(
            op,
            "prefixOptional is not NULL: it serves sparseMode 5/6, which are not emulated",
        ))
    }
}

/// A reserved or unused output: NULL or empty.
unsafe fn empty_or_null(op: &str, name: &str, p: *const aclTensor) -> Result<(), Fault> {
    if p.is_null() {
        return Ok(());
    }
    let t = tensor_arg(op, name, p)?;
    if t.numel() == 0 {
        Ok(())
    } else {
        Err(invalid(
            op,
            format!(
                "{name} {} must be NULL or empty (not emulated)",
                t.describe()
            ),
        ))
    }
}

fn check_like(op: &str, name: &str, t: &TensorDesc, want: &TensorDesc) -> Result<(), Fault> {
    if t.shape == want.shape && t.dtype == want.dtype {
        Ok(())
    } else {
        Err(invalid(
            op,
            format!("{name} {} must be {}", t.describe(), want.describe()),
        ))
    }
}

/// The attention output's descriptor shape: q's with D replaced by v's.
fn out_shape(q: &TensorDesc, dv: usize) -> Vec<usize> {
    let mut s = q.shape.clone();
    s[3] = dv;
    s
}

fn check_stat(
    op: &str,
    name: &str,
    t: &TensorDesc,
    b: usize,
    n1: usize,
    sq: usize,
) -> Result<(), Fault> {
    check_dtype(op, name, t, STAT)?;
    if t.shape[..] != [b, n1, sq, STAT_LANES] {
        return Err(invalid(
            op,
            format!(
                "{name} {} must be [{b}, {n1}, {sq}, {STAT_LANES}]",
                t.describe()
            ),
        ));
    }
    Ok(())
}

/// The mapped masking of a call, read tile by tile.
enum MaskRead {
    Full,
    Mask {
        m: Mapped,
        strides: [isize; 4],
        pre: i64,
        next: i64,
    },
    /// Row 0 and column 0 of the compressed mask (all the diagonal offsets it encodes).
    Causal {
        row0: Vec<f32>,
        col0: Vec<f32>,
        offset: i64,
    },
}

impl MaskRead {
    fn new(op: &str, sparse: &Sparse) -> Result<MaskRead, Fault> {
        Ok(match sparse {
            Sparse::Full => MaskRead::Full,
            Sparse::Mask { mask, pre, next } => MaskRead::Mask {
                m: map(op, "attenMask", &mask.desc)?,
                strides: mask.strides,
                pre: *pre,
                next: *next,
            },
            Sparse::Causal { mask, offset } => {
                let m = map(op, "attenMask", mask)?;
                let st = [mask.strides[0] as isize, mask.strides[1] as isize];
                let (mut row0, mut col0) = (Vec::new(), Vec::new());
                let off = mask.offset;
                take_f32(
                    &mut row0,
                    &m,
                    &mut Walk::new(&[COMPRESSED], &[st[1]], off),
                    COMPRESSED,
                );
                take_f32(
                    &mut col0,
                    &m,
                    &mut Walk::new(&[COMPRESSED], &[st[0]], off),
                    COMPRESSED,
                );
                MaskRead::Causal {
                    row0,
                    col0,
                    offset: *offset,
                }
            }
        })
    }

    /// Fills `masked` (`rows x cols`, row-major) for the block at (`r0`, `c0`) of (b, n).
    fn block(
        &self,
        b: usize,
        n: usize,
        r0: usize,
        rows: usize,
        c0: usize,
        cols: usize,
        masked: &mut Vec<bool>,
        buf: &mut Vec<f32>,
    ) {
        masked.clear();
        match self {
            MaskRead::Full => masked.resize(rows * cols, false),
            MaskRead::Mask {
                m,
                strides,
                pre,
                next,
            } => {
                let off = m.desc.offset as isize
                    + b as isize * strides[0]
                    + n as isize * strides[1]
                    + r0 as isize * strides[2]
                    + c0 as isize * strides[3];
                let mut walk = Walk::new(&[rows, cols], &[strides[2], strides[3]], off as usize);
                take_f32(buf, m, &mut walk, rows * cols);
                for r in 0..rows {
                    let row = (r0 + r) as i64;
                    for c in 0..cols {
                        let col = (c0 + c) as i64;
                        let band =
                            col > row.saturating_add(*next) || col < row.saturating_sub(*pre);
                        masked.push(buf[r * cols + c] != 0.0 || band);
                    }
                }
            }
            MaskRead::Causal { row0, col0, offset } => {
                for r in 0..rows {
                    for c in 0..cols {
                        let d = (c0 + c) as i64 - (r0 + r) as i64 - offset;
                        let last = COMPRESSED as i64 - 1;
                        let v = if d >= 0 {
                            row0[d.min(last) as usize]
                        } else {
                            col0[(-d).min(last) as usize]
                        };
                        masked.push(v != 0.0);
                    }
                }
            }
        }
    }
}

/// Reads the `[rows, D]` slab of (b, n) from row `r0` as f32.
fn slab(m: &Mapped, v: &Bnsd, b: usize, n: usize, r0: usize, rows: usize, buf: &mut Vec<f32>) {
    let mut walk = v.walk(b, n, r0, rows);
    take_f32(buf, m, &mut walk, rows * v.shape[3]);
}

fn write_slab(m: &Mapped, v: &Bnsd, b: usize, n: usize, values: &[f32]) {
    let rows = v.shape[2];
    let mut walk = v.walk(b, n, 0, rows);
    put_f32(m, &mut walk, values);
}

/// Rounds values to a dtype's precision (the cube's operand type).
fn rounded(dtype: DataType, values: &mut [f32]) {
    if dtype != F32 {
        values
            .iter_mut()
            .for_each(|x| *x = round_to(dtype, *x as f64) as f32);
    }
}

/// `scale * q_r . k_c` for a block, masked scores set to f32's lowest finite value.
fn scores(
    q: &[f32],
    k: &[f32],
    d: usize,
    r0: usize,
    rows: usize,
    c0: usize,
    cols: usize,
    scale: f32,
    masked: &[bool],
    s: &mut Vec<f32>,
) {
    s.clear();
    for r in 0..rows {
        let qr = &q[(r0 + r) * d..(r0 + r + 1) * d];
        for c in 0..cols {
            let kc = &k[(c0 + c) * d..(c0 + c + 1) * d];
            let dot: f32 = qr.iter().zip(kc).map(|(a, b)| a * b).sum();
            s.push(if masked[r * cols + c] {
                f32::MIN
            } else {
                dot * scale
            });
        }
    }
}

/// The forward kernel.
struct Forward {
    call: Call,
    max: TensorDesc,
    sum: TensorDesc,
    out: Bnsd,
}

impl Forward {
    fn run(&self) -> Result<(), Fault> {
        const OP: &str = "aclnnFlashAttentionScore";
        let c = &self.call;
        let (b, n1, n2, sq, sk, d, dv) = c.dims();
        let dtype = c.q.desc.dtype;
        let (mq, mk, mv) = (
            map(OP, "query", &c.q.desc)?,
            map(OP, "key", &c.k.desc)?,
            map(OP, "value", &c.v.desc)?,
        );
        let (mo, mmax, msum) = (
            map(OP, "attentionOutOut", &self.out.desc)?,
            map(OP, "softmaxMaxOut", &self.max)?,
            map(OP, "softmaxSumOut", &self.sum)?,
        );
        let mask = MaskRead::new(OP, &c.sparse)?;
        let (mut max_w, mut sum_w) = (Walk::of(&self.max), Walk::of(&self.sum));
        let (mut q, mut k, mut v) = (Vec::new(), Vec::new(), Vec::new());
        let (mut masked, mut buf, mut s) = (Vec::new(), Vec::new(), Vec::new());
        let mut out = vec![0f32; sq * dv];
        let group = n1 / n2;
        for bi in 0..b {
            for ni in 0..n1 {
                slab(&mq, &c.q, bi, ni, 0, sq, &mut q);
                slab(&mk, &c.k, bi, ni / group, 0, sk, &mut k);
                slab(&mv, &c.v, bi, ni / group, 0, sk, &mut v);
                let (mut stat_max, mut stat_sum) =
                    (Vec::with_capacity(sq * 8), Vec::with_capacity(sq * 8));
                for r0 in (0..sq).step_by(TILE) {
                    let rows = TILE.min(sq - r0);
                    let mut m = vec![f32::NEG_INFINITY; rows];
                    let mut l = vec![0f32; rows];
                    let acc = &mut out[r0 * dv..(r0 + rows) * dv];
                    acc.fill(0.0);
                    for c0 in (0..sk).step_by(TILE) {
                        let cols = TILE.min(sk - c0);
                        mask.block(bi, ni, r0, rows, c0, cols, &mut masked, &mut buf);
                        scores(&q, &k, d, r0, rows, c0, cols, c.scale, &masked, &mut s);
                        for r in 0..rows {
                            let row = &mut s[r * cols..(r + 1) * cols];
                            let block_max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                            let m_new = m[r].max(block_max);
                            let alpha = (m[r] - m_new).exp();
                            let mut block_sum = 0f32;
                            for x in row.iter_mut() {
                                *x = (*x - m_new).exp();
                                block_sum += *x;
                            }
                            l[r] = l[r] * alpha + block_sum;
                            m[r] = m_new;
                            rounded(dtype, row);
                            let a = &mut acc[r * dv..(r + 1) * dv];
                            a.iter_mut().for_each(|x| *x *= alpha);
                            for (ci, &p) in row.iter().enumerate() {
                                let vc = &v[(c0 + ci) * dv..(c0 + ci + 1) * dv];
                                a.iter_mut().zip(vc).for_each(|(x, &y)| *x += p * y);
                            }
                        }
                    }
                    for r in 0..rows {
                        acc[r * dv..(r + 1) * dv]
                            .iter_mut()
                            .for_each(|x| *x /= l[r]);
                        stat_max.extend([m[r]; STAT_LANES]);
                        stat_sum.extend([l[r]; STAT_LANES]);
                    }
                }
                write_slab(&mo, &self.out, bi, ni, &out);
                put_f32(&mmax, &mut max_w, &stat_max);
                put_f32(&msum, &mut sum_w, &stat_sum);
            }
        }
        Ok(())
    }
}

pub unsafe extern "C" fn aclnnFlashAttentionScoreGetWorkspaceSize(
    query: *const aclTensor,
    key: *const aclTensor,
    value: *const aclTensor,
    real_shift_optional: *const aclTensor,
    drop_mask_optional: *const aclTensor,
    padding_mask_optional: *const aclTensor,
    atten_mask_optional: *const aclTensor,
    prefix_optional: *const aclIntArray,
    scale_value: f64,
    keep_prob: f64,
    pre_tokens: i64,
    next_tokens: i64,
    head_num: i64,
    input_layout: *mut c_char,
    inner_precise: i64,
    sparse_mode: i64,
    softmax_max_out: *const aclTensor,
    softmax_sum_out: *const aclTensor,
    softmax_out_out: *const aclTensor,
    attention_out_out: *const aclTensor,
    ws: Ws,
    ex: Ex,
) -> aclnnStatus {
    const OP: &str = "aclnnFlashAttentionScore";
    phase1(OP, ws, ex, || {
        let (q, k, v) = (
            tensor_arg(OP, "query", query)?,
            tensor_arg(OP, "key", key)?,
            tensor_arg(OP, "value", value)?,
        );
        refuse_present(
            OP,
            "realShiftOptional",
            real_shift_optional,
            "pse is not emulated",
        )?;
        refuse_unemulated(
            OP,
            drop_mask_optional,
            padding_mask_optional,
            prefix_optional,
        )?;
        let mask = (!atten_mask_optional.is_null())
            .then(|| tensor_arg(OP, "attenMaskOptional", atten_mask_optional))
            .transpose()?;
        let layout = layout_of(OP, input_layout)?;
        let q_desc = q.clone();
        let call = check_call(
            OP,
            q,
            k,
            v,
            mask,
            scale_value,
            keep_prob,
            pre_tokens,
            next_tokens,
            head_num,
            layout,
            inner_precise,
            sparse_mode,
        )?;
        let (b, n1, _, sq, _, _, dv) = call.dims();
        let max = tensor_arg(OP, "softmaxMaxOut", softmax_max_out)?;
        let sum = tensor_arg(OP, "softmaxSumOut", softmax_sum_out)?;
        check_stat(OP, "softmaxMaxOut", &max, b, n1, sq)?;
        check_stat(OP, "softmaxSumOut", &sum, b, n1, sq)?;
        empty_or_null(OP, "softmaxOutOut", softmax_out_out)?;
        let out = tensor_arg(OP, "attentionOutOut", attention_out_out)?;
        if out.shape != out_shape(&q_desc, dv) || out.dtype != q_desc.dtype {
            return Err(invalid(
                OP,
                format!(
                    "attentionOutOut {} must be {:?} {}",
                    out.describe(),
                    out_shape(&q_desc, dv),
                    q_desc.dtype
                ),
            ));
        }
        let f = Forward {
            call,
            max,
            sum,
            out: Bnsd::of(out, layout),
        };
        Ok((SCRATCH_WORKSPACE, Arc::new(move || f.run()) as Kernel))
    })
}

/// The backward kernel.
struct Backward {
    call: Call,
    dy: Bnsd,
    o: Bnsd,
    max: TensorDesc,
    sum: TensorDesc,
    dq: Bnsd,
    dk: Bnsd,
    dv: Bnsd,
}

impl Backward {
    fn run(&self) -> Result<(), Fault> {
        const OP: &str = "aclnnFlashAttentionScoreGrad";
        let c = &self.call;
        let (b, n1, n2, sq, sk, d, dvd) = c.dims();
        let dtype = c.q.desc.dtype;
        let (mq, mk, mv) = (
            map(OP, "query", &c.q.desc)?,
            map(OP, "keyIn", &c.k.desc)?,
            map(OP, "value", &c.v.desc)?,
        );
        let (mdy, mo) = (
            map(OP, "dy", &self.dy.desc)?,
            map(OP, "attentionIn", &self.o.desc)?,
        );
        let (mmax, msum) = (
            map(OP, "softmaxMax", &self.max)?,
            map(OP, "softmaxSum", &self.sum)?,
        );
        let (mdq, mdk, mdv) = (
            map(OP, "dqOut", &self.dq.desc)?,
            map(OP, "dkOut", &self.dk.desc)?,
            map(OP, "dvOut", &self.dv.desc)?,
        );
        let mask = MaskRead::new(OP, &c.sparse)?;
        let (mut max_w, mut sum_w) = (Walk::of(&self.max), Walk::of(&self.sum));
        let (mut q, mut k, mut v, mut dy, mut o) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let (mut masked, mut buf, mut s, mut stat) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let group = n1 / n2;
        for bi in 0..b {
            let mut dk_acc = vec![vec![0f32; sk * d]; n2];
            let mut dv_acc = vec![vec![0f32; sk * dvd]; n2];
            for ni in 0..n1 {
                let g = ni / group;
                slab(&mq, &c.q, bi, ni, 0, sq, &mut q);
                slab(&mk, &c.k, bi, g, 0, sk, &mut k);
                slab(&mv, &c.v, bi, g, 0, sk, &mut v);
                slab(&mdy, &self.dy, bi, ni, 0, sq, &mut dy);
                slab(&mo, &self.o, bi, ni, 0, sq, &mut o);
                take_f32(&mut stat, &mmax, &mut max_w, sq * STAT_LANES);
                let row_max: Vec<f32> = stat.iter().step_by(STAT_LANES).copied().collect();
                take_f32(&mut stat, &msum, &mut sum_w, sq * STAT_LANES);
                let row_sum: Vec<f32> = stat.iter().step_by(STAT_LANES).copied().collect();
                // D_r = dy_r . o_r, the softmax backward's row term.
                let dterm: Vec<f32> = (0..sq)
                    .map(|r| {
                        let (a, b) = (&dy[r * dvd..(r + 1) * dvd], &o[r * dvd..(r + 1) * dvd]);
                        a.iter().zip(b).map(|(x, y)| x * y).sum()
                    })
                    .collect();
                let mut dq = vec![0f32; sq * d];
                let (dk, dv) = (&mut dk_acc[g], &mut dv_acc[g]);
                for r0 in (0..sq).step_by(TILE) {
                    let rows = TILE.min(sq - r0);
                    for c0 in (0..sk).step_by(TILE) {
                        let cols = TILE.min(sk - c0);
                        mask.block(bi, ni, r0, rows, c0, cols, &mut masked, &mut buf);
                        scores(&q, &k, d, r0, rows, c0, cols, c.scale, &masked, &mut s);
                        for r in 0..rows {
                            let (rr, row) = (r0 + r, &mut s[r * cols..(r + 1) * cols]);
                            let dyr = &dy[rr * dvd..(rr + 1) * dvd];
                            let qr = &q[rr * d..(rr + 1) * d];
                            for (ci, x) in row.iter_mut().enumerate() {
                                let cc = c0 + ci;
                                let p = (*x - row_max[rr]).exp() / row_sum[rr];
                                let vc = &v[cc * dvd..(cc + 1) * dvd];
                                let dp: f32 = dyr.iter().zip(vc).map(|(a, b)| a * b).sum();
                                // The cube's operands: p and dS rounded to the inputs' dtype.
                                let pr = round_to(dtype, p as f64) as f32;
                                let ds = round_to(dtype, (p * (dp - dterm[rr])) as f64) as f32;
                                dv[cc * dvd..(cc + 1) * dvd]
                                    .iter_mut()
                                    .zip(dyr)
                                    .for_each(|(acc, &g)| *acc += pr * g);
                                let kc = &k[cc * d..(cc + 1) * d];
                                dq[rr * d..(rr + 1) * d]
                                    .iter_mut()
                                    .zip(kc)
                                    .for_each(|(acc, &kv)| *acc += c.scale * ds * kv);
                                dk[cc * d..(cc + 1) * d]
                                    .iter_mut()
                                    .zip(qr)
                                    .for_each(|(acc, &qv)| *acc += c.scale * ds * qv);
                            }
                        }
                    }
                }
                write_slab(&mdq, &self.dq, bi, ni, &dq);
            }
            for g in 0..n2 {
                write_slab(&mdk, &self.dk, bi, g, &dk_acc[g]);
                write_slab(&mdv, &self.dv, bi, g, &dv_acc[g]);
            }
        }
        Ok(())
    }
}

pub unsafe extern "C" fn aclnnFlashAttentionScoreGradGetWorkspaceSize(
    query: *const aclTensor,
    key_in: *const aclTensor,
    value: *const aclTensor,
    dy: *const aclTensor,
    pse_shift_optional: *const aclTensor,
    drop_mask_optional: *const aclTensor,
    padding_mask_optional: *const aclTensor,
    atten_mask_optional: *const aclTensor,
    softmax_max_optional: *const aclTensor,
    softmax_sum_optional: *const aclTensor,
    softmax_in_optional: *const aclTensor,
    attention_in_optional: *const aclTensor,
    prefix_optional: *const aclIntArray,
    scale_value: f64,
    keep_prob: f64,
    pre_tokens: i64,
    next_tokens: i64,
    head_num: i64,
    input_layout: *mut c_char,
    inner_precise: i64,
    sparse_mode: i64,
    dq_out: *const aclTensor,
    dk_out: *const aclTensor,
    dv_out: *const aclTensor,
    dpse_out: *const aclTensor,
    ws: Ws,
    ex: Ex,
) -> aclnnStatus {
    const OP: &str = "aclnnFlashAttentionScoreGrad";
    phase1(OP, ws, ex, || {
        let (q, k, v) = (
            tensor_arg(OP, "query", query)?,
            tensor_arg(OP, "keyIn", key_in)?,
            tensor_arg(OP, "value", value)?,
        );
        let dy = tensor_arg(OP, "dy", dy)?;
        refuse_present(
            OP,
            "pseShiftOptional",
            pse_shift_optional,
            "pse is not emulated",
        )?;
        refuse_unemulated(
            OP,
            drop_mask_optional,
            padding_mask_optional,
            prefix_optional,
        )?;
        empty_or_null(OP, "softmaxInOptional", softmax_in_optional)?;
        if softmax_max_optional.is_null()
            || softmax_sum_optional.is_null()
            || attention_in_optional.is_null()
        {
            return Err(invalid(
                OP,
                "softmaxMaxOptional, softmaxSumOptional and attentionInOptional are required \
                 (the forward's saved statistics and output)",
            ));
        }
        let max = tensor_arg(OP, "softmaxMaxOptional", softmax_max_optional)?;
        let sum = tensor_arg(OP, "softmaxSumOptional", softmax_sum_optional)?;
        let o = tensor_arg(OP, "attentionInOptional", attention_in_optional)?;
        let mask = (!atten_mask_optional.is_null())
            .then(|| tensor_arg(OP, "attenMaskOptional", atten_mask_optional))
            .transpose()?;
        let layout = layout_of(OP, input_layout)?;
        let (qd, kd, vd) = (q.clone(), k.clone(), v.clone());
        let call = check_call(
            OP,
            q,
            k,
            v,
            mask,
            scale_value,
            keep_prob,
            pre_tokens,
            next_tokens,
            head_num,
            layout,
            inner_precise,
            sparse_mode,
        )?;
        let (b, n1, _, sq, _, _, dv) = call.dims();
        check_stat(OP, "softmaxMaxOptional", &max, b, n1, sq)?;
        check_stat(OP, "softmaxSumOptional", &sum, b, n1, sq)?;
        let want_out = TensorDesc {
            shape: out_shape(&qd, dv),
            ..qd.clone()
        };
        check_like(OP, "dy", &dy, &want_out)?;
        check_like(OP, "attentionInOptional", &o, &want_out)?;
        let (dq, dk, dvo) = (
            tensor_arg(OP, "dqOut", dq_out)?,
            tensor_arg(OP, "dkOut", dk_out)?,
            tensor_arg(OP, "dvOut", dv_out)?,
        );
        check_like(OP, "dqOut", &dq, &qd)?;
        check_like(OP, "dkOut", &dk, &kd)?;
        check_like(OP, "dvOut", &dvo, &vd)?;
        empty_or_null(OP, "dpseOut", dpse_out)?;
        let f = Backward {
            call,
            dy: Bnsd::of(dy, layout),
            o: Bnsd::of(o, layout),
            max,
            sum,
            dq: Bnsd::of(dq, layout),
            dk: Bnsd::of(dk, layout),
            dv: Bnsd::of(dvo, layout),
        };
        Ok((SCRATCH_WORKSPACE, Arc::new(move || f.run()) as Kernel))
    })
}
