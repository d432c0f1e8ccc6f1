#pragma once
// kernelCheck(): the vectorised elementwise CPU kernels of every ISA this CPU runs, checked against
// scalar references (argmax incl. ties/NaN/infinity/signed zero, SiLU/SwiGLU, conv+SiLU, gated RMSNorm), and
// the block-quantized kernels (testing/quant_check.cpp).
#include <napi.h>

namespace lumen {
Napi::Value KernelCheck(const Napi::CallbackInfo& info);
}
