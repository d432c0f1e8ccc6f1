#pragma once
// poolCheck(threads, regions): the thread pool's stealable and work-conserving regions under a
// worker that stalls mid-piece (a descheduled core), checked for outputs that are complete, right,
// and never overwritten later by the late worker.
#include <napi.h>

namespace lumen {
Napi::Value PoolCheck(const Napi::CallbackInfo& info);
// poolFailureCheck(threads): an exception thrown inside each kind of region, on a worker or on the
// caller, reaches the caller once (and a taken-over worker's does not), and the pool runs on.
Napi::Value PoolFailureCheck(const Napi::CallbackInfo& info);
}
