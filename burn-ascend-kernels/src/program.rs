//! The programs `elementwise_program` interprets: a chain of element-wise vector instructions
//! over f32 tile registers, the layout of its operands on the `[rows, cols]` grid, and the
//! encoding the kernel reads (the word layout is described in `kernels/elementwise_program.cpp`).
//!
//! Programs are written with virtual registers (one per value); [`Program::compile`] assigns
//! physical registers by liveness, so a long chain needs few unified-buffer tiles.

use std::fmt;

/// Operand rank the kernel addresses (outer dims plus the row).
pub const MAX_RANK: usize = 8;
/// Inputs one program may read.
pub const MAX_INPUTS: usize = 8;
/// Outputs one program may write.
pub const MAX_OUTPUTS: usize = 8;
/// Instructions one program may hold.
pub const MAX_CODE: usize = 128;
/// Physical registers one program may use.
pub const MAX_REGS: usize = 24;

const INPUT_WORDS: usize = 8 + 2 * MAX_RANK;
const OUTPUT_WORDS: usize = 4;
const CODE_WORDS: usize = 4;

/// Element types of program operands in global memory (registers are always f32).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum ElemType {
    /// f32
    F32 = 0,
    /// f16
    F16 = 1,
    /// bf16
    BF16 = 2,
    /// bool, one byte (0 or 1)
    Bool = 3,
}

impl ElemType {
    /// Bytes per element in global memory.
    pub fn bytes(self) -> u64 {
        match self {
            ElemType::F32 => 4,
            ElemType::F16 | ElemType::BF16 => 2,
            ElemType::Bool => 1,
        }
    }
}

/// Comparison modes (Ascend C `CMPMODE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum Cmp {
    /// a < b
    Lt = 0,
    /// a > b
    Gt = 1,
    /// a == b
    Eq = 2,
    /// a <= b
    Le = 3,
    /// a >= b
    Ge = 4,
    /// a != b
    Ne = 5,
}

/// Rounding to an integral value (Ascend C `RoundMode`, f32 to f32).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum Rounding {
    /// To nearest, ties to even.
    Rint = 1,
    /// Towards -inf.
    Floor = 2,
    /// Towards +inf.
    Ceil = 3,
    /// Towards zero.
    Trunc = 5,
}

/// A virtual register: one value of the program.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Value(pub u32);

/// One instruction: `dst = op(a, b, c)` (unused operands are ignored).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Op {
    /// a + b
    Add(Value, Value),
    /// a - b
    Sub(Value, Value),
    /// a * b
    Mul(Value, Value),
    /// a / b
    Div(Value, Value),
    /// max(a, b)
    Max(Value, Value),
    /// min(a, b)
    Min(Value, Value),
    /// a + s
    AddS(Value, f32),
    /// a * s
    MulS(Value, f32),
    /// max(a, s)
    MaxS(Value, f32),
    /// min(a, s)
    MinS(Value, f32),
    /// e^a
    Exp(Value),
    /// ln a
    Ln(Value),
    /// |a|
    Abs(Value),
    /// sqrt a
    Sqrt(Value),
    /// max(a, 0)
    Relu(Value),
    /// s everywhere
    Dup(f32),
    /// 1 where `a cmp b`, else 0
    Cmp(Value, Cmp, Value),
    /// 1 where `a cmp s`, else 0
    CmpS(Value, Cmp, f32),
    /// `then` where `cond` != 0, else `otherwise`
    Select {
        /// The condition (0 or not).
        cond: Value,
        /// Taken where the condition holds.
        then: Value,
        /// Taken elsewhere.
        otherwise: Value,
    },
    /// a rounded to an integral value
    Round(Value, Rounding),
    /// a rounded to the precision of f16 or bf16 (and back to f32)
    Narrow(Value, ElemType),
}

impl Op {
    fn sources(&self) -> Vec<Value> {
        match *self {
            Op::Add(a, b)
            | Op::Sub(a, b)
            | Op::Mul(a, b)
            | Op::Div(a, b)
            | Op::Max(a, b)
            | Op::Min(a, b)
            | Op::Cmp(a, _, b) => vec![a, b],
            Op::AddS(a, _)
            | Op::MulS(a, _)
            | Op::MaxS(a, _)
            | Op::MinS(a, _)
            | Op::Exp(a)
            | Op::Ln(a)
            | Op::Abs(a)
            | Op::Sqrt(a)
            | Op::Relu(a)
            | Op::CmpS(a, _, _)
            | Op::Round(a, _)
            | Op::Narrow(a, _) => vec![a],
            Op::Dup(_) => vec![],
            Op::Select {
                cond,
                then,
                otherwise,
            } => vec![cond, then, otherwise],
        }
    }

    fn uses_mask(&self) -> bool {
        matches!(self, Op::Cmp(..) | Op::CmpS(..) | Op::Select { .. })
    }

    /// The instruction with physical registers, numbered as the kernel's `Op` enum.
    fn encode(&self, reg: impl Fn(Value) -> u32) -> Encoded {
        let un = |code: u32, a: Value| (code, reg(a), 0, 0, 0, 0.0);
        let bin = |code: u32, a: Value, b: Value| (code, reg(a), reg(b), 0, 0, 0.0);
        let sc = |code: u32, a: Value, s: f32| (code, reg(a), 0, 0, 0, s);
        let (op, a, b, c, mode, s) = match *self {
            Op::Add(a, b) => bin(0, a, b),
            Op::Sub(a, b) => bin(1, a, b),
            Op::Mul(a, b) => bin(2, a, b),
            Op::Div(a, b) => bin(3, a, b),
            Op::Max(a, b) => bin(4, a, b),
            Op::Min(a, b) => bin(5, a, b),
            Op::AddS(a, s) => sc(6, a, s),
            Op::MulS(a, s) => sc(7, a, s),
            Op::MaxS(a, s) => sc(8, a, s),
            Op::MinS(a, s) => sc(9, a, s),
            Op::Exp(a) => un(10, a),
            Op::Ln(a) => un(11, a),
            Op::Abs(a) => un(12, a),
            Op::Sqrt(a) => un(13, a),
            Op::Relu(a) => un(14, a),
            Op::Dup(s) => (15, 0, 0, 0, 0, s),
            Op::Cmp(a, m, b) => (16, reg(a), reg(b), 0, m as u32, 0.0),
            Op::CmpS(a, m, s) => (17, reg(a), 0, 0, m as u32, s),
            Op::Select {
                cond,
                then,
                otherwise,
            } => (18, reg(then), reg(otherwise), reg(cond), 0, 0.0),
            Op::Round(a, r) => (19, reg(a), 0, 0, r as u32, 0.0),
            Op::Narrow(a, t) => (20, reg(a), 0, 0, t as u32, 0.0),
        };
        Encoded {
            op,
            a,
            b,
            c,
            mode,
            s,
        }
    }
}

/// An instruction as the kernel reads it: opcode, source registers, mode and scalar.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Encoded {
    op: u32,
    a: u32,
    b: u32,
    c: u32,
    mode: u32,
    s: f32,
}

/// A program under construction: inputs, instructions and outputs over virtual registers.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Program {
    inputs: Vec<(Value, ElemType)>,
    code: Vec<(Value, Op)>,
    outputs: Vec<(Value, ElemType)>,
    next: u32,
}

/// Why a program cannot run as one kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProgramError {
    /// More inputs, outputs, instructions or registers than the kernel holds.
    TooLarge(String),
}

impl fmt::Display for ProgramError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProgramError::TooLarge(what) => write!(f, "elementwise program too large: {what}"),
        }
    }
}

impl std::error::Error for ProgramError {}

impl Program {
    /// An empty program.
    pub fn new() -> Self {
        Self::default()
    }

    /// Declares the next input (inputs are numbered in declaration order); its value is loaded
    /// at the start of every tile.
    pub fn input(&mut self, dtype: ElemType) -> Value {
        let v = self.fresh();
        self.inputs.push((v, dtype));
        v
    }

    /// Appends `op` and returns its result.
    pub fn push(&mut self, op: Op) -> Value {
        let v = self.fresh();
        self.code.push((v, op));
        v
    }

    /// Declares the next output (outputs are numbered in declaration order): `value`, stored as
    /// `dtype`.
    pub fn output(&mut self, value: Value, dtype: ElemType) {
        self.outputs.push((value, dtype));
    }

    /// Inputs declared so far.
    pub fn num_inputs(&self) -> usize {
        self.inputs.len()
    }

    /// Instructions so far.
    pub fn len(&self) -> usize {
        self.code.len()
    }

    /// Whether the program has no instructions.
    pub fn is_empty(&self) -> bool {
        self.code.is_empty()
    }

    fn fresh(&mut self) -> Value {
        self.next += 1;
        Value(self.next - 1)
    }

    /// Assigns physical registers: a value's register is free again after its last use, and an
    /// instruction may write the register of an operand it reads last (element-wise vector
    /// instructions allow a destination identical to a source).
    pub fn compile(&self) -> Result<Compiled, ProgramError> {
        let limit = |what: &str, n: usize, max: usize| {
            if n > max {
                Err(ProgramError::TooLarge(format!(
                    "{n} {what} (at most {max})"
                )))
            } else {
                Ok(())
            }
        };
        limit("inputs", self.inputs.len(), MAX_INPUTS)?;
        limit("outputs", self.outputs.len(), MAX_OUTPUTS)?;
        limit("instructions", self.code.len(), MAX_CODE)?;
        let end = self.code.len();
        let mut last_use = vec![None::<usize>; self.next as usize];
        for (i, (_, op)) in self.code.iter().enumerate() {
            for s in op.sources() {
                last_use[s.0 as usize] = Some(i);
            }
        }
        for (v, _) in &self.outputs {
            last_use[v.0 as usize] = Some(end);
        }
        let mut reg = vec![u32::MAX; self.next as usize];
        let mut free: Vec<u32> = Vec::new();
        let mut count = 0u32;
        let mut take = |free: &mut Vec<u32>| {
            free.pop().unwrap_or_else(|| {
                count += 1;
                count - 1
            })
        };
        for (v, _) in &self.inputs {
            reg[v.0 as usize] = take(&mut free);
        }
        for (i, (v, op)) in self.code.iter().enumerate() {
            let mut sources = op.sources();
            sources.sort_unstable();
            sources.dedup();
            for s in sources {
                if last_use[s.0 as usize] == Some(i) {
                    free.push(reg[s.0 as usize]);
                }
            }
            reg[v.0 as usize] = take(&mut free);
            if last_use[v.0 as usize].is_none() {
                // A dead value needs its register only while it is written.
                free.push(reg[v.0 as usize]);
            }
            // Hand out the lowest free register first, so the footprint stays compact.
            free.sort_unstable_by(|a, b| b.cmp(a));
        }
        limit("registers", count as usize, MAX_REGS)?;
        let r = |v: Value| reg[v.0 as usize];
        Ok(Compiled {
            inputs: self.inputs.iter().map(|&(v, t)| (r(v), t)).collect(),
            code: self
                .code
                .iter()
                .map(|(v, op)| (r(*v), op.encode(r)))
                .collect(),
            outputs: self.outputs.iter().map(|&(v, t)| (r(v), t)).collect(),
            regs: count.max(1),
            uses_mask: self.code.iter().any(|(_, op)| op.uses_mask()),
        })
    }
}

/// A program with physical registers, ready to encode.
#[derive(Debug, Clone, PartialEq)]
pub struct Compiled {
    inputs: Vec<(u32, ElemType)>,
    code: Vec<(u32, Encoded)>,
    outputs: Vec<(u32, ElemType)>,
    regs: u32,
    uses_mask: bool,
}

/// How an input's elements follow the `[rows, cols]` grid (the kernel's `InputMode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum InputMode {
    /// Element (r, c) at `offset + r * cols + c`.
    Dense = 0,
    /// The same row for every row: element (r, c) at `offset + c`.
    RowBroadcast = 1,
    /// Each row contiguous, rows placed by the outer strides.
    Rows = 2,
    /// One element per row, placed by the outer strides.
    ColBroadcast = 3,
    /// One element for the whole grid.
    Scalar = 4,
}

/// Where one input lives and how it follows the grid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputPlacement {
    /// Device address of the input's storage.
    pub addr: u64,
    /// The view's first element, in elements from `addr`.
    pub offset: u64,
    /// How it follows the grid.
    pub mode: InputMode,
    /// Strides of the grid's outer dims, in elements (0 where broadcast).
    pub outer_strides: Vec<i64>,
}

impl Compiled {
    /// Physical registers used.
    pub fn regs(&self) -> u32 {
        self.regs
    }

    /// Whether the code compares or selects (the kernel then plans a mask and a ones tile).
    pub fn uses_mask(&self) -> bool {
        self.uses_mask
    }

    /// Element types of the inputs, in order.
    pub fn input_types(&self) -> impl Iterator<Item = ElemType> + '_ {
        self.inputs.iter().map(|&(_, t)| t)
    }

    /// Element types of the outputs, in order.
    pub fn output_types(&self) -> impl Iterator<Item = ElemType> + '_ {
        self.outputs.iter().map(|&(_, t)| t)
    }

    /// Instructions.
    pub fn len(&self) -> usize {
        self.code.len()
    }

    /// Whether there are no instructions.
    pub fn is_empty(&self) -> bool {
        self.code.is_empty()
    }

    /// Inputs.
    pub fn num_inputs(&self) -> usize {
        self.inputs.len()
    }

    /// Outputs.
    pub fn num_outputs(&self) -> usize {
        self.outputs.len()
    }

    /// The words the kernel reads: inputs (placed as given), outputs (at the given addresses),
    /// code.
    pub fn encode(&self, inputs: &[InputPlacement], outputs: &[u64]) -> Vec<u32> {
        assert_eq!(inputs.len(), self.inputs.len(), "one placement per input");
        assert_eq!(outputs.len(), self.outputs.len(), "one address per output");
        let mut w = Vec::with_capacity(self.words());
        let wide = |w: &mut Vec<u32>, v: u64| w.extend([v as u32, (v >> 32) as u32]);
        for (&(reg, dtype), p) in self.inputs.iter().zip(inputs) {
            wide(&mut w, p.addr);
            w.extend([dtype as u32, p.mode as u32]);
            wide(&mut w, p.offset);
            w.extend([reg, 0]);
            for d in 0..MAX_RANK {
                wide(&mut w, p.outer_strides.get(d).copied().unwrap_or(0) as u64);
            }
        }
        for (&(reg, dtype), &addr) in self.outputs.iter().zip(outputs) {
            wide(&mut w, addr);
            w.extend([dtype as u32, reg]);
        }
        for &(dst, i) in &self.code {
            w.extend([
                i.op | dst << 8 | i.a << 16 | i.b << 24,
                i.c | i.mode << 8,
                i.s.to_bits(),
                0,
            ]);
        }
        w
    }

    /// Length of [`Compiled::encode`]'s result.
    pub fn words(&self) -> usize {
        self.inputs.len() * INPUT_WORDS
            + self.outputs.len() * OUTPUT_WORDS
            + self.code.len() * CODE_WORDS
    }
}

/// The `[rows, cols]` grid of an output and how each input follows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grid {
    /// Outer dims, outermost first (their product is the row count).
    pub outer: Vec<u64>,
    /// Elements per row.
    pub cols: u64,
    /// Per input: mode, offset (elements) and outer strides.
    pub inputs: Vec<(InputMode, u64, Vec<i64>)>,
}

impl Grid {
    /// Rows of the grid.
    pub fn rows(&self) -> u64 {
        self.outer.iter().product()
    }
}

/// A view of an input, in the output's rank: its shape (1 where it broadcasts), strides and
/// offset in elements.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OperandView {
    /// Shape, the output's rank.
    pub shape: Vec<usize>,
    /// Strides, elements.
    pub strides: Vec<i64>,
    /// First element.
    pub offset: u64,
}

/// Lays a contiguous output of `shape` out as a grid for `inputs`. Dims of size 1 are dropped
/// and neighbouring dims merged wherever every input allows; the last dim left is the row.
/// Returns `Err(i)` when input `i` is read with a stride other than 0 or 1 along the row (it
/// must be made contiguous first), or has more outer dims than the kernel addresses.
pub fn grid(shape: &[usize], inputs: &[OperandView]) -> Result<Grid, usize> {
    // Effective strides: 0 along broadcast dims.
    let eff: Vec<Vec<i64>> = inputs
        .iter()
        .map(|v| {
            (0..shape.len())
                .map(|d| if v.shape[d] == 1 { 0 } else { v.strides[d] })
                .collect()
        })
        .collect();
    let mut dims: Vec<(u64, Vec<i64>)> = Vec::new();
    for d in 0..shape.len() {
        if shape[d] == 1 {
            continue;
        }
        let strides: Vec<i64> = eff.iter().map(|s| s[d]).collect();
        if let Some((size, prev)) = dims.last_mut() {
            let n = shape[d] as i64;
            if prev.iter().zip(&strides).all(|(&p, &s)| p == s * n) {
                *size *= shape[d] as u64;
                *prev = strides;
                continue;
            }
        }
        dims.push((shape[d] as u64, strides));
    }
    if dims.is_empty() {
        dims.push((1, vec![0; inputs.len()]));
    }
    let (cols, inner) = dims.pop().expect("at least one dim");
    let outer: Vec<u64> = dims.iter().map(|(n, _)| *n).collect();
    let mut placed = Vec::with_capacity(inputs.len());
    for (i, v) in inputs.iter().enumerate() {
        let strides: Vec<i64> = dims.iter().map(|(_, s)| s[i]).collect();
        if outer.len() >= MAX_RANK {
            return Err(i);
        }
        let mut contiguous = true;
        let mut expect = cols as i64;
        for (d, &s) in strides.iter().enumerate().rev() {
            contiguous &= s == expect;
            expect *= outer[d] as i64;
        }
        let broadcast = strides.iter().all(|&s| s == 0);
        let mode = match (inner[i], broadcast) {
            (1, true) if outer.is_empty() => InputMode::Dense,
            (1, true) => InputMode::RowBroadcast,
            (1, false) if contiguous => InputMode::Dense,
            (1, false) => InputMode::Rows,
            (0, true) => InputMode::Scalar,
            (0, false) => InputMode::ColBroadcast,
            _ => return Err(i),
        };
        placed.push((mode, v.offset, strides));
    }
    Ok(Grid {
        outer,
        cols,
        inputs: placed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(shape: &[usize], strides: &[i64]) -> OperandView {
        OperandView {
            shape: shape.to_vec(),
            strides: strides.to_vec(),
            offset: 0,
        }
    }

    #[test]
    fn dense_operands_collapse_to_one_row() {
        let g = grid(&[2, 3, 4], &[view(&[2, 3, 4], &[12, 4, 1])]).unwrap();
        assert_eq!((g.outer.clone(), g.cols), (vec![], 24));
        assert_eq!(g.inputs[0].0, InputMode::Dense);
    }

    #[test]
    fn bias_and_row_statistics_keep_the_row() {
        let x = view(&[2, 3, 4], &[12, 4, 1]);
        let bias = view(&[1, 1, 4], &[4, 4, 1]);
        let mean = view(&[2, 3, 1], &[3, 1, 1]);
        let g = grid(&[2, 3, 4], &[x, bias, mean]).unwrap();
        assert_eq!((g.outer.clone(), g.cols), (vec![6], 4));
        let modes: Vec<_> = g.inputs.iter().map(|p| p.0).collect();
        assert_eq!(
            modes,
            [
                InputMode::Dense,
                InputMode::RowBroadcast,
                InputMode::ColBroadcast
            ]
        );
        assert_eq!(g.inputs[2].2, vec![1]);
    }

    #[test]
    fn sliced_rows_and_transposes() {
        // Rows of 4 taken from rows of 8: rows are contiguous but not dense.
        let g = grid(&[3, 4], &[view(&[3, 4], &[8, 1])]).unwrap();
        assert_eq!(g.inputs[0].0, InputMode::Rows);
        assert_eq!(grid(&[3, 4], &[view(&[3, 4], &[1, 3])]), Err(0));
    }

    #[test]
    fn registers_are_reused_after_last_use() {
        let mut p = Program::new();
        let x = p.input(ElemType::F32);
        let mut v = x;
        for _ in 0..50 {
            v = p.push(Op::Exp(v));
        }
        let y = p.push(Op::Add(v, x));
        p.output(y, ElemType::F16);
        let c = p.compile().unwrap();
        assert_eq!(c.regs(), 2);
        assert_eq!(c.len(), 51);
        assert_eq!(c.words(), c.encode(&[placement()], &[0]).len());
    }

    #[test]
    fn too_many_live_values_is_an_error() {
        let mut p = Program::new();
        let x = p.input(ElemType::F32);
        let vals: Vec<_> = (0..MAX_REGS)
            .map(|i| p.push(Op::AddS(x, i as f32)))
            .collect();
        for v in vals.into_iter().take(MAX_OUTPUTS) {
            p.output(v, ElemType::F32);
        }
        assert!(p.compile().is_ok());
        let mut q = Program::new();
        let x = q.input(ElemType::F32);
        let vals: Vec<_> = (0..MAX_REGS)
            .map(|i| q.push(Op::AddS(x, i as f32)))
            .collect();
        let mut acc = vals[0];
        for v in &vals[1..] {
            acc = q.push(Op::Add(acc, *v));
        }
        q.output(acc, ElemType::F32);
        q.output(x, ElemType::F32);
        assert!(matches!(q.compile(), Err(ProgramError::TooLarge(_))));
    }

    fn placement() -> InputPlacement {
        InputPlacement {
            addr: 0,
            offset: 0,
            mode: InputMode::Dense,
            outer_strides: vec![],
        }
    }
}
