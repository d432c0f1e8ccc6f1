// CPU emulation of the parts of the CUDA runtime and execution model the backend uses (see
// emu_device.h). Serial and deterministic: launches execute at once in stream order (or are
// recorded while a stream is being captured, and replayed by cudaGraphLaunch); blocks run one at
// a time; the threads of a block are fibers switched by a small x86-64 routine.
//
// Checks that a GPU would not make visible: launch limits (threads per block, grid size, dynamic
// shared memory against the opt-in limit of sm_86/sm_89, 99 KiB, and the 48 KiB default unless
// cudaFuncSetAttribute raised it), warp collectives with missing lanes, barriers that cannot
// complete, ldmatrix/cp.async addresses outside shared memory or misaligned, calls that are
// illegal during stream capture. Fresh device and shared memory is filled with 0xFF bytes (NaN
// floats) so reads of unwritten data show. A failure is reported on stderr and becomes a sticky
// cudaErrorLaunchFailure, as a device fault would.
//
// LUMEN_EMU_SCHEDULE sets the order in which the fibers of a block run between barriers and
// collectives, and the blocks of a grid run: "forward" (the default: thread and block index order),
// "reverse", or "shuffle:SEED" (a seeded random order, drawn again at every pass). A kernel whose
// result depends on that order reads or writes memory other threads write without a barrier
// between (a race a GPU would show some day): run the checks under each order (run.sh --schedule).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "emu_device.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define LUMEN_EMU_ASAN 1
#endif

#if !defined(__x86_64__)
#error "the CUDA emulation's fiber switch is written for x86-64"
#endif

extern "C" void lumen_emu_swap(void** save_sp, void* load_sp);
asm(R"(
  .text
  .globl lumen_emu_swap
  .type lumen_emu_swap,@function
lumen_emu_swap:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size lumen_emu_swap,.-lumen_emu_swap
  .section .note.GNU-stack,"",@progbits
  .text
)");

namespace lumen::emu {
namespace {

constexpr size_t kStack = 256 * 1024;
constexpr int kDefaultSmem = 48 * 1024;
constexpr int kOptinSmem = 101376;  // 99 KiB: the sm_86 / sm_89 limit, the tightest target

struct EmuFailure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

enum class St { Ready, AtBar, AtWarp, Done };

struct Fiber {
  void* sp = nullptr;
  char* stack = nullptr;
  uint3 tid{};
  int lane = 0, warp = 0;
  St st = St::Ready;
  int parity = 0;
  unsigned barriers = 0;  // __syncthreads passed: the parity of the next one's predicate slot
};

struct WarpSlots {
  uint32_t v[2][32][8];
};

struct BlockRun {
  const char* name = "";
  const std::function<void()>* body = nullptr;
  std::vector<Fiber> fibers;
  std::vector<WarpSlots> slots;
  std::vector<char> arena;
  uint3 bidx{};
  dim3 bdim, gdim;
  void* sched_sp = nullptr;
  Fiber* cur = nullptr;
  std::string error;
  // __syncthreads_or's result, one slot per barrier parity: a barrier's slot is cleared when the one
  // before it is released (every thread has read it by then: all of them reached the next barrier).
  int bar_or[2] = {0, 0};
  unsigned bar_gen = 0;  // barriers released
#if LUMEN_EMU_ASAN
  void* fake_stack = nullptr;
  const void* main_bottom = nullptr;
  size_t main_size = 0;
#endif
};

thread_local BlockRun* g_run = nullptr;

// LUMEN_EMU_SCHEDULE (see the top of this file).
struct Schedule {
  enum Mode { kForward, kReverse, kShuffle } mode = kForward;
  std::mt19937_64 rng;
};
Schedule& schedule() {
  static Schedule s = [] {
    Schedule r;
    const char* v = std::getenv("LUMEN_EMU_SCHEDULE");
    const std::string m = v ? v : "";
    if (m.empty() || m == "forward") return r;
    if (m == "reverse") {
      r.mode = Schedule::kReverse;
      return r;
    }
    char* end = nullptr;
    const unsigned long long seed = m.rfind("shuffle:", 0) == 0 ? std::strtoull(m.c_str() + 8, &end, 10) : 0;
    if (end == nullptr || end == m.c_str() + 8 || *end != 0) {
      std::fprintf(stderr, "[cuda-emu] LUMEN_EMU_SCHEDULE=%s: expected forward, reverse or shuffle:SEED\n", m.c_str());
      std::exit(2);
    }
    r.mode = Schedule::kShuffle;
    r.rng.seed(seed);
    return r;
  }();
  return s;
}
// 0..n-1 in the schedule's order.
void schedule_order(std::vector<int64_t>& order, int64_t n) {
  order.resize(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t{0});
  Schedule& s = schedule();
  if (s.mode == Schedule::kReverse) std::reverse(order.begin(), order.end());
  if (s.mode == Schedule::kShuffle) std::shuffle(order.begin(), order.end(), s.rng);
}
std::mutex g_exec_mu;  // static __shared__ arrays are process-wide: one grid at a time

struct Stacks {
  std::vector<std::unique_ptr<char[]>> mem;
  char* get(size_t i) {
    while (mem.size() <= i) mem.emplace_back(new char[kStack]);
    return mem[i].get();
  }
};
thread_local Stacks g_stacks;

// Fiber -> scheduler and back.
void to_sched(Fiber* f) {
  BlockRun* r = g_run;
#if LUMEN_EMU_ASAN
  void* fs = nullptr;
  __sanitizer_start_switch_fiber(f->st == St::Done ? nullptr : &fs, r->main_bottom, r->main_size);
  lumen_emu_swap(&f->sp, r->sched_sp);
  __sanitizer_finish_switch_fiber(fs, nullptr, nullptr);
#else
  lumen_emu_swap(&f->sp, r->sched_sp);
#endif
}

void to_fiber(BlockRun* r, Fiber* f) {
  r->cur = f;
#if LUMEN_EMU_ASAN
  __sanitizer_start_switch_fiber(&r->fake_stack, f->stack, kStack);
  lumen_emu_swap(&r->sched_sp, f->sp);
  __sanitizer_finish_switch_fiber(r->fake_stack, &r->main_bottom, &r->main_size);
#else
  lumen_emu_swap(&r->sched_sp, f->sp);
#endif
}

[[noreturn]] void fiber_fail(const std::string& msg) {
  BlockRun* r = g_run;
  Fiber* f = r->cur;
  if (r->error.empty())
    r->error = msg + " (thread " + std::to_string(f->tid.x) + "," + std::to_string(f->tid.y) + "," + std::to_string(f->tid.z) + ")";
  f->st = St::Done;
  to_sched(f);
  __builtin_unreachable();
}

void trampoline() {
#if LUMEN_EMU_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &g_run->main_bottom, &g_run->main_size);
#endif
  BlockRun* r = g_run;
  Fiber* f = r->cur;
  (*r->body)();
  f->st = St::Done;
  to_sched(f);
  __builtin_unreachable();
}

void init_fiber(Fiber& f, char* stack) {
  f.stack = stack;
#if LUMEN_EMU_ASAN
  // Fibers never return: frames of an earlier fiber on this stack are still poisoned.
  __asan_unpoison_memory_region(stack, kStack);
#endif
  auto top = reinterpret_cast<uintptr_t>(stack + kStack) & ~uintptr_t(15);
  auto* p = reinterpret_cast<uint64_t*>(top);
  p[-1] = 0;                                           // fake return address of the trampoline
  p[-2] = reinterpret_cast<uint64_t>(&trampoline);     // popped by `ret`
  for (int i = 3; i <= 8; ++i) p[-i] = 0;              // rbp rbx r12 r13 r14 r15
  uint32_t csr[2];
  asm volatile("stmxcsr %0" : "=m"(csr[0]));
  uint16_t cw;
  asm volatile("fnstcw %0" : "=m"(cw));
  csr[1] = cw;
  std::memcpy(&p[-9], csr, 8);
  f.sp = &p[-9];
}

void collective_wait(Fiber* f) {
  f->st = St::AtWarp;
  to_sched(f);
}

uint32_t* exchange(const uint32_t* mine, int n) {
  BlockRun* r = g_run;
  Fiber* f = r->cur;
  WarpSlots& ws = r->slots[f->warp];
  const int p = f->parity;
  f->parity ^= 1;
  std::memcpy(ws.v[p][f->lane], mine, static_cast<size_t>(n) * 4);
  collective_wait(f);
  return &ws.v[p][0][0];
}

void run_block(BlockRun& r) {
  const int n = static_cast<int>(r.bdim.x * r.bdim.y * r.bdim.z);
  r.fibers.assign(n, Fiber{});
  r.slots.assign((n + 31) / 32, WarpSlots{});
  r.bar_or[0] = r.bar_or[1] = 0;
  r.bar_gen = 0;
  for (int i = 0; i < n; ++i) {
    Fiber& f = r.fibers[i];
    f.tid = uint3{static_cast<unsigned>(i % r.bdim.x), static_cast<unsigned>((i / r.bdim.x) % r.bdim.y),
                  static_cast<unsigned>(i / (r.bdim.x * r.bdim.y))};
    f.lane = i % 32;
    f.warp = i / 32;
    init_fiber(f, g_stacks.get(i));
  }
  const int nwarps = (n + 31) / 32;
  std::vector<int64_t> order;
  for (;;) {
    bool ran = false;
    schedule_order(order, n);
    for (const int64_t i : order)
      if (Fiber& f = r.fibers[static_cast<size_t>(i)]; f.st == St::Ready) {
        to_fiber(&r, &f);
        ran = true;
        if (!r.error.empty()) throw EmuFailure(r.error);
      }
    bool released = false;
    for (int w = 0; w < nwarps; ++w) {
      const int lanes = std::min(32, n - 32 * w);
      int at = 0, done = 0;
      for (int l = 0; l < lanes; ++l) {
        const St s = r.fibers[32 * w + l].st;
        at += s == St::AtWarp;
        done += s == St::Done;
      }
      if (at > 0 && at + done == lanes) {
        if (at != 32) throw EmuFailure("warp collective in warp " + std::to_string(w) + " with " + std::to_string(at) + " of 32 lanes");
        for (int l = 0; l < lanes; ++l) r.fibers[32 * w + l].st = St::Ready;
        released = true;
      }
    }
    int bar = 0, done = 0;
    for (auto& f : r.fibers) {
      bar += f.st == St::AtBar;
      done += f.st == St::Done;
    }
    if (done == n) return;
    if (bar > 0 && bar + done == n) {
      if (done > 0) throw EmuFailure("__syncthreads reached by " + std::to_string(bar) + " threads while " + std::to_string(done) + " had exited");
      for (auto& f : r.fibers) f.st = St::Ready;
      r.bar_or[(r.bar_gen + 1) & 1] = 0;
      ++r.bar_gen;
      released = true;
    }
    if (!ran && !released) {
      int warp = 0;
      for (auto& f : r.fibers) warp += f.st == St::AtWarp;
      throw EmuFailure("deadlock: " + std::to_string(bar) + " threads at __syncthreads, " + std::to_string(warp) +
                       " in warp collectives, " + std::to_string(done) + " exited");
    }
  }
}

// ---- streams, graphs, errors

struct Op {
  std::function<void()> fn;
};

cudaError_t g_last = cudaSuccess;
cudaError_t g_sticky = cudaSuccess;
std::map<const void*, int> g_smem_limit;
std::map<void*, size_t> g_allocs;
size_t g_alloc_bytes = 0;  // sum of g_allocs (guarded by g_api_mu)

// The emulated device's memory: LUMEN_EMU_DEVICE_MEMORY bytes (default 16 GiB). cudaMalloc
// refuses past it, and cudaMemGetInfo's free memory is the total less what is allocated, so a KV
// pool sized from a fraction of the free memory is deterministic.
size_t emu_total_memory() {
  const char* v = std::getenv("LUMEN_EMU_DEVICE_MEMORY");
  if (v && *v) {
    char* end = nullptr;
    const unsigned long long n = std::strtoull(v, &end, 10);
    if (end && *end == 0 && n > 0) return static_cast<size_t>(n);
  }
  return size_t(16) << 30;
}
std::mutex g_api_mu;
thread_local int g_capturing = 0;

cudaError_t set_last(cudaError_t e) {
  if (e != cudaSuccess) g_last = e;
  return e;
}

void run_op(const Op& op) {
  if (g_sticky != cudaSuccess) return;
  op.fn();
}

}  // namespace
}  // namespace lumen::emu

struct EmuStream {
  bool capturing = false;
  std::vector<lumen::emu::Op> captured;
};
struct EmuGraph {
  std::vector<lumen::emu::Op> ops;
};
struct EmuGraphExec {
  std::vector<lumen::emu::Op> ops;
};

namespace lumen::emu {
namespace {

cudaError_t enqueue(cudaStream_t s, Op op) {
  if (g_sticky != cudaSuccess) return g_sticky;
  if (s && s->capturing) {
    s->captured.push_back(std::move(op));
    return cudaSuccess;
  }
  run_op(op);
  return g_sticky;
}

void run_grid(const char* name, dim3 grid, dim3 block, size_t smem, const std::function<void()>& body) {
  std::lock_guard<std::mutex> lk(g_exec_mu);
  BlockRun r;
  r.name = name;
  r.body = &body;
  r.bdim = block;
  r.gdim = grid;
  BlockRun* prev = g_run;
  g_run = &r;
  try {
    const int64_t nblocks = static_cast<int64_t>(grid.x) * grid.y * grid.z;
    std::vector<int64_t> order;
    schedule_order(order, nblocks);
    for (const int64_t b : order) {
      const unsigned x = static_cast<unsigned>(b % grid.x), y = static_cast<unsigned>((b / grid.x) % grid.y),
                     z = static_cast<unsigned>(b / (static_cast<int64_t>(grid.x) * grid.y));
      r.bidx = uint3{x, y, z};
      r.arena.assign(std::max<size_t>(smem, 16), static_cast<char>(0xFF));
      r.error.clear();
      run_block(r);
    }
  } catch (const EmuFailure& e) {
    std::fprintf(stderr, "[cuda-emu] kernel %s, block (%u,%u,%u): %s\n", name, r.bidx.x, r.bidx.y, r.bidx.z, e.what());
    g_sticky = cudaErrorLaunchFailure;
  }
  g_run = prev;
}

}  // namespace

// ---- device side

const uint3& thread_idx() { return g_run->cur->tid; }
const uint3& block_idx() { return g_run->bidx; }
const dim3& block_dim() { return g_run->bdim; }
const dim3& grid_dim() { return g_run->gdim; }

int syncthreads_or(int predicate) {
  BlockRun* r = g_run;
  Fiber* f = r->cur;
  const unsigned p = f->barriers++ & 1;
  if (predicate) r->bar_or[p] = 1;
  f->st = St::AtBar;
  to_sched(f);
  return r->bar_or[p];
}

void syncthreads() { syncthreads_or(0); }

float shfl_xor(float v, int lane_mask) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  const uint32_t* s = exchange(&u, 1);
  const int src = g_run->cur->lane ^ lane_mask;
  if (src < 0 || src > 31) fiber_fail("shuffle from lane " + std::to_string(src));
  float r;
  std::memcpy(&r, &s[src * 8], 4);
  return r;
}

size_t smem_offset(const void* p) {
  BlockRun* r = g_run;
  const char* c = static_cast<const char*>(p);
  if (c < r->arena.data() || c > r->arena.data() + r->arena.size())
    fiber_fail("address is not in dynamic shared memory");
  return static_cast<size_t>(c - r->arena.data());
}

void* dyn_smem_base() { return g_run->arena.data(); }

void cp_async16(uint32_t off, const void* src, bool valid) {
  BlockRun* r = g_run;
  if (off % 16 || off + 16 > r->arena.size()) fiber_fail("cp.async destination misaligned or outside shared memory");
  if (reinterpret_cast<uintptr_t>(src) % 16) fiber_fail("cp.async source not 16-byte aligned");
  if (valid)
    std::memcpy(r->arena.data() + off, src, 16);
  else
    std::memset(r->arena.data() + off, 0, 16);
}

void ldmatrix_x4(uint32_t off, uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3) {
  BlockRun* r = g_run;
  if (off % 16 || off + 16 > r->arena.size()) fiber_fail("ldmatrix row address misaligned or outside shared memory");
  const uint32_t* s = exchange(&off, 1);
  const int lane = r->cur->lane;
  uint32_t out[4];
  for (int i = 0; i < 4; ++i) {
    const uint32_t row_addr = s[(8 * i + lane / 4) * 8];  // row lane/4 of matrix i
    std::memcpy(&out[i], r->arena.data() + row_addr + 4 * (lane % 4), 4);
  }
  r0 = out[0];
  r1 = out[1];
  r2 = out[2];
  r3 = out[3];
}

void mma_m16n8k16_bf16(float* c, const uint32_t* a, const uint32_t* b) {
  const uint32_t mine[6] = {a[0], a[1], a[2], a[3], b[0], b[1]};
  const uint32_t* s = exchange(mine, 6);
  float A[16][16], B[16][8];
  auto lo = [](uint32_t w) { return __uint_as_float(w << 16); };
  auto hi = [](uint32_t w) { return __uint_as_float(w & 0xffff0000u); };
  for (int l = 0; l < 32; ++l) {
    const uint32_t* w = s + l * 8;
    const int g = l / 4, t = l % 4;
    A[g][2 * t] = lo(w[0]);
    A[g][2 * t + 1] = hi(w[0]);
    A[g + 8][2 * t] = lo(w[1]);
    A[g + 8][2 * t + 1] = hi(w[1]);
    A[g][2 * t + 8] = lo(w[2]);
    A[g][2 * t + 9] = hi(w[2]);
    A[g + 8][2 * t + 8] = lo(w[3]);
    A[g + 8][2 * t + 9] = hi(w[3]);
    B[2 * t][g] = lo(w[4]);
    B[2 * t + 1][g] = hi(w[4]);
    B[2 * t + 8][g] = lo(w[5]);
    B[2 * t + 9][g] = hi(w[5]);
  }
  const int lane = g_run->cur->lane, g = lane / 4, t = lane % 4;
  for (int e = 0; e < 4; ++e) {
    const int row = g + (e >= 2 ? 8 : 0), col = 2 * t + (e & 1);
    float acc = c[e];
    for (int k = 0; k < 16; ++k) acc += A[row][k] * B[k][col];
    c[e] = acc;
  }
}

cudaError_t set_func_smem_limit(const void* func, int bytes) {
  if (bytes > kOptinSmem) return set_last(cudaErrorInvalidValue);
  std::lock_guard<std::mutex> lk(g_api_mu);
  g_smem_limit[func] = bytes;
  return cudaSuccess;
}

void submit(cudaStream_t s, const char* name, const void* func, dim3 grid, dim3 block, size_t smem,
            std::function<void()> body) {
  const unsigned long long threads = 1ull * block.x * block.y * block.z;
  int limit = kDefaultSmem;
  {
    std::lock_guard<std::mutex> lk(g_api_mu);
    auto it = g_smem_limit.find(func);
    if (it != g_smem_limit.end()) limit = it->second;
  }
  std::string bad;
  if (threads == 0 || threads > 1024) bad = "threads per block " + std::to_string(threads);
  else if (grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.y > 65535 || grid.z > 65535 || grid.x > 0x7fffffffu)
    bad = "grid " + std::to_string(grid.x) + "x" + std::to_string(grid.y) + "x" + std::to_string(grid.z);
  else if (smem > static_cast<size_t>(limit))
    bad = "dynamic shared memory " + std::to_string(smem) + " > limit " + std::to_string(limit);
  if (!bad.empty()) {
    std::fprintf(stderr, "[cuda-emu] launch of %s refused: %s\n", name, bad.c_str());
    set_last(cudaErrorInvalidConfiguration);
    return;
  }
  enqueue(s, Op{[name, grid, block, smem, body = std::move(body)]() { run_grid(name, grid, block, smem, body); }});
}

}  // namespace lumen::emu

// ---- host API

using namespace lumen::emu;

const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInsufficientDriver: return "cudaErrorInsufficientDriver";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorIllegalAddress: return "cudaErrorIllegalAddress";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    case cudaErrorStreamCaptureUnsupported: return "cudaErrorStreamCaptureUnsupported";
    case cudaErrorStreamCaptureInvalidated: return "cudaErrorStreamCaptureInvalidated";
  }
  return "cudaErrorUnknown";
}
const char* cudaGetErrorString(cudaError_t e) { return cudaGetErrorName(e); }
cudaError_t cudaGetLastError() {
  const cudaError_t e = g_sticky != cudaSuccess ? g_sticky : g_last;
  g_last = cudaSuccess;
  return e;
}
cudaError_t cudaGetDeviceCount(int* n) {
  if (std::getenv("LUMEN_EMU_NO_DEVICE")) {
    *n = 0;
    return cudaErrorNoDevice;
  }
  *n = 1;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int d) { return d == 0 ? cudaSuccess : set_last(cudaErrorInvalidValue); }
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int d) {
  if (d != 0) return set_last(cudaErrorInvalidValue);
  std::memset(p, 0, sizeof(*p));
  std::snprintf(p->name, sizeof(p->name), "CPU emulation (sm_90 model)");
  p->major = 9;
  p->minor = 0;
  p->totalGlobalMem = emu_total_memory();
  p->multiProcessorCount = 4;
  return cudaSuccess;
}
cudaError_t cudaDeviceGetAttribute(int* v, cudaDeviceAttr a, int d) {
  if (a != cudaDevAttrMaxSharedMemoryPerBlockOptin || d != 0) return set_last(cudaErrorInvalidValue);
  *v = 101376;
  return cudaSuccess;
}
cudaError_t cudaMalloc(void** p, size_t n) {
  if (g_capturing) return set_last(cudaErrorStreamCaptureUnsupported);
  const size_t sz = (std::max<size_t>(n, 1) + 255) / 256 * 256;
  {
    std::lock_guard<std::mutex> lk(g_api_mu);
    if (g_alloc_bytes + sz > emu_total_memory()) return set_last(cudaErrorMemoryAllocation);
  }
  void* m = std::aligned_alloc(256, sz);
  if (!m) return set_last(cudaErrorMemoryAllocation);
  std::memset(m, 0xFF, sz);
  std::lock_guard<std::mutex> lk(g_api_mu);
  g_allocs[m] = sz;
  g_alloc_bytes += sz;
  *p = m;
  return cudaSuccess;
}
cudaError_t cudaFree(void* p) {
  if (!p) return cudaSuccess;
  std::lock_guard<std::mutex> lk(g_api_mu);
  auto it = g_allocs.find(p);
  if (it == g_allocs.end()) return set_last(cudaErrorInvalidValue);
  g_alloc_bytes -= it->second;
  g_allocs.erase(it);
  std::free(p);
  return cudaSuccess;
}
cudaError_t cudaMallocHost(void** p, size_t n) {
  *p = std::aligned_alloc(256, (std::max<size_t>(n, 1) + 255) / 256 * 256);
  return *p ? cudaSuccess : set_last(cudaErrorMemoryAllocation);
}
cudaError_t cudaFreeHost(void* p) {
  std::free(p);
  return cudaSuccess;
}
cudaError_t cudaMemGetInfo(size_t* f, size_t* t) {
  std::lock_guard<std::mutex> lk(g_api_mu);
  *t = emu_total_memory();
  *f = *t > g_alloc_bytes ? *t - g_alloc_bytes : 0;
  return cudaSuccess;
}
cudaError_t cudaMemcpy(void* dst, const void* src, size_t n, cudaMemcpyKind) {
  if (g_capturing) return set_last(cudaErrorStreamCaptureUnsupported);
  if (g_sticky != cudaSuccess) return g_sticky;
  std::memcpy(dst, src, n);
  return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t n, cudaMemcpyKind, cudaStream_t s) {
  return enqueue(s, Op{[=]() { std::memcpy(dst, src, n); }});
}
cudaError_t cudaMemset(void* p, int v, size_t n) {
  if (g_capturing) return set_last(cudaErrorStreamCaptureUnsupported);
  std::memset(p, v, n);
  return g_sticky;
}
cudaError_t cudaMemsetAsync(void* p, int v, size_t n, cudaStream_t s) {
  return enqueue(s, Op{[=]() { std::memset(p, v, n); }});
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned) {
  *s = new EmuStream();
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t s) {
  delete s;
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  if (s && s->capturing) return set_last(cudaErrorStreamCaptureUnsupported);
  return g_sticky;
}
cudaError_t cudaDeviceSynchronize() {
  if (g_capturing) return set_last(cudaErrorStreamCaptureUnsupported);
  return g_sticky;
}
cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode) {
  if (!s || s->capturing) return set_last(cudaErrorInvalidValue);
  s->capturing = true;
  s->captured.clear();
  ++g_capturing;
  return cudaSuccess;
}
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t* g) {
  if (!s || !s->capturing) return set_last(cudaErrorInvalidValue);
  s->capturing = false;
  --g_capturing;
  *g = new EmuGraph{std::move(s->captured)};
  s->captured.clear();
  return cudaSuccess;
}
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* e, cudaGraph_t g, unsigned long long) {
  *e = new EmuGraphExec{g->ops};
  return cudaSuccess;
}
cudaError_t cudaGraphLaunch(cudaGraphExec_t e, cudaStream_t s) {
  if (s && s->capturing) return set_last(cudaErrorInvalidValue);
  for (const auto& op : e->ops) run_op(op);
  return g_sticky;
}
cudaError_t cudaGraphDestroy(cudaGraph_t g) {
  delete g;
  return cudaSuccess;
}
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t e) {
  delete e;
  return cudaSuccess;
}
