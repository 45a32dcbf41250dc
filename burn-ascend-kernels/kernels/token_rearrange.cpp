// token_rearrange: out[i, :] = x[perm[i], :] for x [S, D] and perm [S] (int32 or int64)
// (fused-ops contract 3).
#include "row_gather.h"

extern "C" __global__ __aicore__ void token_rearrange(GM_ADDR x, GM_ADDR perm, GM_ADDR out, BurnRowGatherTiling tiling)
{
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIV_ONLY);
    if (tiling.indexBytes == 8) {
        burn_ascend::RunRowGather<int64_t>(x, perm, out, tiling, "token_rearrange", "perm");
    } else {
        burn_ascend::RunRowGather<int32_t>(x, perm, out, tiling, "token_rearrange", "perm");
    }
}
