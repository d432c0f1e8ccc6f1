#pragma once
// kernelCheck's checks of one ISA table's block-quantized kernels (dequantization, activation
// quantization, packed dot products, the activation-quantization bound): see quant_check.cpp.
#include <napi.h>

#include "backend/cpu/kernels.h"

namespace lumen {
Napi::Object check_quant_table(Napi::Env env, const cpu::Kernels& K);
}
