// moe_gather: the expert-major permutation of tokens (fused-ops contract 1):
// out[i, :] = x[indices[i] / K, :] for x [T, H] and indices [T*K] (int32). f16, bf16 and f32
// rows move as 2- or 4-byte elements (the data is not computed on).
#include "row_gather.h"

extern "C" __global__ __aicore__ void moe_gather(GM_ADDR x, GM_ADDR indices, GM_ADDR out, BurnRowGatherTiling tiling)
{
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIV_ONLY);
    burn_ascend::RunRowGather<int32_t>(x, indices, out, tiling, "moe_gather", "indices");
}
