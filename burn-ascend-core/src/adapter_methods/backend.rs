//! The shared part of the `Backend` trait's methods and the helpers the op families share.

/// The `Backend` methods whose text is the same for Burn 0.21 and 0.22, for each adapter's
/// `impl Backend for Ascend` (the methods that differ stand beside the invocation).
#[macro_export]
macro_rules! adapter_backend_methods {
    () => {
        fn name(device: &Self::Device) -> String {
            match DeviceContext::get(&device.into()) {
                Ok(ctx) => ctx.describe(),
                Err(e) => format!("ascend({device}, unavailable: {e})"),
            }
        }

        fn seed(device: &Self::Device, seed: u64) {
            context(device).set_seed(seed);
        }

        /// A fault it finds resets the device where the process asked for it
        /// (`DeviceContext::recover`).
        fn sync(device: &Self::Device) -> Result<(), ExecutionError> {
            let ctx = context(device);
            ctx.synchronize()
                .map_err(|e| execution_error(&format!("sync of {device}"), &ctx.recover(e)))
        }

        fn memory_cleanup(device: &Self::Device) {
            run("memory_cleanup", context(device).release_cache());
        }

        fn dtype_usage(_device: &Self::Device, dtype: DType) -> DTypeUsageSet {
            match dtype {
                DType::F64 | DType::F32 | DType::Flex32 | DType::F16 | DType::BF16 => {
                    DTypeUsage::Storage | DTypeUsage::Arithmetic
                }
                DType::I64 | DType::I32 | DType::I16 | DType::I8 | DType::U8 => {
                    DTypeUsage::Storage | DTypeUsage::Arithmetic
                }
                // Many aclnn ops reject U16/U32/U64 on Atlas A2: storage and conversion only.
                DType::U64 | DType::U32 | DType::U16 => DTypeUsage::Storage.into(),
                DType::Bool(BoolStore::Native) => DTypeUsage::Storage | DTypeUsage::Arithmetic,
                _ => DTypeUsageSet::empty(),
            }
        }

        fn device_count(type_id: u16) -> usize {
            device::count(type_id)
        }
    };
}

/// The helpers every op family of both adapters calls (`run`, `context`, `binary`,
/// `host_scalar`, ...) whose text is the same for Burn 0.21 and 0.22, for each adapter's
/// `backend` module; the dtype maps (`burn_dtype`, `data_type`, `float_type`, ...) stay in
/// the adapters.
#[macro_export]
macro_rules! adapter_backend_helpers {
    () => {
        /// The `ExecutionError` Burn returns for a failed read or sync, its typed error recorded for
        /// [`crate::try_run`] (Burn's `into_data` turns the `Err` into a panic).
        fn execution_error(op: &str, e: &AclError) -> ExecutionError {
            let e = AscendError::from_acl(op, e);
            let reason = e.to_string();
            record(e);
            ExecutionError::WithContext { reason }
        }

        /// Ends a Burn op that Burn cannot let fail: a failure panics with a clear message and the
        /// typed error [`crate::try_run`] returns. Core tensors in the result become the adapter's.
        pub(crate) fn run<T: Lift>(op: &str, result: AclResult<T>) -> T::Out {
            match result {
                Ok(value) => value.lift(),
                Err(e) => raise(AscendError::from_acl(op, &e)),
            }
        }

        /// The context of `device`, or a clear panic if the device cannot be opened.
        pub(crate) fn context(device: &AscendDevice) -> Arc<DeviceContext> {
            run("opening the device", DeviceContext::get(&device.into()))
        }

        /// A fault it finds resets the device where the process asked for it
        /// (`DeviceContext::recover`).
        fn into_data(tensor: AscendTensor) -> Result<TensorData, ExecutionError> {
            let bytes = creation::to_bytes(&tensor).map_err(|e| {
                let e = tensor.ctx().recover(e);
                execution_error(&format!("reading {} back", tensor.describe()), &e)
            })?;
            Ok(TensorData::from_bytes_vec(
                bytes,
                tensor.shape().to_vec(),
                burn_dtype(tensor.dtype()),
            ))
        }

        /// A Burn scalar as the aclnn scalar operand for a tensor of `dtype`.
        fn host_scalar(value: Scalar, dtype: DataType) -> HostScalar {
            match (value, dtype.is_float()) {
                (Scalar::Bool(b), _) => HostScalar::Bool(b),
                (v, true) => HostScalar::Float(v.elem::<f64>()),
                (Scalar::Float(f), false) => HostScalar::Int(f as i64),
                (Scalar::UInt(u), false) => HostScalar::Int(u as i64),
                (Scalar::Int(i), false) => HostScalar::Int(i),
            }
        }

        // The hottest ops name themselves only when they fail (no formatting per call).
        fn binary(op: BinaryOp, lhs: AscendTensor, rhs: AscendTensor) -> AscendTensor {
            arith::binary(op, &lhs, &rhs)
                .unwrap_or_else(|e| raise(AscendError::from_acl(&format!("{op:?}"), &e)))
                .into()
        }

        fn binary_scalar(op: BinaryOp, lhs: AscendTensor, rhs: Scalar) -> AscendTensor {
            let s = host_scalar(rhs, lhs.dtype());
            arith::binary_scalar(op, &lhs, s)
                .unwrap_or_else(|e| raise(AscendError::from_acl(&format!("{op:?} (scalar)"), &e)))
                .into()
        }

        /// Burn slices (possibly negative, possibly fewer than the rank) as device slices.
        fn dim_slices(shape: &[usize], slices: &[Slice]) -> Vec<DimSlice> {
            shape
                .iter()
                .enumerate()
                .map(|(dim, &size)| match slices.get(dim) {
                    Some(s) => {
                        let range = s.to_range(size);
                        DimSlice {
                            start: range.start,
                            end: range.end,
                            step: s.step,
                        }
                    }
                    None => DimSlice {
                        start: 0,
                        end: size,
                        step: 1,
                    },
                })
                .collect()
        }

        /// A comparison result, checking that Burn asked for the bool type this backend stores.
        fn bool_out(out_dtype: BoolDType, op: &str, result: AclResult<CoreTensor>) -> AscendTensor {
            bool_type(out_dtype);
            run(op, result)
        }

        /// The index part of a (values, indices) result, cast to `dtype`.
        fn indices(
            op: &str,
            result: AclResult<(CoreTensor, CoreTensor)>,
            dtype: DataType,
        ) -> AscendTensor {
            let (_, order) = run(op, result);
            run(op, copy::cast(&order, dtype))
        }

        /// A 0-d device tensor holding a scalar operand of `like`'s dtype.
        fn scalar_tensor(op: &str, like: &AscendTensor, value: Scalar) -> AscendTensor {
            let v = host_scalar(value, like.dtype());
            run(op, creation::full(like.ctx(), Vec::new(), like.dtype(), v))
        }

        fn nd_update(op: IndexingUpdateOp) -> NdUpdate {
            match op {
                IndexingUpdateOp::Assign => NdUpdate::Assign,
                IndexingUpdateOp::Add => NdUpdate::Add,
                IndexingUpdateOp::Mul => NdUpdate::Mul,
                IndexingUpdateOp::Min => NdUpdate::Min,
                IndexingUpdateOp::Max => NdUpdate::Max,
            }
        }

        fn expand(tensor: AscendTensor, shape: Shape) -> AscendTensor {
            match tensor.layout().expand(&shape) {
                Some(layout) => tensor.with_layout(layout).into(),
                None => raise(AscendError::invalid(
                    "expand",
                    format!(
                        "cannot expand {} to {:?}",
                        tensor.describe(),
                        shape.as_slice()
                    ),
                )),
            }
        }
    };
}
