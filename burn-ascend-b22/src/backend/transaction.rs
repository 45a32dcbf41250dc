//! `TransactionOps` for [`Ascend`]: every float, int and bool tensor of a transaction is read
//! after one stream synchronisation per device, instead of one per tensor (quantized tensors are
//! read after their dequantisation parameters).

use burn_backend::ops::{TransactionPrimitive, TransactionPrimitiveData};

use super::*;

impl TransactionOps<Ascend> for Ascend {
    // Every method is the same in both adapters (burn-ascend-core's adapter_methods).
    burn_ascend_core::adapter_transaction_ops!();
}
