//! `TransactionOps` for [`Ascend`]: every tensor of a transaction is read after one stream
//! synchronisation per device, instead of one per tensor.

use burn_backend::ops::{TransactionPrimitive, TransactionPrimitiveData};

use super::*;

impl TransactionOps<Ascend> for Ascend {
    async fn tr_execute(
        transaction: TransactionPrimitive<Ascend>,
    ) -> Result<TransactionPrimitiveData, ExecutionError> {
        if !transaction.read_qfloats.is_empty() {
            unsupported("reading quantized tensors in a transaction");
        }
        let (floats, ints, bools) = (
            transaction.read_floats,
            transaction.read_ints,
            transaction.read_bools,
        );
        let all: Vec<AscendTensor> = floats.iter().chain(&ints).chain(&bools).cloned().collect();
        let mut bytes = creation::to_bytes_many(&all)
            .map_err(|e| ExecutionError::WithContext {
                reason: format!(
                    "burn-ascend: reading a transaction of {} tensors: {e}",
                    all.len()
                ),
            })?
            .into_iter();
        let mut read = |tensors: &[AscendTensor]| -> Vec<TensorData> {
            tensors
                .iter()
                .map(|t| {
                    let b = bytes.next().expect("one buffer per tensor");
                    TensorData::from_bytes_vec(b, t.shape().to_vec(), burn_dtype(t.dtype()))
                })
                .collect()
        };
        Ok(TransactionPrimitiveData {
            read_floats: read(&floats),
            read_qfloats: Vec::new(),
            read_ints: read(&ints),
            read_bools: read(&bools),
        })
    }
}
