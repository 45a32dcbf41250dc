//! `TransactionOps`: one `Transaction` reads several tensors of every kind, some of them views
//! and some still being computed.

use burn::tensor::{Bool, DType, Float, Int, Transaction};

use crate::common::*;
use crate::ops;

ops! {
    custom transaction_float_int_bool(FLOATS) |c| {
        let x = c.input::<Float>(SHAPE, Role::Lhs, 0);
        let pending = x.clone() * 2.0 + 1.0;
        let ints = c.input_of::<Int>(DType::I32, SHAPE, Role::Lhs, 1);
        let mask = c.input_of::<Bool>(BOOL, SHAPE, Role::Lhs, 2);
        Transaction::default()
            .register(x)
            .register(pending)
            .register(ints)
            .register(mask)
            .execute()
    };
    custom transaction_int_dtypes(INTS) |c| {
        let x = c.input::<Int>(SHAPE, Role::Lhs, 0);
        let empty = c.dense::<Int, 3>([2, 0, 4], Role::Lhs, 0);
        let widened = x.clone().cast(DType::I64) + 1;
        Transaction::default()
            .register(x)
            .register(empty)
            .register(widened)
            .execute()
    };
    custom transaction_single_tensor(FLOATS) |c| {
        Transaction::default()
            .register(c.input::<Float>(SHAPE, Role::Rhs, 3))
            .execute()
    };
}
