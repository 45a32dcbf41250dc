//! The one declarative list of every AscendCL and aclnn function the backend calls.
//!
//! The function table ([`super::table`]), the emulated runtime's symbol map and the emulated
//! CANN shared library used by the loader tests are all generated from this list, so the real
//! loader and the emulation cannot disagree on a name or a signature.
//!
//! `runtime` and `nnopbase` functions are resolved when the table is loaded. `ops` are aclnn
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
                fn aclrtDestroyEvent(event: aclrtEvent) -> aclError;
                fn aclrtRecordEvent(event: aclrtEvent, stream: aclrtStream) -> aclError;
                fn aclrtSynchronizeEvent(event: aclrtEvent) -> aclError;
                fn aclrtQueryEventStatus(event: aclrtEvent, status: *mut i32) -> aclError;
                fn aclrtMalloc(dev_ptr: *mut *mut ::std::ffi::c_void, size: usize, policy: i32) -> aclError;
                fn aclrtFree(dev_ptr: *mut ::std::ffi::c_void) -> aclError;
                fn aclrtMemcpy(dst: *mut ::std::ffi::c_void, dest_max: usize, src: *const ::std::ffi::c_void, count: usize, kind: i32) -> aclError;
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
                fn aclCreateTensorList(value: *const *const aclTensor, size: u64) -> *mut aclTensorList;
                fn aclDestroyTensorList(array: *const aclTensorList) -> aclnnStatus;
                fn aclDestroyAclOpExecutor(executor: *mut aclOpExecutor) -> aclnnStatus;
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
                aclnnReduceSum / aclnnReduceSumGetWorkspaceSize(self_: *const aclTensor, dims: *const aclIntArray, keep_dims: bool, dtype: i32, out: *mut aclTensor);
                aclnnCat / aclnnCatGetWorkspaceSize(tensors: *const aclTensorList, dim: i64, out: *mut aclTensor);
                aclnnFlip / aclnnFlipGetWorkspaceSize(self_: *const aclTensor, dims: *const aclIntArray, out: *mut aclTensor);
            }
        }
    };
}
