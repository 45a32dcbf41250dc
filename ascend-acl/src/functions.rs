//! The one declarative list of every AscendCL and aclnn function the backend calls.
//!
//! The function table ([`super::table`]), the emulated runtime's symbol map and the emulated
//! CANN shared library used by the loader tests are all generated from this list, so the real
//! loader and the emulation cannot disagree on a name or a signature.
//!
//! `runtime` and `nnopbase` functions are resolved when the table is loaded, and so are the
//! `optional` functions, which a library may lack: without the repeatable-executor API the
//! backend runs every operator through phase one instead of reusing executors; without
//! `aclrtResetDeviceForce` (older than 8.1.RC1) a reset balances the backend's own
//! `aclrtSetDevice` calls instead. The oldest CANN release that declares each function is
//! recorded in [`crate::release`]. `graph` holds
//! the ACL graph functions (stream capture and replay, `libascendcl`, CANN 8.1.RC1 and later per
//! `../shared/ascend/aclgraph-abi.md` §2), resolved at load as one group: a library that lacks
//! any of them has no graph support, and the backend runs eagerly. `ops` are aclnn
//! operators, resolved lazily on first use: the list gives the phase-one parameters (header
//! order, without the trailing `workspaceSize` and `executor`), and every op also has the common
//! phase-two function `aclnnXxx(workspace, workspaceSize, executor, stream)`.

/// Calls `$callback!` with the whole function list.
#[macro_export]
#[doc(hidden)]
macro_rules! acl_function_list {
    ($callback:ident) => {
        $callback! {
            runtime {
                fn aclInit(config_path: *const ::std::ffi::c_char) -> aclError;
                fn aclFinalize() -> aclError;
                fn aclrtSetDevice(device_id: i32) -> aclError;
                fn aclrtResetDevice(device_id: i32) -> aclError;
                fn aclrtGetDeviceCount(count: *mut u32) -> aclError;
                fn aclrtCreateStream(stream: *mut aclrtStream) -> aclError;
                fn aclrtDestroyStream(stream: aclrtStream) -> aclError;
                fn aclrtSynchronizeStream(stream: aclrtStream) -> aclError;
                fn aclrtStreamWaitEvent(stream: aclrtStream, event: aclrtEvent) -> aclError;
                fn aclrtCreateEvent(event: *mut aclrtEvent) -> aclError;
                fn aclrtCreateEventWithFlag(event: *mut aclrtEvent, flag: u32) -> aclError;
                fn aclrtDestroyEvent(event: aclrtEvent) -> aclError;
                fn aclrtRecordEvent(event: aclrtEvent, stream: aclrtStream) -> aclError;
                fn aclrtSynchronizeEvent(event: aclrtEvent) -> aclError;
                fn aclrtQueryEventStatus(event: aclrtEvent, status: *mut i32) -> aclError;
                fn aclrtEventElapsedTime(ms: *mut f32, start_event: aclrtEvent, end_event: aclrtEvent) -> aclError;
                fn aclrtMalloc(dev_ptr: *mut *mut ::std::ffi::c_void, size: usize, policy: i32) -> aclError;
                fn aclrtFree(dev_ptr: *mut ::std::ffi::c_void) -> aclError;
                fn aclrtMemcpy(dst: *mut ::std::ffi::c_void, dest_max: usize, src: *const ::std::ffi::c_void, count: usize, kind: i32) -> aclError;
                fn aclrtMallocHost(host_ptr: *mut *mut ::std::ffi::c_void, size: usize) -> aclError;
                fn aclrtFreeHost(host_ptr: *mut ::std::ffi::c_void) -> aclError;
                fn aclrtMemcpyAsync(dst: *mut ::std::ffi::c_void, dest_max: usize, src: *const ::std::ffi::c_void, count: usize, kind: i32, stream: aclrtStream) -> aclError;
                fn aclrtMemsetAsync(dev_ptr: *mut ::std::ffi::c_void, max_count: usize, value: i32, count: usize, stream: aclrtStream) -> aclError;
                fn aclrtGetMemInfo(attr: i32, free: *mut usize, total: *mut usize) -> aclError;
                fn aclrtGetSocName() -> *const ::std::ffi::c_char;
                fn aclGetDeviceCapability(device_id: u32, info: i32, value: *mut i64) -> aclError;
                fn aclGetRecentErrMsg() -> *const ::std::ffi::c_char;
            }
            nnopbase {
                fn aclCreateTensor(view_dims: *const i64, view_dims_num: u64, data_type: i32, stride: *const i64, offset: i64, format: i32, storage_dims: *const i64, storage_dims_num: u64, tensor_data: *mut ::std::ffi::c_void) -> *mut aclTensor;
                fn aclDestroyTensor(tensor: *const aclTensor) -> aclnnStatus;
                fn aclCreateScalar(value: *mut ::std::ffi::c_void, data_type: i32) -> *mut aclScalar;
                fn aclDestroyScalar(scalar: *const aclScalar) -> aclnnStatus;
                fn aclCreateIntArray(value: *const i64, size: u64) -> *mut aclIntArray;
                fn aclDestroyIntArray(array: *const aclIntArray) -> aclnnStatus;
                fn aclCreateBoolArray(value: *const bool, size: u64) -> *mut aclBoolArray;
                fn aclDestroyBoolArray(array: *const aclBoolArray) -> aclnnStatus;
                fn aclCreateTensorList(value: *const *const aclTensor, size: u64) -> *mut aclTensorList;
                fn aclDestroyTensorList(array: *const aclTensorList) -> aclnnStatus;
                fn aclDestroyAclOpExecutor(executor: *mut aclOpExecutor) -> aclnnStatus;
                fn aclGetViewShape(tensor: *const aclTensor, view_dims: *mut *mut i64, view_dims_num: *mut u64) -> aclnnStatus;
            }
            optional {
                fn aclSetAclOpExecutorRepeatable(executor: *mut aclOpExecutor) -> aclnnStatus;
                fn aclSetInputTensorAddr(executor: *mut aclOpExecutor, index: usize, tensor: *mut aclTensor, addr: *mut ::std::ffi::c_void) -> aclnnStatus;
                fn aclSetOutputTensorAddr(executor: *mut aclOpExecutor, index: usize, tensor: *mut aclTensor, addr: *mut ::std::ffi::c_void) -> aclnnStatus;
                fn aclrtResetDeviceForce(device_id: i32) -> aclError;
            }
            graph {
                fn aclmdlRICaptureBegin(stream: aclrtStream, mode: i32) -> aclError;
                fn aclmdlRICaptureGetInfo(stream: aclrtStream, status: *mut i32, model_ri: *mut aclmdlRI) -> aclError;
                fn aclmdlRICaptureEnd(stream: aclrtStream, model_ri: *mut aclmdlRI) -> aclError;
                fn aclmdlRICaptureThreadExchangeMode(mode: *mut i32) -> aclError;
                fn aclmdlRIExecuteAsync(model_ri: aclmdlRI, stream: aclrtStream) -> aclError;
                fn aclmdlRIDestroy(model_ri: aclmdlRI) -> aclError;
            }
            ops {
                aclnnCast / aclnnCastGetWorkspaceSize(self_: *const aclTensor, dtype: i32, out: *mut aclTensor);
                aclnnInplaceCopy / aclnnInplaceCopyGetWorkspaceSize(self_ref: *mut aclTensor, src: *const aclTensor);
                aclnnInplaceZero / aclnnInplaceZeroGetWorkspaceSize(self_ref: *mut aclTensor);
                aclnnInplaceOne / aclnnInplaceOneGetWorkspaceSize(self_ref: *const aclTensor);
                aclnnInplaceFillScalar / aclnnInplaceFillScalarGetWorkspaceSize(self_ref: *mut aclTensor, value: *const aclScalar);
                aclnnAdd / aclnnAddGetWorkspaceSize(self_: *const aclTensor, other: *const aclTensor, alpha: *const aclScalar, out: *mut aclTensor);
                aclnnAdds / aclnnAddsGetWorkspaceSize(self_: *const aclTensor, other: *const aclScalar, alpha: *const aclScalar, out: *mut aclTensor);
                aclnnSub / aclnnSubGetWorkspaceSize(self_: *const aclTensor, other: *const aclTensor, alpha: *const aclScalar, out: *mut aclTensor);
                aclnnSubs / aclnnSubsGetWorkspaceSize(self_: *const aclTensor, other: *const aclScalar, alpha: *const aclScalar, out: *mut aclTensor);
                aclnnMul / aclnnMulGetWorkspaceSize(self_: *const aclTensor, other: *const aclTensor, out: *mut aclTensor);
                aclnnMuls / aclnnMulsGetWorkspaceSize(self_: *const aclTensor, other: *const aclScalar, out: *mut aclTensor);
                aclnnDiv / aclnnDivGetWorkspaceSize(self_: *const aclTensor, other: *const aclTensor, out: *mut aclTensor);
                aclnnDivs / aclnnDivsGetWorkspaceSize(self_: *const aclTensor, other: *const aclScalar, out: *mut aclTensor);
                aclnnDivMod / aclnnDivModGetWorkspaceSize(self_: *const aclTensor, other: *const aclTensor, mode: ::std::ffi::c_int, out: *mut aclTensor);
                aclnnDivMods / aclnnDivModsGetWorkspaceSize(self_: *const aclTensor, other: *const aclScalar, mode: ::std::ffi::c_int, out: *mut aclTensor);
                aclnnMatmul / aclnnMatmulGetWorkspaceSize(self_: *const aclTensor, mat2: *const aclTensor, out: *mut aclTensor, cube_math_type: i8);
                aclnnAddmm / aclnnAddmmGetWorkspaceSize(self_: *const aclTensor, mat1: *const aclTensor, mat2: *const aclTensor, beta: *const aclScalar, alpha: *const aclScalar, out: *mut aclTensor, cube_math_type: i8);
                aclnnReduceSum / aclnnReduceSumGetWorkspaceSize(self_: *const aclTensor, dims: *const aclIntArray, keep_dims: bool, dtype: i32, out: *mut aclTensor);
                aclnnCat / aclnnCatGetWorkspaceSize(tensors: *const aclTensorList, dim: i64, out: *mut aclTensor);
                aclnnGridSampler2D / aclnnGridSampler2DGetWorkspaceSize(input: *const aclTensor, grid: *const aclTensor, interpolation_mode: i64, padding_mode: i64, align_corners: bool, out: *mut aclTensor);
                aclnnFlip / aclnnFlipGetWorkspaceSize(self_: *const aclTensor, dims: *const aclIntArray, out: *mut aclTensor);
                aclnnNeg / aclnnNegGetWorkspaceSize(self_: *const aclTensor, out: *mut aclTensor);
                aclnnReciprocal / aclnnReciprocalGetWorkspaceSize(self_: *const aclTensor, out: *mut aclTensor);
                aclnnExp / aclnnExpGetWorkspaceSize(self_: *const aclTensor, out: *mut aclTensor);
                aclnnLog / aclnnLogGetWorkspaceSize(self_: *const aclTensor, out: *mut aclTensor);
                aclnnLog1p / aclnnLog1pGetWorkspaceSize(self_: *const aclTensor, out: *mut aclTensor);
                aclnnSqrt / aclnnSqrtGetWorkspaceSize(self_: *const aclTensor, out: *mut aclTensor);
                aclnnAbs / aclnnAbsGetWorkspaceSize(self_: *const aclTensor, out: *mut aclTensor);
                aclnnCos / aclnnCosGetWorkspaceSize(self_: *const aclTensor, out: *mut aclTensor);
                aclnnSin / aclnnSinGetWorkspaceSize(self_: *const aclTensor, out: *mut aclTensor);
                aclnnTan / aclnnTanGetWorkspaceSize(self_: *const aclTensor, out: *mut aclTensor);
                aclnnCosh / aclnnCoshGetWorkspaceSize(self_: *const aclTensor, out: *mut aclTensor);
                aclnnSinh / aclnnSinhGetWorkspaceSize(self_: *const aclTensor, out: *mut aclTensor);
                aclnnTanh / aclnnTanhGetWorkspaceSize(self_: *const aclTensor, out: *mut aclTensor);
                aclnnAcos / aclnnAcosGetWorkspaceSize(self_: *const aclTensor, out: *mut aclTensor);
                aclnnAcosh / aclnnAcoshGetWorkspaceSize(self_: *const aclTensor, out: *mut aclTensor);
                aclnnAsin / aclnnAsinGetWorkspaceSize(self_: *const aclTensor, out: *mut aclTensor);
                aclnnAsinh / aclnnAsinhGetWorkspaceSize(self_: *const aclTensor, out: *mut aclTensor);
                aclnnAtan / aclnnAtanGetWorkspaceSize(self_: *const aclTensor, out: *mut aclTensor);
                aclnnAtanh / aclnnAtanhGetWorkspaceSize(self_: *const aclTensor, out: *mut aclTensor);
                aclnnRound / aclnnRoundGetWorkspaceSize(self_: *const aclTensor, out: *mut aclTensor);
                aclnnFloor / aclnnFloorGetWorkspaceSize(self_: *const aclTensor, out: *mut aclTensor);
                aclnnCeil / aclnnCeilGetWorkspaceSize(self_: *const aclTensor, out: *mut aclTensor);
                aclnnTrunc / aclnnTruncGetWorkspaceSize(self_: *const aclTensor, out: *mut aclTensor);
                aclnnErf / aclnnErfGetWorkspaceSize(self_: *const aclTensor, out: *mut aclTensor);
                aclnnSign / aclnnSignGetWorkspaceSize(self_: *const aclTensor, out: *mut aclTensor);
                aclnnRelu / aclnnReluGetWorkspaceSize(self_: *const aclTensor, out: *mut aclTensor);
                aclnnSigmoid / aclnnSigmoidGetWorkspaceSize(self_: *const aclTensor, out: *mut aclTensor);
                aclnnLogSigmoid / aclnnLogSigmoidGetWorkspaceSize(self_: *const aclTensor, out: *mut aclTensor);
                aclnnGelu / aclnnGeluGetWorkspaceSize(self_: *const aclTensor, out: *mut aclTensor);
                aclnnLogicalNot / aclnnLogicalNotGetWorkspaceSize(self_: *const aclTensor, out: *mut aclTensor);
                aclnnBitwiseNot / aclnnBitwiseNotGetWorkspaceSize(self_: *const aclTensor, out: *mut aclTensor);
                aclnnPowTensorTensor / aclnnPowTensorTensorGetWorkspaceSize(self_: *const aclTensor, other: *const aclTensor, out: *mut aclTensor);
                aclnnAtan2 / aclnnAtan2GetWorkspaceSize(self_: *const aclTensor, other: *const aclTensor, out: *mut aclTensor);
                aclnnRemainderTensorTensor / aclnnRemainderTensorTensorGetWorkspaceSize(self_: *const aclTensor, other: *const aclTensor, out: *mut aclTensor);
                aclnnEqTensor / aclnnEqTensorGetWorkspaceSize(self_: *const aclTensor, other: *const aclTensor, out: *mut aclTensor);
                aclnnNeTensor / aclnnNeTensorGetWorkspaceSize(self_: *const aclTensor, other: *const aclTensor, out: *mut aclTensor);
                aclnnGtTensor / aclnnGtTensorGetWorkspaceSize(self_: *const aclTensor, other: *const aclTensor, out: *mut aclTensor);
                aclnnGeTensor / aclnnGeTensorGetWorkspaceSize(self_: *const aclTensor, other: *const aclTensor, out: *mut aclTensor);
                aclnnLtTensor / aclnnLtTensorGetWorkspaceSize(self_: *const aclTensor, other: *const aclTensor, out: *mut aclTensor);
                aclnnLeTensor / aclnnLeTensorGetWorkspaceSize(self_: *const aclTensor, other: *const aclTensor, out: *mut aclTensor);
                aclnnLogicalAnd / aclnnLogicalAndGetWorkspaceSize(self_: *const aclTensor, other: *const aclTensor, out: *mut aclTensor);
                aclnnLogicalOr / aclnnLogicalOrGetWorkspaceSize(self_: *const aclTensor, other: *const aclTensor, out: *mut aclTensor);
                aclnnLogicalXor / aclnnLogicalXorGetWorkspaceSize(self_: *const aclTensor, other: *const aclTensor, out: *mut aclTensor);
                aclnnBitwiseAndTensor / aclnnBitwiseAndTensorGetWorkspaceSize(self_: *const aclTensor, other: *const aclTensor, out: *mut aclTensor);
                aclnnBitwiseOrTensor / aclnnBitwiseOrTensorGetWorkspaceSize(self_: *const aclTensor, other: *const aclTensor, out: *mut aclTensor);
                aclnnBitwiseXorTensor / aclnnBitwiseXorTensorGetWorkspaceSize(self_: *const aclTensor, other: *const aclTensor, out: *mut aclTensor);
                aclnnRightShift / aclnnRightShiftGetWorkspaceSize(self_: *const aclTensor, other: *const aclTensor, out: *mut aclTensor);
                aclnnMaximum / aclnnMaximumGetWorkspaceSize(self_: *const aclTensor, other: *const aclTensor, out: *mut aclTensor);
                aclnnMinimum / aclnnMinimumGetWorkspaceSize(self_: *const aclTensor, other: *const aclTensor, out: *mut aclTensor);
                aclnnPowTensorScalar / aclnnPowTensorScalarGetWorkspaceSize(self_: *const aclTensor, other: *const aclScalar, out: *mut aclTensor);
                aclnnRemainderTensorScalar / aclnnRemainderTensorScalarGetWorkspaceSize(self_: *const aclTensor, other: *const aclScalar, out: *mut aclTensor);
                aclnnEqScalar / aclnnEqScalarGetWorkspaceSize(self_: *const aclTensor, other: *const aclScalar, out: *mut aclTensor);
                aclnnNeScalar / aclnnNeScalarGetWorkspaceSize(self_: *const aclTensor, other: *const aclScalar, out: *mut aclTensor);
                aclnnGtScalar / aclnnGtScalarGetWorkspaceSize(self_: *const aclTensor, other: *const aclScalar, out: *mut aclTensor);
                aclnnGeScalar / aclnnGeScalarGetWorkspaceSize(self_: *const aclTensor, other: *const aclScalar, out: *mut aclTensor);
                aclnnLtScalar / aclnnLtScalarGetWorkspaceSize(self_: *const aclTensor, other: *const aclScalar, out: *mut aclTensor);
                aclnnLeScalar / aclnnLeScalarGetWorkspaceSize(self_: *const aclTensor, other: *const aclScalar, out: *mut aclTensor);
                aclnnBitwiseAndScalar / aclnnBitwiseAndScalarGetWorkspaceSize(self_: *const aclTensor, other: *const aclScalar, out: *mut aclTensor);
                aclnnBitwiseOrScalar / aclnnBitwiseOrScalarGetWorkspaceSize(self_: *const aclTensor, other: *const aclScalar, out: *mut aclTensor);
                aclnnBitwiseXorScalar / aclnnBitwiseXorScalarGetWorkspaceSize(self_: *const aclTensor, other: *const aclScalar, out: *mut aclTensor);
                aclnnClampMin / aclnnClampMinGetWorkspaceSize(self_: *const aclTensor, other: *const aclScalar, out: *mut aclTensor);
                aclnnClampMax / aclnnClampMaxGetWorkspaceSize(self_: *const aclTensor, other: *const aclScalar, out: *mut aclTensor);
                aclnnLeakyRelu / aclnnLeakyReluGetWorkspaceSize(self_: *const aclTensor, other: *const aclScalar, out: *mut aclTensor);
                aclnnClamp / aclnnClampGetWorkspaceSize(self_: *const aclTensor, min: *const aclScalar, max: *const aclScalar, out: *mut aclTensor);
                aclnnSWhere / aclnnSWhereGetWorkspaceSize(condition: *const aclTensor, self_: *const aclTensor, other: *const aclTensor, out: *mut aclTensor);
                aclnnInplaceMaskedFillScalar / aclnnInplaceMaskedFillScalarGetWorkspaceSize(self_ref: *mut aclTensor, mask: *const aclTensor, value: *const aclScalar);
                aclnnGeluBackward / aclnnGeluBackwardGetWorkspaceSize(grad_output: *const aclTensor, self_: *const aclTensor, grad_input: *const aclTensor);
                aclnnSigmoidBackward / aclnnSigmoidBackwardGetWorkspaceSize(grad_output: *const aclTensor, output: *const aclTensor, grad_input: *mut aclTensor);
                aclnnThresholdBackward / aclnnThresholdBackwardGetWorkspaceSize(grad_output: *const aclTensor, self_: *const aclTensor, threshold: *const aclScalar, out: *mut aclTensor);
                aclnnProd / aclnnProdGetWorkspaceSize(self_: *const aclTensor, dtype: i32, out: *mut aclTensor);
                aclnnProdDim / aclnnProdDimGetWorkspaceSize(self_: *const aclTensor, dim: i64, keep_dim: bool, dtype: i32, out: *mut aclTensor);
                aclnnMean / aclnnMeanGetWorkspaceSize(self_: *const aclTensor, dim: *const aclIntArray, keep_dim: bool, dtype: i32, out: *mut aclTensor);
                aclnnAmax / aclnnAmaxGetWorkspaceSize(self_: *const aclTensor, dim: *const aclIntArray, keep_dim: bool, out: *mut aclTensor);
                aclnnAmin / aclnnAminGetWorkspaceSize(self_: *const aclTensor, dim: *const aclIntArray, keep_dim: bool, out: *mut aclTensor);
                aclnnMax / aclnnMaxGetWorkspaceSize(self_: *const aclTensor, out: *mut aclTensor);
                aclnnMin / aclnnMinGetWorkspaceSize(self_: *const aclTensor, out: *mut aclTensor);
                aclnnArgMax / aclnnArgMaxGetWorkspaceSize(self_: *const aclTensor, dim: i64, keepdim: bool, out: *mut aclTensor);
                aclnnArgMin / aclnnArgMinGetWorkspaceSize(self_: *const aclTensor, dim: i64, keepdim: bool, out: *mut aclTensor);
                aclnnAny / aclnnAnyGetWorkspaceSize(self_: *const aclTensor, dim: *const aclIntArray, keepdim: bool, out: *mut aclTensor);
                aclnnAll / aclnnAllGetWorkspaceSize(self_: *const aclTensor, dim: *const aclIntArray, keepdim: bool, out: *mut aclTensor);
                aclnnCumsum / aclnnCumsumGetWorkspaceSize(self_: *const aclTensor, dim: i64, dtype: i32, out: *mut aclTensor);
                aclnnCumprod / aclnnCumprodGetWorkspaceSize(input: *const aclTensor, dim: *const aclScalar, dtype: i32, out: *mut aclTensor);
                aclnnCummax / aclnnCummaxGetWorkspaceSize(self_: *const aclTensor, dim: i64, values_out: *mut aclTensor, indices_out: *mut aclTensor);
                aclnnCummin / aclnnCumminGetWorkspaceSize(self_: *const aclTensor, dim: i64, values_out: *mut aclTensor, indices_out: *mut aclTensor);
                aclnnSoftmax / aclnnSoftmaxGetWorkspaceSize(self_: *const aclTensor, dim: i64, out: *mut aclTensor);
                aclnnLogSoftmax / aclnnLogSoftmaxGetWorkspaceSize(self_: *const aclTensor, dim: i64, out: *mut aclTensor);
                aclnnSort / aclnnSortGetWorkspaceSize(self_: *const aclTensor, stable: bool, dim: i64, descending: bool, values_out: *mut aclTensor, indices_out: *mut aclTensor);
                aclnnGather / aclnnGatherGetWorkspaceSize(self_: *const aclTensor, dim: i64, index: *const aclTensor, out: *mut aclTensor);
                aclnnScatterAdd / aclnnScatterAddGetWorkspaceSize(self_: *const aclTensor, dim: i64, index: *const aclTensor, src: *const aclTensor, out: *mut aclTensor);
                aclnnIndexSelect / aclnnIndexSelectGetWorkspaceSize(self_: *const aclTensor, dim: i64, index: *const aclTensor, out: *mut aclTensor);
                aclnnIndexAdd / aclnnIndexAddGetWorkspaceSize(self_: *const aclTensor, dim: i64, index: *const aclTensor, source: *const aclTensor, alpha: *const aclScalar, out: *mut aclTensor);
                aclnnScatter / aclnnScatterGetWorkspaceSize(self_: *const aclTensor, dim: i64, index: *const aclTensor, src: *const aclTensor, reduce: i64, out: *mut aclTensor);
                aclnnInplaceIndexCopy / aclnnInplaceIndexCopyGetWorkspaceSize(self_ref: *mut aclTensor, dim: i64, index: *const aclTensor, source: *const aclTensor);
                aclnnRepeat / aclnnRepeatGetWorkspaceSize(self_: *const aclTensor, repeats: *const aclIntArray, out: *mut aclTensor);
                aclnnNonzero / aclnnNonzeroGetWorkspaceSize(self_: *const aclTensor, out: *mut aclTensor);
                aclnnLinalgCross / aclnnLinalgCrossGetWorkspaceSize(self_: *const aclTensor, other: *const aclTensor, dim: i64, out: *mut aclTensor);
                aclnnInplaceUniform / aclnnInplaceUniformGetWorkspaceSize(self_ref: *const aclTensor, from: f64, to: f64, seed: u64, offset: u64);
                aclnnInplaceNormal / aclnnInplaceNormalGetWorkspaceSize(self_ref: *const aclTensor, mean: f32, std: f32, seed: i64, offset: i64);
                aclnnInplaceBernoulli / aclnnInplaceBernoulliGetWorkspaceSize(self_ref: *const aclTensor, prob: *const aclScalar, seed: i64, offset: i64);
                aclnnConstantPadNd / aclnnConstantPadNdGetWorkspaceSize(self_: *const aclTensor, pad: *const aclIntArray, value: *const aclScalar, out: *mut aclTensor);
                aclnnConvolution / aclnnConvolutionGetWorkspaceSize(input: *const aclTensor, weight: *const aclTensor, bias: *const aclTensor, stride: *const aclIntArray, padding: *const aclIntArray, dilation: *const aclIntArray, transposed: bool, output_padding: *const aclIntArray, groups: i64, output: *mut aclTensor, cube_math_type: i8);
                aclnnConvolutionBackward / aclnnConvolutionBackwardGetWorkspaceSize(grad_output: *const aclTensor, input: *const aclTensor, weight: *const aclTensor, bias_sizes: *const aclIntArray, stride: *const aclIntArray, padding: *const aclIntArray, dilation: *const aclIntArray, transposed: bool, output_padding: *const aclIntArray, groups: ::std::ffi::c_int, output_mask: *const aclBoolArray, cube_math_type: i8, grad_input: *mut aclTensor, grad_weight: *mut aclTensor, grad_bias: *mut aclTensor);
                aclnnRmsNorm / aclnnRmsNormGetWorkspaceSize(x: *const aclTensor, gamma: *const aclTensor, epsilon: f64, y_out: *const aclTensor, rstd_out: *const aclTensor);
                aclnnFlashAttentionScore / aclnnFlashAttentionScoreGetWorkspaceSize(query: *const aclTensor, key: *const aclTensor, value: *const aclTensor, real_shift_optional: *const aclTensor, drop_mask_optional: *const aclTensor, padding_mask_optional: *const aclTensor, atten_mask_optional: *const aclTensor, prefix_optional: *const aclIntArray, scale_value: f64, keep_prob: f64, pre_tokens: i64, next_tokens: i64, head_num: i64, input_layout: *mut ::std::ffi::c_char, inner_precise: i64, sparse_mode: i64, softmax_max_out: *const aclTensor, softmax_sum_out: *const aclTensor, softmax_out_out: *const aclTensor, attention_out_out: *const aclTensor);
                aclnnFlashAttentionScoreGrad / aclnnFlashAttentionScoreGradGetWorkspaceSize(query: *const aclTensor, key_in: *const aclTensor, value: *const aclTensor, dy: *const aclTensor, pse_shift_optional: *const aclTensor, drop_mask_optional: *const aclTensor, padding_mask_optional: *const aclTensor, atten_mask_optional: *const aclTensor, softmax_max_optional: *const aclTensor, softmax_sum_optional: *const aclTensor, softmax_in_optional: *const aclTensor, attention_in_optional: *const aclTensor, prefix_optional: *const aclIntArray, scale_value: f64, keep_prob: f64, pre_tokens: i64, next_tokens: i64, head_num: i64, input_layout: *mut ::std::ffi::c_char, inner_precise: i64, sparse_mode: i64, dq_out: *const aclTensor, dk_out: *const aclTensor, dv_out: *const aclTensor, dpse_out: *const aclTensor);
                aclnnRmsNormGrad / aclnnRmsNormGradGetWorkspaceSize(dy: *const aclTensor, x: *const aclTensor, rstd: *const aclTensor, gamma: *const aclTensor, dx_out: *const aclTensor, dgamma_out: *const aclTensor);
                aclnnAddRmsNorm / aclnnAddRmsNormGetWorkspaceSize(x1: *const aclTensor, x2: *const aclTensor, gamma: *const aclTensor, epsilon: f64, y_out: *const aclTensor, rstd_out: *const aclTensor, x_out: *const aclTensor);
                aclnnGroupedMatmulV4 / aclnnGroupedMatmulV4GetWorkspaceSize(x: *const aclTensorList, weight: *const aclTensorList, bias_optional: *const aclTensorList, scale_optional: *const aclTensorList, offset_optional: *const aclTensorList, antiquant_scale_optional: *const aclTensorList, antiquant_offset_optional: *const aclTensorList, per_token_scale_optional: *const aclTensorList, group_list_optional: *const aclTensor, activation_input_optional: *const aclTensorList, activation_quant_scale_optional: *const aclTensorList, activation_quant_offset_optional: *const aclTensorList, split_item: i64, group_type: i64, group_list_type: i64, act_type: i64, out: *mut aclTensorList, activation_feature_out_optional: *mut aclTensorList, dyn_quant_scale_out_optional: *mut aclTensorList);
                aclnnFusedInferAttentionScoreV3 / aclnnFusedInferAttentionScoreV3GetWorkspaceSize(query: *const aclTensor, key: *const aclTensorList, value: *const aclTensorList, pse_shift_optional: *const aclTensor, atten_mask_optional: *const aclTensor, actual_seq_lengths_optional: *const aclIntArray, actual_seq_lengths_kv_optional: *const aclIntArray, deq_scale1_optional: *const aclTensor, quant_scale1_optional: *const aclTensor, deq_scale2_optional: *const aclTensor, quant_scale2_optional: *const aclTensor, quant_offset2_optional: *const aclTensor, antiquant_scale_optional: *const aclTensor, antiquant_offset_optional: *const aclTensor, block_table_optional: *const aclTensor, query_padding_size_optional: *const aclTensor, kv_padding_size_optional: *const aclTensor, key_antiquant_scale_optional: *const aclTensor, key_antiquant_offset_optional: *const aclTensor, value_antiquant_scale_optional: *const aclTensor, value_antiquant_offset_optional: *const aclTensor, key_shared_prefix_optional: *const aclTensor, value_shared_prefix_optional: *const aclTensor, actual_shared_prefix_len_optional: *const aclIntArray, query_rope_optional: *const aclTensor, key_rope_optional: *const aclTensor, key_rope_antiquant_scale_optional: *const aclTensor, num_heads: i64, scale_value: f64, pre_tokens: i64, next_tokens: i64, input_layout: *mut ::std::ffi::c_char, num_key_value_heads: i64, sparse_mode: i64, inner_precise: i64, block_size: i64, antiquant_mode: i64, softmax_lse_flag: bool, key_antiquant_mode: i64, value_antiquant_mode: i64, attention_out: *const aclTensor, softmax_lse: *const aclTensor);
                aclnnMoeInitRoutingV2 / aclnnMoeInitRoutingV2GetWorkspaceSize(x: *const aclTensor, expert_idx: *const aclTensor, active_num: i64, expert_capacity: i64, expert_num: i64, drop_pad_mode: i64, expert_tokens_count_or_cumsum_flag: i64, expert_tokens_before_capacity_flag: bool, expanded_x_out: *const aclTensor, expanded_row_idx_out: *const aclTensor, expert_tokens_count_or_cumsum_out: *const aclTensor, expert_tokens_before_capacity_out: *const aclTensor);
                aclnnMoeInitRoutingQuantV2 / aclnnMoeInitRoutingQuantV2GetWorkspaceSize(x: *const aclTensor, expert_idx: *const aclTensor, scale_optional: *const aclTensor, offset_optional: *const aclTensor, active_num: i64, expert_capacity: i64, expert_num: i64, drop_pad_mode: i64, expert_tokens_count_or_cumsum_flag: i64, expert_tokens_before_capacity_flag: bool, quant_mode: i64, expanded_x_out: *const aclTensor, expanded_row_idx_out: *const aclTensor, expert_tokens_count_or_cumsum_out_optional: *const aclTensor, expert_tokens_before_capacity_out_optional: *const aclTensor, dynamic_quant_scale_out_optional: *const aclTensor);
                aclnnMoeTokenUnpermute / aclnnMoeTokenUnpermuteGetWorkspaceSize(permuted_tokens: *const aclTensor, sorted_indices: *const aclTensor, probs_optional: *const aclTensor, padded_mode: bool, restore_shape_optional: *const aclIntArray, out: *mut aclTensor);
                aclnnMoeFinalizeRoutingV2 / aclnnMoeFinalizeRoutingV2GetWorkspaceSize(expanded_x: *const aclTensor, expanded_row_idx: *const aclTensor, x1_optional: *const aclTensor, x2_optional: *const aclTensor, bias_optional: *const aclTensor, scales_optional: *const aclTensor, expert_idx_optional: *const aclTensor, drop_pad_mode: i64, out: *const aclTensor);
                aclnnMoeGatingTopKSoftmax / aclnnMoeGatingTopKSoftmaxGetWorkspaceSize(x: *const aclTensor, finished_optional: *const aclTensor, k: i64, y_out: *const aclTensor, expert_idx_out: *const aclTensor, row_idx_out: *const aclTensor);
                aclnnMoeGatingTopKSoftmaxV2 / aclnnMoeGatingTopKSoftmaxV2GetWorkspaceSize(x: *const aclTensor, finished_optional: *const aclTensor, k: i64, renorm: i64, output_softmax_result_flag: bool, y_out: *const aclTensor, expert_idx_out: *const aclTensor, softmax_result_out_optional: *const aclTensor);
                aclnnTopk / aclnnTopkGetWorkspaceSize(self_: *const aclTensor, k: i64, dim: i64, largest: bool, sorted: bool, values_out: *mut aclTensor, indices_out: *mut aclTensor);
                aclnnSwiGlu / aclnnSwiGluGetWorkspaceSize(x: *const aclTensor, dim: i64, out: *const aclTensor);
                aclnnApplyRotaryPosEmb / aclnnApplyRotaryPosEmbGetWorkspaceSize(query_ref: *mut aclTensor, key_ref: *mut aclTensor, cos: *const aclTensor, sin: *const aclTensor, layout: i64);
                aclnnRopeWithSinCosCache / aclnnRopeWithSinCosCacheGetWorkspaceSize(positions: *const aclTensor, query_in: *const aclTensor, key_in: *const aclTensor, cos_sin_cache: *const aclTensor, mrope_section: *const aclIntArray, head_size: i64, is_neox_style: bool, query_out: *mut aclTensor, key_out: *mut aclTensor);
                aclnnInplaceScatterUpdate / aclnnInplaceScatterUpdateGetWorkspaceSize(data: *mut aclTensor, indices: *const aclTensor, updates: *const aclTensor, axis: i64);
                aclnnDynamicQuant / aclnnDynamicQuantGetWorkspaceSize(x: *const aclTensor, smooth_scales_optional: *const aclTensor, y_out: *const aclTensor, scale_out: *const aclTensor);
                aclnnWeightQuantBatchMatmulV2 / aclnnWeightQuantBatchMatmulV2GetWorkspaceSize(x: *const aclTensor, weight: *const aclTensor, antiquant_scale: *const aclTensor, antiquant_offset_optional: *const aclTensor, quant_scale_optional: *const aclTensor, quant_offset_optional: *const aclTensor, bias_optional: *const aclTensor, antiquant_group_size: ::std::ffi::c_int, y: *const aclTensor);
                aclnnQuantMatmulV4 / aclnnQuantMatmulV4GetWorkspaceSize(x1: *const aclTensor, x2: *const aclTensor, scale: *const aclTensor, offset: *const aclTensor, pertoken_scale_optional: *const aclTensor, bias: *const aclTensor, transpose_x1: bool, transpose_x2: bool, out: *const aclTensor);
            }
        }
    };
}
