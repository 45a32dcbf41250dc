//! Lowering of recorded element-wise ops onto the instructions of the interpreted
//! `elementwise_program` kernel: the one table of which Burn ops fuse and how.
//!
//! Values live in f32 registers whatever their tensor's dtype (f16/bf16 inputs are widened on
//! load, outputs narrowed on store, bools are 0/1); an explicit cast to f16/bf16 rounds the value
//! to that precision. Ops the vector unit cannot express exactly enough (`log1p`, powers,
//! trigonometry) are not lowered, so they end a fused block and run through aclnn.

/// Emits the `lower` module's items (see [`ascend_fusion!`](crate::ascend_fusion)).
#[doc(hidden)]
#[macro_export]
macro_rules! __ascend_fusion_lower {
    () => {
        use std::collections::{HashMap, HashSet};

        use burn_backend::{DType, Shape};
        use burn_ir::{
            BaseOperationIr, BinaryOpIr, BoolOperationIr, FloatOperationIr, NumericOperationIr,
            OperationIr, ScalarIr, ScalarOpIr, TensorId, TensorIr, TensorStatus, UnaryOpIr,
        };
        use burn_std::BoolStore;
        use $crate::fusion::emit::{bool_not, div_scalar, erf, recip, tanh};
        use $crate::fusion::program::{Cmp, ElemType, Op, Program, Rounding, Value};

        /// The element type a tensor of `dtype` has in a program, if programs take it.
        pub(crate) fn elem_type(dtype: DType) -> Option<ElemType> {
            match dtype {
                DType::F32 => Some(ElemType::F32),
                DType::F16 => Some(ElemType::F16),
                DType::BF16 => Some(ElemType::BF16),
                DType::Bool(BoolStore::Native) => Some(ElemType::Bool),
                _ => None,
            }
        }

        /// The dim id the op stream gives every dim of size 1 (burn-fusion maps sizes to ids per
        /// block and reserves 0 for 1), so an operand dim with this id broadcasts.
        pub(super) const SIZE_ONE: usize = 0;

        /// A fused block being lowered: the program so far and which recorded tensors it reads and
        /// creates. Tensor ids and shapes are those of the op stream the block was recorded from
        /// (relative ids and dim ids during fusion, global ones at execution).
        #[derive(Debug, Clone, Default)]
        pub(crate) struct Lowering {
            program: Program,
            values: HashMap<TensorId, Value>,
            /// Tensors read from outside the block, in program input order.
            pub inputs: Vec<TensorIr>,
            /// Tensors the block creates, in order.
            created: Vec<TensorIr>,
            /// Tensors whose last use is inside the block (read as ReadWrite, or dropped).
            consumed: HashSet<TensorId>,
            /// The shape every op of the block produces.
            shape: Option<Shape>,
            /// Ops that compute something.
            pub computing: usize,
        }

        /// A lowering function: emits the instructions of one op over its operands' values.
        type Emit = Box<dyn Fn(&mut Program, &[Value]) -> Value>;

        impl Lowering {
            /// Lowers `op` (scalars resolved by `scalar`); `None` if it cannot join this block, in which
            /// case `self` must be discarded.
            pub fn lower(
                &mut self,
                op: &OperationIr,
                scalar: &dyn Fn(&ScalarIr) -> f32,
            ) -> Option<()> {
                if let OperationIr::Drop(t) = op {
                    return self.drop_tensor(t);
                }
                let (out, ins, emit) = lowering(op, scalar)?;
                elem_type(out.dtype)?;
                match &self.shape {
                    None => self.shape = Some(out.shape.clone()),
                    Some(s) if *s == out.shape => {}
                    Some(_) => return None,
                }
                let values = ins
                    .iter()
                    .map(|t| self.read(t))
                    .collect::<Option<Vec<_>>>()?;
                let v = emit(&mut self.program, &values);
                self.values.insert(out.id, v);
                self.created.push(out.clone());
                self.computing += 1;
                Some(())
            }

            fn drop_tensor(&mut self, t: &TensorIr) -> Option<()> {
                // Only a tensor the block already knows can be dropped inside it.
                if !self.values.contains_key(&t.id) {
                    return None;
                }
                self.consumed.insert(t.id);
                if let Some(i) = self.inputs.iter().position(|x| x.id == t.id) {
                    self.inputs[i].status = TensorStatus::ReadWrite;
                }
                Some(())
            }

            fn read(&mut self, t: &TensorIr) -> Option<Value> {
                let dtype = elem_type(t.dtype)?;
                let shape = self.shape.as_ref()?;
                let fits = t.shape.rank() == shape.rank()
                    && t.shape
                        .iter()
                        .zip(shape.iter())
                        .all(|(a, b)| a == b || *a == SIZE_ONE);
                if !fits {
                    return None;
                }
                if t.status == TensorStatus::ReadWrite {
                    self.consumed.insert(t.id);
                }
                if let Some(&v) = self.values.get(&t.id) {
                    if let Some(i) = self.inputs.iter().position(|x| x.id == t.id) {
                        self.inputs[i].status = t.status;
                    }
                    return Some(v);
                }
                let v = self.program.input(dtype);
                self.values.insert(t.id, v);
                self.inputs.push(t.clone());
                Some(v)
            }

            /// Tensors created by the block and still referenced after it: the kernel's outputs.
            pub fn outputs(&self) -> Vec<TensorIr> {
                self.created
                    .iter()
                    .filter(|t| !self.consumed.contains(&t.id))
                    .cloned()
                    .collect()
            }

            /// The finished program: the block's code with its outputs declared.
            pub fn program(&self) -> Program {
                let mut p = self.program.clone();
                for t in self.outputs() {
                    let dtype = elem_type(t.dtype).expect("checked when lowered");
                    p.output(self.values[&t.id], dtype);
                }
                p
            }
        }

        fn binary(d: &BinaryOpIr, f: fn(Value, Value) -> Op) -> (&TensorIr, Vec<&TensorIr>, Emit) {
            (
                &d.out,
                vec![&d.lhs, &d.rhs],
                Box::new(move |p, v| p.push(f(v[0], v[1]))),
            )
        }

        fn unary(d: &UnaryOpIr, f: fn(Value) -> Op) -> (&TensorIr, Vec<&TensorIr>, Emit) {
            (
                &d.out,
                vec![&d.input],
                Box::new(move |p, v| p.push(f(v[0]))),
            )
        }

        fn with_scalar<'a>(
            d: &'a ScalarOpIr,
            scalar: &dyn Fn(&ScalarIr) -> f32,
            f: fn(&mut Program, Value, f32) -> Value,
        ) -> (&'a TensorIr, Vec<&'a TensorIr>, Emit) {
            let s = scalar(&d.rhs);
            (&d.out, vec![&d.lhs], Box::new(move |p, v| f(p, v[0], s)))
        }

        fn compare(d: &BinaryOpIr, cmp: Cmp) -> (&TensorIr, Vec<&TensorIr>, Emit) {
            (
                &d.out,
                vec![&d.lhs, &d.rhs],
                Box::new(move |p, v| p.push(Op::Cmp(v[0], cmp, v[1]))),
            )
        }

        fn compare_scalar<'a>(
            d: &'a ScalarOpIr,
            scalar: &dyn Fn(&ScalarIr) -> f32,
            cmp: Cmp,
        ) -> (&'a TensorIr, Vec<&'a TensorIr>, Emit) {
            let s = scalar(&d.rhs);
            (
                &d.out,
                vec![&d.lhs],
                Box::new(move |p, v| p.push(Op::CmpS(v[0], cmp, s))),
            )
        }

        /// The output, operands and emitter of an op that lowers, `None` for one that does not.
        fn lowering<'a>(
            op: &'a OperationIr,
            scalar: &dyn Fn(&ScalarIr) -> f32,
        ) -> Option<(&'a TensorIr, Vec<&'a TensorIr>, Emit)> {
            use NumericOperationIr as N;
            Some(match op {
                OperationIr::NumericFloat(_, n) => match n {
                    N::Add(d) => binary(d, Op::Add),
                    N::Sub(d) => binary(d, Op::Sub),
                    N::Mul(d) => binary(d, Op::Mul),
                    N::Div(d) => binary(d, Op::Div),
                    N::AddScalar(d) => with_scalar(d, scalar, |p, a, s| p.push(Op::AddS(a, s))),
                    N::SubScalar(d) => with_scalar(d, scalar, |p, a, s| p.push(Op::AddS(a, -s))),
                    N::MulScalar(d) => with_scalar(d, scalar, |p, a, s| p.push(Op::MulS(a, s))),
                    N::DivScalar(d) => with_scalar(d, scalar, div_scalar),
                    N::Abs(d) => unary(d, Op::Abs),
                    N::Greater(d) => compare(d, Cmp::Gt),
                    N::GreaterEqual(d) => compare(d, Cmp::Ge),
                    N::Lower(d) => compare(d, Cmp::Lt),
                    N::LowerEqual(d) => compare(d, Cmp::Le),
                    N::GreaterElem(d) => compare_scalar(d, scalar, Cmp::Gt),
                    N::GreaterEqualElem(d) => compare_scalar(d, scalar, Cmp::Ge),
                    N::LowerElem(d) => compare_scalar(d, scalar, Cmp::Lt),
                    N::LowerEqualElem(d) => compare_scalar(d, scalar, Cmp::Le),
                    N::Clamp(d) => {
                        let (lo, hi) = (scalar(&d.min), scalar(&d.max));
                        (
                            &d.out,
                            vec![&d.tensor],
                            Box::new(move |p, v| {
                                let a = p.push(Op::MaxS(v[0], lo));
                                p.push(Op::MinS(a, hi))
                            }),
                        )
                    }
                    _ => return None,
                },
                OperationIr::Float(_, f) => match f {
                    FloatOperationIr::Exp(d) => unary(d, Op::Exp),
                    FloatOperationIr::Log(d) => unary(d, Op::Ln),
                    FloatOperationIr::Sqrt(d) => unary(d, Op::Sqrt),
                    FloatOperationIr::Recip(d) => {
                        (&d.out, vec![&d.input], Box::new(|p, v| recip(p, v[0])))
                    }
                    FloatOperationIr::Tanh(d) => {
                        (&d.out, vec![&d.input], Box::new(|p, v| tanh(p, v[0])))
                    }
                    FloatOperationIr::Erf(d) => {
                        (&d.out, vec![&d.input], Box::new(|p, v| erf(p, v[0])))
                    }
                    FloatOperationIr::Round(d) => unary(d, |a| Op::Round(a, Rounding::Rint)),
                    FloatOperationIr::Floor(d) => unary(d, |a| Op::Round(a, Rounding::Floor)),
                    // Not Ceil nor Trunc: burn-fusion 0.21 records a trunc as a ceil in the op stream a
                    // fuser sees (stream/context.rs, `to_relative`), so a fused "ceil" may be a trunc.
                    // Unfused, both run right.
                    FloatOperationIr::IsNan(d) => unary(d, |a| Op::Cmp(a, Cmp::Ne, a)),
                    FloatOperationIr::IsInf(d) => (
                        &d.out,
                        vec![&d.input],
                        Box::new(|p, v| {
                            let a = p.push(Op::Abs(v[0]));
                            p.push(Op::CmpS(a, Cmp::Eq, f32::INFINITY))
                        }),
                    ),
                    _ => return None,
                },
                OperationIr::BaseFloat(b) => match b {
                    BaseOperationIr::Equal(d) => compare(d, Cmp::Eq),
                    BaseOperationIr::EqualElem(d) => compare_scalar(d, scalar, Cmp::Eq),
                    BaseOperationIr::MaskWhere(d) => (
                        &d.out,
                        vec![&d.tensor, &d.mask, &d.value],
                        Box::new(|p, v| {
                            p.push(Op::Select {
                                cond: v[1],
                                then: v[2],
                                otherwise: v[0],
                            })
                        }),
                    ),
                    BaseOperationIr::MaskFill(d) => {
                        let s = scalar(&d.value);
                        (
                            &d.out,
                            vec![&d.tensor, &d.mask],
                            Box::new(move |p, v| {
                                let fill = p.push(Op::Dup(s));
                                p.push(Op::Select {
                                    cond: v[1],
                                    then: fill,
                                    otherwise: v[0],
                                })
                            }),
                        )
                    }
                    BaseOperationIr::Cast(d) => {
                        let target = elem_type(d.out.dtype)?;
                        (
                            &d.out,
                            vec![&d.input],
                            Box::new(move |p, v| match target {
                                ElemType::F16 | ElemType::BF16 => p.push(Op::Narrow(v[0], target)),
                                _ => v[0],
                            }),
                        )
                    }
                    _ => return None,
                },
                OperationIr::Bool(b) => match b {
                    BoolOperationIr::Not(d) => {
                        (&d.out, vec![&d.input], Box::new(|p, v| bool_not(p, v[0])))
                    }
                    BoolOperationIr::And(d) => binary(d, Op::Mul),
                    BoolOperationIr::Or(d) => binary(d, Op::Max),
                    BoolOperationIr::IntoFloat(d) => {
                        (&d.out, vec![&d.input], Box::new(|_, v| v[0]))
                    }
                    _ => return None,
                },
                _ => return None,
            })
        }

        /// A scalar of the op stream as an f64.
        pub(crate) fn scalar_f64(s: &ScalarIr) -> f64 {
            match *s {
                ScalarIr::Float(v) => v,
                ScalarIr::Int(v) => v as f64,
                ScalarIr::UInt(v) => v as f64,
                ScalarIr::Bool(b) => b as u8 as f64,
            }
        }

        /// A scalar of the op stream as the f32 the program computes with.
        pub(crate) fn scalar_f32(s: &ScalarIr) -> f32 {
            scalar_f64(s) as f32
        }
    };
}
