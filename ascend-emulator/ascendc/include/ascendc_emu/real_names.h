// Host emulation of Ascend C: names the real kernel_operator.h declares that the emulation does
// not implement, declared here only so that a kernel's own names collide with them as they do
// under CANN (facts read from the open-sourced asc-devkit headers). Without them a kernel could compile on the
// host and fail on the first real build, e.g. with a global `struct LayerNormTiling` or an
// unscoped enumerator `MAX` used under `using namespace AscendC;`.
//
// Everything below is a declaration of the name and a plausible shape, nothing more: the
// tiling structs have no fields, and the high-level (adv_api) functions have no definitions, so a
// kernel calling one fails to link. Shapes follow the memo; where it marks a parameter list as
// unverified, the declaration says so.
#ifndef ASCENDC_EMU_REAL_NAMES_H
#define ASCENDC_EMU_REAL_NAMES_H

#include <cassert>
#include <cstdint>

#include "ascendc_emu/tensor.h"
#include "ascendc_emu/types.h"

// ---- Global macros of the real headers (memo §2e) that the emulation lacked ----

#define ASSERT(x) assert(x)
#define ASCEND_IS_NOT_AIV (!ASCEND_IS_AIV)
#define ASCEND_IS_NOT_AIC (!ASCEND_IS_AIC)

// ---- Global unscoped enums (memo §2f); KernelMetaType is in types.h ----
// Their enumerators land in the global namespace, so a kernel's own K_TYPE_*, B_TYPE_*, F_TYPE_*
// or C_TYPE_* clash with them even without `using namespace AscendC;`. Only K_TYPE_AICORE's value
// is known; the others are not meant to be used.

enum KernelType {
    K_TYPE_AICORE = 1,
    K_TYPE_AIC,
    K_TYPE_AIV,
    K_TYPE_MIX_AIC_MAIN,
    K_TYPE_MIX_AIV_MAIN,
    K_TYPE_AIC_ROLLBACK,
    K_TYPE_AIV_ROLLBACK,
    K_TYPE_MAX,
};

enum BinaryMetaType {
    B_TYPE_BIN_VERSION_INFO,
    B_TYPE_DEBUG_INFO,
    B_TYPE_DYNAMIC_PARAM,
    B_TYPE_OPTIONAL_PARAM,
    B_TYPE_SK_INFO,
    B_TYPE_SPECIALIZATION_RESOURCE_ID,
    B_TYPE_ICACHE_PRELOAD_FLAG,
};

enum FuncMetaType {
    F_TYPE_KTYPE,
    F_TYPE_CROSS_CORE_SYNC,
    F_TYPE_MIX_TASK_RATION,
    F_TYPE_L0_EXCEPTION_DFX,
    F_TYPE_L0_EXCEPTION_DFX_ARGSINFO,
    F_TYPE_L0_EXCEPTION_DFX_IS_TIK,
    F_TYPE_DETERMINISTIC_INFO,
    F_TYPE_FUNCTION_ENTRY_INFO,
    F_TYPE_BLOCK_NUM_INFO,
    F_TYPE_MAX,
};

enum CrossCoreSyncType {
    C_TYPE_USE_SYNC,
    C_TYPE_MAX,
};

// ---- Tiling structs of the high-level API (memo §1, §2a) ----
// The real kernel_tiling.h (generated, pulled in by every build through the adv_api headers)
// defines them in AscendC::tiling and exports each to the global namespace with a
// using-declaration, so a kernel's own global struct of one of these names is a conflicting
// redeclaration.

namespace AscendC {
namespace tiling {
struct BatchNormTiling {};
struct ConfusionTransposeTiling {};
struct Conv3DBackpropFilterTilingData {};
struct Conv3DBackpropInputTilingData {};
struct Conv3DBpFilterParams {};
struct DeepNormTiling {};
struct GroupNormTiling {};
struct LayerNormGradBetaTiling {};
struct LayerNormGradTiling {};
struct LayerNormSeparateTiling {};
struct LayerNormTiling {};
struct LogSoftMaxTiling {};
struct Mc2CcTiling {};
struct Mc2HcommCfg {};
struct Mc2InitTiling {};
struct Mc2ServerCfg {};
struct PadTiling {};
struct RmsNormTiling {};
struct SoftMaxTiling {};
struct TConv3DApiTiling {};
struct TConv3DBackpropInputTiling {};
struct TConv3DBpFilterBasicBlockTiling {};
struct TConv3DBpFilterTiling {};
struct TCubeTiling {};
struct TopkTiling {};
struct UnPadTiling {};
}  // namespace tiling
}  // namespace AscendC

using AscendC::tiling::BatchNormTiling;
using AscendC::tiling::ConfusionTransposeTiling;
using AscendC::tiling::Conv3DBackpropFilterTilingData;
using AscendC::tiling::Conv3DBackpropInputTilingData;
using AscendC::tiling::Conv3DBpFilterParams;
using AscendC::tiling::DeepNormTiling;
using AscendC::tiling::GroupNormTiling;
using AscendC::tiling::LayerNormGradBetaTiling;
using AscendC::tiling::LayerNormGradTiling;
using AscendC::tiling::LayerNormSeparateTiling;
using AscendC::tiling::LayerNormTiling;
using AscendC::tiling::LogSoftMaxTiling;
using AscendC::tiling::Mc2CcTiling;
using AscendC::tiling::Mc2HcommCfg;
using AscendC::tiling::Mc2InitTiling;
using AscendC::tiling::Mc2ServerCfg;
using AscendC::tiling::PadTiling;
using AscendC::tiling::RmsNormTiling;
using AscendC::tiling::SoftMaxTiling;
using AscendC::tiling::TConv3DApiTiling;
using AscendC::tiling::TConv3DBackpropInputTiling;
using AscendC::tiling::TConv3DBpFilterBasicBlockTiling;
using AscendC::tiling::TConv3DBpFilterTiling;
using AscendC::tiling::TCubeTiling;
using AscendC::tiling::TopkTiling;
using AscendC::tiling::UnPadTiling;

namespace AscendC {

// ---- CPU-debug atomic state (memo §4) ----
// Unscoped: under `using namespace AscendC;` a kernel's own unqualified SUM, MAX or MIN becomes
// ambiguous. The real headers declare it in CPU-debug builds only; the emulation is always one.
enum AtomicType { SUM, MAX, MIN };
extern bool g_isAtomic;
extern AtomicType g_atomicType;

// ---- Parameter and configuration types of the high-level API (fields not modelled) ----

struct LayerNormConfig {};
inline constexpr LayerNormConfig LNCFG_NORM{};
struct LayerNormPara {};
struct LayerNormGradShapeInfo {};
struct WelfordUpdateConfig {};
inline constexpr WelfordUpdateConfig WFUPDATE_DEFAULT_CFG{};
struct WelfordUpdateParam {};
struct SoftmaxConfig {};
inline constexpr SoftmaxConfig SOFTMAX_DEFAULT_CFG{};
struct SoftMaxShapeInfo {};
struct SumParams {};
struct MeanParams {};
struct SortConfig {};
inline constexpr SortConfig DEFAULT_SORT_CONFIG{};
// Scoped here: the memo saw TopKMode and TransposeType only used qualified.
enum class TopKMode { TOPK_NORMAL };
struct TopKInfo {};
enum class TransposeType : uint8_t {};
struct PadParams {};
struct UnPadParams {};

// ---- High-level API function templates (memo §3), declarations only ----
// Several share a name with a basic API the emulation implements (ReduceSum, ReduceMax,
// ReduceMin, Exp); as in the real headers their template heads keep them apart: the adv
// reductions take two leading type parameters and adv Exp a taylorExpandLevel, neither of which
// a call like `ReduceSum(dst, src, tmp, n)` or `Exp<float>(...)` can deduce.

// normalization/layernorm.h
template <typename T, bool isReuseSource = false>
void LayerNorm(const LocalTensor<T>& output, const LocalTensor<T>& outputMean, const LocalTensor<T>& outputVariance,
               const LocalTensor<T>& inputX, const LocalTensor<T>& gamma, const LocalTensor<T>& beta,
               const LocalTensor<uint8_t>& sharedTmpBuffer, const T epsilon, tiling::LayerNormTiling& tiling);
template <typename T, bool isReuseSource = false>
void LayerNorm(const LocalTensor<T>& output, const LocalTensor<T>& outputMean, const LocalTensor<T>& outputVariance,
               const LocalTensor<T>& inputX, const LocalTensor<T>& gamma, const LocalTensor<T>& beta, const T epsilon,
               tiling::LayerNormTiling& tiling);
template <typename U, typename T, bool isReuseSource = false, const LayerNormConfig& config = LNCFG_NORM>
void LayerNorm(const LocalTensor<T>& output, const LocalTensor<float>& outputMean, const LocalTensor<float>& outputRstd,
               const LocalTensor<T>& inputX, const LocalTensor<U>& gamma, const LocalTensor<U>& beta,
               const float epsilon, const LocalTensor<uint8_t>& sharedTmpBuffer, const LayerNormPara& para,
               const tiling::LayerNormSeparateTiling& tiling);
template <typename U, typename T, bool isReuseSource = false, const LayerNormConfig& config = LNCFG_NORM>
void LayerNorm(const LocalTensor<T>& output, const LocalTensor<float>& outputMean, const LocalTensor<float>& outputRstd,
               const LocalTensor<T>& inputX, const LocalTensor<U>& gamma, const LocalTensor<U>& beta,
               const float epsilon, const LayerNormPara& para, const tiling::LayerNormSeparateTiling& tiling);
template <typename T, typename U, bool isReuseSource = false, const WelfordUpdateConfig& config = WFUPDATE_DEFAULT_CFG>
void WelfordUpdate(const LocalTensor<U>& outputMean, const LocalTensor<U>& outputVariance,
                   const LocalTensor<U>& inputMean, const LocalTensor<U>& inputVariance, const LocalTensor<T>& inputX,
                   const LocalTensor<uint8_t>& sharedTmpBuffer, const WelfordUpdateParam& para);
template <typename T, typename U, bool isReuseSource = false, const WelfordUpdateConfig& config = WFUPDATE_DEFAULT_CFG>
void WelfordUpdate(const LocalTensor<U>& outputMean, const LocalTensor<U>& outputVariance,
                   const LocalTensor<U>& inputMean, const LocalTensor<U>& inputVariance, const LocalTensor<T>& inputX,
                   const WelfordUpdateParam& para);

// normalization/layernormgrad.h, layernormgradbeta.h
template <typename T, bool isReuseSource = false>
void LayerNormGrad(const LocalTensor<T>& outputPdX, const LocalTensor<T>& resForGamma, const LocalTensor<T>& inputDy,
                   const LocalTensor<T>& inputX, const LocalTensor<T>& inputVariance, const LocalTensor<T>& inputMean,
                   const LocalTensor<T>& inputGamma, LocalTensor<uint8_t>& sharedTmpBuffer, T epsilon,
                   tiling::LayerNormGradTiling& tiling, const LayerNormGradShapeInfo& shapeInfo = {});
template <typename T, bool isReuseSource = false>
void LayerNormGrad(const LocalTensor<T>& outputPdX, const LocalTensor<T>& resForGamma, const LocalTensor<T>& inputDy,
                   const LocalTensor<T>& inputX, const LocalTensor<T>& inputVariance, const LocalTensor<T>& inputMean,
                   const LocalTensor<T>& inputGamma, T epsilon, tiling::LayerNormGradTiling& tiling,
                   const LayerNormGradShapeInfo& shapeInfo = {});
template <typename T, bool isReuseSource = false>
void LayerNormGradBeta(const LocalTensor<T>& outputPdGamma, const LocalTensor<T>& outputPdBeta,
                       const LocalTensor<T>& resForGamma, const LocalTensor<T>& inputDy,
                       const LocalTensor<uint8_t>& sharedTmpBuffer, const tiling::LayerNormGradBetaTiling& tiling);
template <typename T, bool isReuseSource = false>
void LayerNormGradBeta(const LocalTensor<T>& outputPdGamma, const LocalTensor<T>& outputPdBeta,
                       const LocalTensor<T>& resForGamma, const LocalTensor<T>& inputDy,
                       tiling::LayerNormGradBetaTiling& tiling);

// normalization/rmsnorm.h, batchnorm.h, groupnorm.h, deepnorm.h
template <typename T, bool isBasicBlock = false>
void RmsNorm(const LocalTensor<T>& dst, const LocalTensor<T>& src, const LocalTensor<T>& gamma,
             const LocalTensor<uint8_t>& sharedTmpBuffer, const T epsilon, const tiling::RmsNormTiling& tiling);
template <typename T, bool isBasicBlock = false>
void RmsNorm(const LocalTensor<T>& dst, const LocalTensor<T>& src, const LocalTensor<T>& gamma, const T epsilon,
             const tiling::RmsNormTiling& tiling);
template <typename T, bool isReuseSource = false, bool isBasicBlock = false>
void BatchNorm(const LocalTensor<T>& output, const LocalTensor<T>& outputMean, const LocalTensor<T>& outputVariance,
               const LocalTensor<T>& inputX, const LocalTensor<T>& gamma, const LocalTensor<T>& beta,
               const LocalTensor<uint8_t>& sharedTmpBuffer, const T epsilon, tiling::BatchNormTiling& tiling);
template <typename T, bool isReuseSource = false, bool isBasicBlock = false>
void BatchNorm(const LocalTensor<T>& output, const LocalTensor<T>& outputMean, const LocalTensor<T>& outputVariance,
               const LocalTensor<T>& inputX, const LocalTensor<T>& gamma, const LocalTensor<T>& beta, const T epsilon,
               tiling::BatchNormTiling& tiling);
template <typename T, bool isReuseSource = false>
void GroupNorm(const LocalTensor<T>& output, const LocalTensor<T>& outputMean, const LocalTensor<T>& outputVariance,
               const LocalTensor<T>& inputX, const LocalTensor<T>& gamma, const LocalTensor<T>& beta,
               const LocalTensor<uint8_t>& sharedTmpBuffer, const T epsilon, tiling::GroupNormTiling& tiling);
template <typename T, bool isReuseSource = false>
void GroupNorm(const LocalTensor<T>& output, const LocalTensor<T>& outputMean, const LocalTensor<T>& outputVariance,
               const LocalTensor<T>& inputX, const LocalTensor<T>& gamma, const LocalTensor<T>& beta, const T epsilon,
               tiling::GroupNormTiling& tiling);
template <typename T, bool isReuseSrc = false, bool isBasicBlock = false>
void DeepNorm(const LocalTensor<T>& dst, const LocalTensor<T>& meanLocal, const LocalTensor<T>& rstdLocal,
              const LocalTensor<T>& srcLocal, const LocalTensor<T>& gxLocal, const LocalTensor<T>& betaLocal,
              const LocalTensor<T>& gammaLocal, const LocalTensor<uint8_t>& sharedTmpBuffer, const T alpha,
              const T epsilon, tiling::DeepNormTiling& tiling);
template <typename T, bool isReuseSrc = false, bool isBasicBlock = false>
void DeepNorm(const LocalTensor<T>& dst, const LocalTensor<T>& meanLocal, const LocalTensor<T>& rstdLocal,
              const LocalTensor<T>& srcLocal, const LocalTensor<T>& gxLocal, const LocalTensor<T>& betaLocal,
              const LocalTensor<T>& gammaLocal, const T alpha, const T epsilon, tiling::DeepNormTiling& tiling);

// activation/softmax.h, logsoftmax.h
template <typename T, bool isReuseSource = false, bool isBasicBlock = false, bool isDataFormatNZ = false,
          const SoftmaxConfig& config = SOFTMAX_DEFAULT_CFG>
void SoftMax(const LocalTensor<T>& dst, const LocalTensor<T>& sumTensor, const LocalTensor<T>& maxTensor,
             const LocalTensor<T>& src, const LocalTensor<uint8_t>& sharedTmpBuffer,
             const tiling::SoftMaxTiling& tiling, const SoftMaxShapeInfo& shapeInfo = {});
template <typename T, bool isReuseSource = false, bool isBasicBlock = false, bool isDataFormatNZ = false,
          const SoftmaxConfig& config = SOFTMAX_DEFAULT_CFG>
void SoftMax(const LocalTensor<T>& dst, const LocalTensor<T>& sumTensor, const LocalTensor<T>& maxTensor,
             const LocalTensor<T>& src, const tiling::SoftMaxTiling& tiling, const SoftMaxShapeInfo& shapeInfo = {});
template <typename T, bool isReuseSource = false, bool isBasicBlock = false, bool isDataFormatNZ = false,
          const SoftmaxConfig& config = SOFTMAX_DEFAULT_CFG>
void SoftMax(const LocalTensor<half>& dst, const LocalTensor<float>& sumTensor, const LocalTensor<float>& maxTensor,
             const LocalTensor<half>& src, const LocalTensor<uint8_t>& sharedTmpBuffer,
             const tiling::SoftMaxTiling& tiling, const SoftMaxShapeInfo& shapeInfo = {});
template <typename T, bool isReuseSource = false, bool isBasicBlock = false, bool isDataFormatNZ = false,
          const SoftmaxConfig& config = SOFTMAX_DEFAULT_CFG>
void SoftMax(const LocalTensor<half>& dst, const LocalTensor<float>& sumTensor, const LocalTensor<float>& maxTensor,
             const LocalTensor<half>& src, const tiling::SoftMaxTiling& tiling,
             const SoftMaxShapeInfo& shapeInfo = {});
template <typename T, bool isReuseSource = false, bool isBasicBlock = false,
          const SoftmaxConfig& config = SOFTMAX_DEFAULT_CFG>
void SoftMax(const LocalTensor<T>& dst, const LocalTensor<T>& src, const LocalTensor<uint8_t>& sharedTmpBuffer,
             const tiling::SoftMaxTiling& tiling, const SoftMaxShapeInfo& shapeInfo = {});
template <typename T, bool isReuseSource = false, bool isBasicBlock = false,
          const SoftmaxConfig& config = SOFTMAX_DEFAULT_CFG>
void SoftMax(const LocalTensor<T>& dst, const LocalTensor<T>& src, const tiling::SoftMaxTiling& tiling,
             const SoftMaxShapeInfo& shapeInfo = {});
template <typename T1, typename T2, bool isDataFormatNZ = false, uint8_t stepSizeMode = 0>
bool AdjustSoftMaxRes(const LocalTensor<T1>& softMaxRes, const LocalTensor<T2>& maxTensor, const uint32_t from,
                      const T1 to, const SoftMaxShapeInfo& shapeInfo);
template <typename T, bool isReuseSource = false, bool isDataFormatNZ = false>
void LogSoftMax(const LocalTensor<T>& dst, const LocalTensor<T>& sumTensor, const LocalTensor<T>& maxTensor,
                const LocalTensor<T>& src, const LocalTensor<uint8_t>& sharedTmpBuffer,
                const tiling::LogSoftMaxTiling& tiling, const SoftMaxShapeInfo& shapeInfo = {});

// activation/gelu.h, swiglu.h, sigmoid.h
template <typename T, bool highPrecision = false, bool highPerformance = false>
void Gelu(const LocalTensor<T>& dst, const LocalTensor<T>& src, const LocalTensor<uint8_t>& sharedTmpBuffer,
          const uint32_t dataSize);
template <typename T, bool highPrecision = false, bool highPerformance = false>
void Gelu(const LocalTensor<T>& dst, const LocalTensor<T>& src, const uint32_t dataSize);
template <typename T, bool highPrecision = false, bool highPerformance = false>
void FasterGelu(const LocalTensor<T>& dst, const LocalTensor<T>& src, const LocalTensor<uint8_t>& sharedTmpBuffer,
                const uint32_t dataSize);
template <typename T, bool highPrecision = false, bool highPerformance = false>
void FasterGelu(const LocalTensor<T>& dst, const LocalTensor<T>& src, const uint32_t dataSize);
template <typename T, bool highPrecision = false, bool highPerformance = false>
void FasterGeluV2(const LocalTensor<T>& dst, const LocalTensor<T>& src, const LocalTensor<uint8_t>& sharedTmpBuffer,
                  const uint32_t dataSize);
template <typename T, bool highPrecision = false, bool highPerformance = false>
void FasterGeluV2(const LocalTensor<T>& dst, const LocalTensor<T>& src, const uint32_t dataSize);
template <typename T, bool isReuseSource = false>
void SwiGLU(LocalTensor<T>& dst, LocalTensor<T>& src0, LocalTensor<T>& src1, const float& scalarValue);
template <typename T, bool isReuseSource = false>
void SwiGLU(LocalTensor<T>& dst, const LocalTensor<T>& src0, const LocalTensor<T>& src1, const float& scalarValue,
            const LocalTensor<uint8_t>& sharedTmpBuffer);
template <typename T, bool isReuseSource = false>
void SwiGLU(LocalTensor<T>& dst, const LocalTensor<T>& src0, const LocalTensor<T>& src1, const float& scalarValue,
            const uint32_t calCount);
template <typename T, bool isReuseSource = false>
void SwiGLU(LocalTensor<T>& dst, const LocalTensor<T>& src0, const LocalTensor<T>& src1, const float& scalarValue,
            const LocalTensor<uint8_t>& sharedTmpBuffer, const uint32_t calCount);
template <typename T, bool isReuseSource = false>
void Sigmoid(const LocalTensor<T>& dst, const LocalTensor<T>& src, const LocalTensor<uint8_t>& sharedTmpBuffer,
             const uint32_t calCount);
template <typename T, bool isReuseSource = false>
void Sigmoid(const LocalTensor<T>& dst, const LocalTensor<T>& src, const uint32_t calCount);
template <typename T, bool isReuseSource = false>
void Sigmoid(const LocalTensor<T>& dst, const LocalTensor<T>& src, const LocalTensor<uint8_t>& sharedTmpBuffer);
template <typename T, bool isReuseSource = false>
void Sigmoid(const LocalTensor<T>& dst, const LocalTensor<T>& src);

// reduce/sum.h, mean.h, reduce.h
template <typename T, int32_t reduceDim = -1, bool isReuseSource = false, bool isBasicBlock = false>
void Sum(const LocalTensor<T>& dst, const LocalTensor<T>& src, const LocalTensor<uint8_t>& sharedTmpBuffer,
         const SumParams& sumParams);
template <typename T, int32_t reduceDim = -1, bool isReuseSource = false, bool isBasicBlock = false>
void Sum(const LocalTensor<T>& dst, const LocalTensor<T>& src, const SumParams& sumParams);
template <typename T, typename accType = T, bool isReuseSource = false, bool isBasicBlock = false,
          int32_t reduceDim = -1>
void Mean(const LocalTensor<T>& dst, const LocalTensor<T>& src, const LocalTensor<uint8_t>& sharedTmpBuffer,
          const MeanParams& meanParams);
template <typename T, typename accType = T, bool isReuseSource = false, bool isBasicBlock = false,
          int32_t reduceDim = -1>
void Mean(const LocalTensor<T>& dst, const LocalTensor<T>& src, const MeanParams& meanParams);

// One macro per reduction name of reduce/reduce.h: both overloads (with and without the shared
// buffer) in the two-type-parameter form that keeps them apart from the basic API.
#define ASCENDC_EMU_ADV_REDUCE(Name)                                                                                   \
    template <class T, class pattern, bool isReuseSource = false>                                                      \
    void Name(const LocalTensor<T>& dst, const LocalTensor<T>& src, const LocalTensor<uint8_t>& sharedTmpBuffer,     \
              const uint32_t srcShape[], bool srcInnerPad);                                                            \
    template <class T, class pattern, bool isReuseSource = false>                                                      \
    void Name(const LocalTensor<T>& dst, const LocalTensor<T>& src, const uint32_t srcShape[], bool srcInnerPad);
ASCENDC_EMU_ADV_REDUCE(ReduceSum)
ASCENDC_EMU_ADV_REDUCE(ReduceMax)
ASCENDC_EMU_ADV_REDUCE(ReduceMin)
ASCENDC_EMU_ADV_REDUCE(ReduceMean)
ASCENDC_EMU_ADV_REDUCE(ReduceProd)
ASCENDC_EMU_ADV_REDUCE(ReduceAny)
ASCENDC_EMU_ADV_REDUCE(ReduceAll)
#undef ASCENDC_EMU_ADV_REDUCE

// math/exp.h, erf.h, tanh.h (the 2201 variants)
template <typename T, uint8_t taylorExpandLevel, bool isReuseSource = false>
void Exp(const LocalTensor<T>& dst, const LocalTensor<T>& src, const LocalTensor<uint8_t>& sharedTmpBuffer,
         const uint32_t calCount);
template <typename T, uint8_t taylorExpandLevel, bool isReuseSource = false>
void Exp(const LocalTensor<T>& dst, const LocalTensor<T>& src, const uint32_t calCount);

// The four overloads of a unary adv function: (dst, src [, sharedTmpBuffer] [, calCount]).
#define ASCENDC_EMU_ADV_UNARY(Name)                                                                                    \
    template <typename T, bool isReuseSource = false>                                                                  \
    void Name(const LocalTensor<T>& dst, const LocalTensor<T>& src, const LocalTensor<uint8_t>& sharedTmpBuffer,     \
              const uint32_t calCount);                                                                                \
    template <typename T, bool isReuseSource = false>                                                                  \
    void Name(const LocalTensor<T>& dst, const LocalTensor<T>& src, const uint32_t calCount);                        \
    template <typename T, bool isReuseSource = false>                                                                  \
    void Name(const LocalTensor<T>& dst, const LocalTensor<T>& src, const LocalTensor<uint8_t>& sharedTmpBuffer);    \
    template <typename T, bool isReuseSource = false>                                                                  \
    void Name(const LocalTensor<T>& dst, const LocalTensor<T>& src);
ASCENDC_EMU_ADV_UNARY(Erf)
ASCENDC_EMU_ADV_UNARY(Tanh)

// sort/sort.h, topk.h
template <typename T, typename U, bool isReuseSource = false, const SortConfig& config = DEFAULT_SORT_CONFIG>
void Sort(const LocalTensor<T>& dst, const LocalTensor<U>& dstIndex, const LocalTensor<T>& src,
          const LocalTensor<U>& srcIndex, const LocalTensor<uint8_t>& sharedTmpBuffer, const uint32_t calCount);
template <typename T, typename U, bool isReuseSource = false, const SortConfig& config = DEFAULT_SORT_CONFIG>
void Sort(const LocalTensor<T>& dst, const LocalTensor<U>& dstIndex, const LocalTensor<T>& src,
          const LocalTensor<U>& srcIndex, const uint32_t calCount);
template <typename T, bool isReuseSource = false, const SortConfig& config = DEFAULT_SORT_CONFIG>
void Sort(const LocalTensor<T>& dst, const LocalTensor<uint32_t>& dstIndex, const LocalTensor<T>& src,
          const LocalTensor<uint8_t>& sharedTmpBuffer, const uint32_t calCount);
template <typename T, bool isReuseSource = false, const SortConfig& config = DEFAULT_SORT_CONFIG>
void Sort(const LocalTensor<T>& dst, const LocalTensor<uint32_t>& dstIndex, const LocalTensor<T>& src,
          const uint32_t calCount);
template <typename T, bool isReuseSource = false, const SortConfig& config = DEFAULT_SORT_CONFIG>
void Sort(const LocalTensor<T>& dst, const LocalTensor<T>& src, const LocalTensor<uint8_t>& sharedTmpBuffer,
          const uint32_t calCount);
template <typename T, bool isReuseSource = false, const SortConfig& config = DEFAULT_SORT_CONFIG>
void Sort(const LocalTensor<T>& dst, const LocalTensor<T>& src, const uint32_t calCount);
template <typename T, bool isInitIndex = false, bool isHasfinish = false, bool isReuseSrc = false,
          TopKMode topkMode = TopKMode::TOPK_NORMAL>
void TopK(const LocalTensor<T>& dstValueLocal, const LocalTensor<int32_t>& dstIndexLocal,
          const LocalTensor<T>& srcLocal, const LocalTensor<int32_t>& srcIndexLocal,
          const LocalTensor<bool>& finishLocal, const LocalTensor<uint8_t>& tmpLocal, const int32_t k,
          const tiling::TopkTiling& tilling, const TopKInfo& topKInfo, const bool isLargest = true);
template <typename T, bool isInitIndex = false, bool isHasfinish = false, bool isReuseSrc = false,
          TopKMode topkMode = TopKMode::TOPK_NORMAL>
void TopK(const LocalTensor<T>& dstValueLocal, const LocalTensor<int32_t>& dstIndexLocal,
          const LocalTensor<T>& srcLocal, const LocalTensor<int32_t>& srcIndexLocal,
          const LocalTensor<bool>& finishLocal, const int32_t k, const tiling::TopkTiling& tilling,
          const TopKInfo& topKInfo, const bool isLargest = true);

// pad/pad.h, transpose/confusion_transpose.h
template <typename T>
void Pad(const LocalTensor<T>& dst, const LocalTensor<T>& src, PadParams& padParams,
         const LocalTensor<uint8_t>& sharedTmpBuffer, tiling::PadTiling& tiling);
template <typename T>
void Pad(const LocalTensor<T>& dst, const LocalTensor<T>& src, PadParams& padParams, tiling::PadTiling& tiling);
template <typename T>
void UnPad(const LocalTensor<T>& dst, const LocalTensor<T>& src, UnPadParams& unPadParams,
           LocalTensor<uint8_t>& sharedTmpBuffer, tiling::UnPadTiling& tiling);
template <typename T>
void UnPad(const LocalTensor<T>& dst, const LocalTensor<T>& src, UnPadParams& unPadParams, tiling::UnPadTiling& tiling);
template <typename T>
void Transpose(const LocalTensor<T>& dst, const LocalTensor<T>& src, const LocalTensor<uint8_t>& sharedTmpBuffer,
               TransposeType transposeType, tiling::ConfusionTransposeTiling& tiling);
template <typename T>
void Transpose(const LocalTensor<T>& dst, const LocalTensor<T>& src, TransposeType transposeType,
               tiling::ConfusionTransposeTiling& tiling);

// Further names the adv_api umbrella header brings in. The memo inferred them from header names
// and did not read their parameter lists, so they get the unary shape above as a stand-in: enough
// for a kernel's own class, variable or enumerator of the same name to clash.
ASCENDC_EMU_ADV_UNARY(SimpleSoftMax)
ASCENDC_EMU_ADV_UNARY(SoftmaxFlash)
ASCENDC_EMU_ADV_UNARY(SoftmaxFlashV2)
ASCENDC_EMU_ADV_UNARY(SoftmaxFlashV3)
ASCENDC_EMU_ADV_UNARY(SoftmaxGrad)
ASCENDC_EMU_ADV_UNARY(Silu)
ASCENDC_EMU_ADV_UNARY(Swish)
ASCENDC_EMU_ADV_UNARY(GeGLU)
ASCENDC_EMU_ADV_UNARY(ReGlu)
ASCENDC_EMU_ADV_UNARY(Dropout)
ASCENDC_EMU_ADV_UNARY(ArithProgression)
ASCENDC_EMU_ADV_UNARY(Cumsum)
ASCENDC_EMU_ADV_UNARY(Power)
ASCENDC_EMU_ADV_UNARY(Log)
ASCENDC_EMU_ADV_UNARY(Sin)
ASCENDC_EMU_ADV_UNARY(Cos)
ASCENDC_EMU_ADV_UNARY(Tan)
ASCENDC_EMU_ADV_UNARY(Asin)
ASCENDC_EMU_ADV_UNARY(Acos)
ASCENDC_EMU_ADV_UNARY(Atan)
ASCENDC_EMU_ADV_UNARY(Sinh)
ASCENDC_EMU_ADV_UNARY(Cosh)
ASCENDC_EMU_ADV_UNARY(Asinh)
ASCENDC_EMU_ADV_UNARY(Acosh)
ASCENDC_EMU_ADV_UNARY(Atanh)
ASCENDC_EMU_ADV_UNARY(Round)
ASCENDC_EMU_ADV_UNARY(Trunc)
ASCENDC_EMU_ADV_UNARY(Floor)
ASCENDC_EMU_ADV_UNARY(Ceil)
ASCENDC_EMU_ADV_UNARY(Sign)
ASCENDC_EMU_ADV_UNARY(Frac)
// The high-level Axpy (Muls + Add through a scratch buffer) beside the basic one in vector.h.
template <typename T, typename U, bool isReuseSource = false>
void Axpy(const LocalTensor<T>& dst, const LocalTensor<U>& src, const U scalarValue,
          const LocalTensor<uint8_t>& sharedTmpBuffer, const uint32_t calCount);
ASCENDC_EMU_ADV_UNARY(Xor)
ASCENDC_EMU_ADV_UNARY(Lgamma)
ASCENDC_EMU_ADV_UNARY(Digamma)
ASCENDC_EMU_ADV_UNARY(Fma)
ASCENDC_EMU_ADV_UNARY(Fmod)
ASCENDC_EMU_ADV_UNARY(Hypot)
ASCENDC_EMU_ADV_UNARY(IsNan)
ASCENDC_EMU_ADV_UNARY(IsInf)
ASCENDC_EMU_ADV_UNARY(IsFinite)
ASCENDC_EMU_ADV_UNARY(Where)
ASCENDC_EMU_ADV_UNARY(Philox)
ASCENDC_EMU_ADV_UNARY(AscendQuant)
ASCENDC_EMU_ADV_UNARY(AscendDequant)
ASCENDC_EMU_ADV_UNARY(AscendAntiQuant)
ASCENDC_EMU_ADV_UNARY(SelectWithBytesMask)
ASCENDC_EMU_ADV_UNARY(Broadcast)
ASCENDC_EMU_ADV_UNARY(ReduceXorSum)
ASCENDC_EMU_ADV_UNARY(Normalize)
ASCENDC_EMU_ADV_UNARY(WelfordFinalize)
ASCENDC_EMU_ADV_UNARY(TransData)
ASCENDC_EMU_ADV_UNARY(InitGlobalMemory)
#undef ASCENDC_EMU_ADV_UNARY

}  // namespace AscendC

#endif
