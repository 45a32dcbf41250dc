//! The shared part of Burn's `TransactionOps`.

/// The `TransactionOps` methods whose text is the same for Burn 0.21 and 0.22, for each adapter's
/// `impl TransactionOps<Ascend> for Ascend` (the methods that differ stand beside the invocation).
#[macro_export]
macro_rules! adapter_transaction_ops {
    () => {
        async fn tr_execute(
            transaction: TransactionPrimitive<Ascend>,
        ) -> Result<TransactionPrimitiveData, ExecutionError> {
            let (floats, ints, bools) = (
                transaction.read_floats,
                transaction.read_ints,
                transaction.read_bools,
            );
            let all: Vec<AscendTensor> =
                floats.iter().chain(&ints).chain(&bools).cloned().collect();
            let mut bytes = creation::to_bytes_many(cores(&all))
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
            let mut qfloats = Vec::with_capacity(transaction.read_qfloats.len());
            for q in transaction.read_qfloats {
                qfloats.push(Ascend::q_into_data(q).await?);
            }
            Ok(TransactionPrimitiveData {
                read_floats: read(&floats),
                read_qfloats: qfloats,
                read_ints: read(&ints),
                read_bools: read(&bools),
            })
        }
    };
}
