#pragma once
// kernelCheck(): the vectorised elementwise CPU kernels of every ISA this CPU runs, checked against
// scalar references (argmax incl. ties/NaN/signed zero, SiLU/SwiGLU, conv+SiLU, gated RMSNorm).
#include <napi.h>

namespace lumen {
Napi::Value KernelCheck(const Napi::CallbackInfo& info);
}
