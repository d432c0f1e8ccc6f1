#pragma once
#include <memory>

#include "backend/backend.h"

namespace lumen {
std::unique_ptr<Backend> make_cpu_backend(int n_threads);
}
