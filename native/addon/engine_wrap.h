#pragma once
#include <napi.h>

namespace lumen {
Napi::Function InitEngineClass(Napi::Env env);
}
