// Host emulation of the Ascend C kernel API subset (CANN 8.x, Atlas A2/A3) for vector cores and,
// with KERNEL_TYPE_AIC_ONLY, cube cores; for g++ -std=c++17.
//
// Kernels written against the real API (`#include "kernel_operator.h"`, `using namespace AscendC;`,
// `extern "C" __global__ __aicore__ void k(GM_ADDR x, ..., Tiling t)`) compile unchanged against
// this header and run on the host through ascendc_emu_run (src/runner.cpp), which enforces the
// hardware rules of /work/shared/ascend/ascendc-api.md §9 and reports a broken one as an AI Core
// error (507015) naming the kernel, the block and the rule. The emulation's scope and its limits
// are listed in ascendc/README.md.
#ifndef KERNEL_OPERATOR_H
#define KERNEL_OPERATOR_H

#include "ascendc_emu/types.h"      // qualifiers, half/bfloat16_t, enums, copy parameters
#include "ascendc_emu/core.h"       // per-core state, rule violations, GM access, event flags
#include "ascendc_emu/tensor.h"     // GlobalTensor, LocalTensor
#include "ascendc_emu/pipe.h"       // TPipe, TQue/TQueBind, TBuf
#include "ascendc_emu/data_copy.h"  // DataCopy, DataCopyPad
#include "ascendc_emu/cube.h"       // cube core: DataCopy GM->L1 (Nd2Nz), LoadData, Mmad, Fixpipe
#include "ascendc_emu/vector.h"     // vector compute APIs
#include "ascendc_emu/sync.h"       // flags, barriers, atomics, block indices, kernel type
#include "ascendc_emu/real_names.h" // the rest of the real header's names, declared so kernels clash as on CANN
#include "ascendc_emu/debug.h"      // printf, Trap, assert (after real_names.h, whose <cassert> it overrides)

#endif
