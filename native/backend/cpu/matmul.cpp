// How the CPU backend splits a matrix product over the threads: prefill products (packed bf16
// panels, or row-major f32 / bf16 rows for the GEMM) as pieces dealt from a shared counter; decode
// products as a stealable work list of far-apart weight streams (see ThreadPool::run_stealable);
// block-quantized matrices (GGUF) with x quantized once per activation type, then the same
// stealable streams for 1..3 rows, else pieces of weight rows dealt from a shared counter. The
// kernels are in isa/matmul.cpp, isa/gemm.cpp and isa/quant_matmul.cpp.
#include <algorithm>
#include <cstring>

#include "backend/cpu/cpu_backend.h"
#include "core/quant_ref.h"

namespace lumen::cpu {

void CpuBackend::matmul(const float* x, int rows, const WMat& w, float* y) {
  // The vocabulary head is a third of a small model's bytes: profile it apart from the layers.
  ScopedOp op(profiling_, stats_, w.ptr == head_ptr_ ? "lm_head" : "matmul", "matmul");
  const WMat* ws[] = {&w};
  float* const ys[] = {y};
  matmul_impl(x, rows, ws, ys, 1);
}

void CpuBackend::matmul_group(const float* x, int rows, const WMat* const* ws, float* const* ys, int n) {
  ScopedOp op(profiling_, stats_, "matmul", "matmul");
  matmul_impl(x, rows, ws, ys, n);
}

void CpuBackend::matmul_impl(const float* x, int rows, const WMat* const* ws, float* const* ys, int n) {
  if (rows <= 0 || n <= 0) return;
  for (int i = 0; i < n; ++i)
    if (is_quant(ws[i]->dtype)) {
      matmul_quantized(x, rows, ws, ys, n);
      return;
    }
  bool packed = true;
  for (int i = 0; i < n; ++i) packed = packed && ws[i]->aux != nullptr && ws[i]->cols == ws[0]->cols;
  const int64_t K = ws[0]->cols;
  const int64_t xn = static_cast<int64_t>(rows) * K;
  if (!packed) {
    if (rows > kDecodeRows) {
      // Prefill over row-major weights: pieces of 128 weight rows of every matrix (the GEMM widens
      // them into f32 panels), dealt from a shared counter so a slower core takes fewer. Every
      // piece reads all of x, which stays in the shared L3.
      constexpr int64_t kRowsPerPiece = 128;
      prefill_pieces_.clear();
      for (int i = 0; i < n; ++i)
        for (int64_t r = 0; r < ws[i]->rows; r += kRowsPerPiece)
          prefill_pieces_.push_back({i, r, std::min(ws[i]->rows, r + kRowsPerPiece), 0});
      pool_.parallel_dealt(static_cast<int64_t>(prefill_pieces_.size()), 1, [&](int64_t first, int64_t last) {
        for (int64_t p = first; p < last; ++p) {
          const Piece& pc = prefill_pieces_[static_cast<size_t>(p)];
          const WMat& w = *ws[pc.matrix];
          kernels_.gemm(x, rows, w.cols, w.ptr, w.dtype, pc.p0, pc.p1, ys[pc.matrix], w.rows);
        }
      });
      return;
    }
    bool same_k = true;
    for (int i = 0; i < n; ++i) same_k = same_k && ws[i]->cols == K;
    if (!same_k) {
      for (int i = 0; i < n; ++i) matmul_impl(x, rows, ws + i, ys + i, 1);
      return;
    }
    decode_region(x, rows, ws, ys, n, false);
    return;
  }
  // x rounded to bf16 once for all the matrices, then one parallel region over all of them.
  if (x_bf16_.size() < static_cast<size_t>(xn) * 2) x_bf16_.resize(static_cast<size_t>(xn) * 2, false);
  uint16_t* xb = x_bf16_.as<uint16_t>();
  // A decode batch's rows take a few microseconds to round: less than waking the pool for them.
  if (xn <= 65536)
    kernels_.to_bf16(x, xb, xn);
  else
    pool_.parallel_for(rows, [&](int64_t r0, int64_t r1) { kernels_.to_bf16(x + r0 * K, xb + r0 * K, (r1 - r0) * K); });
  if (rows > kDecodeRows) {
    // Larger batches (prefill): pieces of 8 adjacent panels (128 weight rows, 256 KiB at K = 1024,
    // long sequential streams) of every matrix, dealt from a shared counter so a slower core
    // takes fewer.
    constexpr int64_t kPanelsPerPiece = 8;
    prefill_pieces_.clear();
    for (int i = 0; i < n; ++i) {
      const int64_t panels = (ws[i]->rows + kPanel - 1) / kPanel;
      for (int64_t p = 0; p < panels; p += kPanelsPerPiece)
        prefill_pieces_.push_back({i, p, std::min(panels, p + kPanelsPerPiece), 0});
    }
    pool_.parallel_dealt(static_cast<int64_t>(prefill_pieces_.size()), 1, [&](int64_t first, int64_t last) {
      for (int64_t i = first; i < last; ++i) {
        const Piece& pc = prefill_pieces_[static_cast<size_t>(i)];
        const WMat& w = *ws[pc.matrix];
        kernels_.matmul_packed(xb, rows, K, static_cast<const uint16_t*>(w.aux), w.rows, pc.p0, pc.p1, ys[pc.matrix],
                               w.rows, 0);
      }
    });
    return;
  }
  decode_region(x, rows, ws, ys, n, true);
}

namespace {
// A work list for two cores that claim from its two ends (ThreadPool's from_both_ends): pieces
// added in memory order, then the second half of their bytes reversed, so each core walks its
// half in order. With half = the whole, the list stays in order.
struct TwoRuns {
  int64_t half;
  int64_t done = 0;   // bytes added so far
  size_t second = 0;  // the first piece that starts in the second half
  template <typename P>
  void add(std::vector<P>& pieces, const P& pc, int64_t bytes) {
    if (done < half) second = pieces.size() + 1;
    pieces.push_back(pc);
    done += bytes;
  }
  // The bytes from `done` to the end of its half.
  int64_t left(int64_t total) const { return done < half ? half - done : total - done; }
  template <typename P>
  void finish(std::vector<P>& pieces) const {
    std::reverse(pieces.begin() + static_cast<std::ptrdiff_t>(second), pieces.end());
  }
};
}  // namespace

// A decode-sized matmul region (1..16 rows of x): one stealable region over all the matrices.
// packed: every matrix has vdpbf16ps panels (x rounded to bf16 in x_bf16_ already); else every
// matrix is row-major f32 / bf16 or block-quantized (1..3 rows; xq: x per activation type), read
// as four streams per piece.
void CpuBackend::decode_region(const float* x, int rows, const WMat* const* ws, float* const* ys, int n, bool packed,
                               const void* const* xq, const void* const* xa) {
  const int64_t K = ws[0]->cols;
  const int64_t xn = static_cast<int64_t>(rows) * K;
  // Each piece takes the same panels from each quarter (packed panels: 1..6 rows; a third for
  // 7..16, whose tile spans 3 panels) of a matrix, read as streams that far apart; the panels past
  // the last whole quarter (third) are a piece of their own. Pieces shrink from 1 MiB to 128 KiB
  // as the bytes left run out, so the core done first waits less for the other's last piece
  // (figures: docs/performance.md, v25 and v26).
  const int streams = decode_streams(packed, rows);
  auto panels_of = [&](int i) { return (ws[i]->rows + kPanel - 1) / kPanel; };
  auto panel_bytes = [&](int i) {
    const DType t = ws[i]->dtype;
    if (is_quant(t)) return kPanel * static_cast<int64_t>(row_bytes(t, K));
    return kPanel * K * (packed ? 2 : static_cast<int64_t>(dtype_size(t)));
  };
  // Decode regions are stealable (see ThreadPool): the work, with its own copy of x, lives in
  // the region's slot until the workers have left it.
  const int slot = pool_.acquire_slot();
  MatmulWork& mw = matmul_work_[slot];
  mw.kernels = &kernels_;
  mw.shadows = &shadows_;
  mw.rows = rows;
  mw.k = K;
  mw.streams = streams;
  mw.x_bf16.clear();
  mw.x_split.clear();
  mw.x_f32.clear();
  if (packed) {
    const uint16_t* xb = x_bf16_.as<uint16_t>();
    mw.x_bf16.assign(xb, xb + xn);
  } else {
    bool any_bf16 = false, any_f32 = false;
    for (int a = 0; a < 4; ++a) {
      mw.x_quant[a].clear();
      mw.x_act[a].clear();
    }
    for (int i = 0; i < n; ++i) {
      const DType t = ws[i]->dtype;
      if (is_quant(t)) {
        const int a = static_cast<int>(dtype_info(t).act);
        if (mw.x_quant[a].empty()) {
          const auto* src = static_cast<const unsigned char*>(xq[a]);
          mw.x_quant[a].assign(src, src + quant::act_row_bytes(dtype_info(t).act, K) * static_cast<size_t>(rows));
          if (xa && xa[a]) {
            const auto* sa = static_cast<const unsigned char*>(xa[a]);
            mw.x_act[a].assign(sa, sa + kernels_.panel_act_bytes(dtype_info(t).act, rows, K));
          }
        }
      } else {
        (t == DType::bf16 ? any_bf16 : any_f32) = true;
      }
    }
    if (any_bf16) {
      mw.x_split.resize(static_cast<size_t>(xn));
      kernels_.split_x(x, rows, K, mw.x_split.data());
    }
    if (any_f32) mw.x_f32.assign(x, x + xn);
  }
  mw.mats.clear();
  mw.pieces.clear();
  // Block-quantized and row-major regions: the caller claims pieces from the front of the list
  // and the worker from its back (ThreadPool::run_stealable's from_both_ends): the first half of
  // the region's bytes in order, then the second half in reverse, so each core walks its half in
  // order, its streams running on from one piece into the next, and the pieces shrink towards the
  // middle of the list, where the two meet. Packed bf16 regions: both cores claim from the front
  // of the list in order, walking the same streams (each measured the faster for its kernels:
  // docs/performance.md, sixteenth session).
  const bool two_runs = !packed;
  int64_t total = 0;
  for (int i = 0; i < n; ++i) total += panels_of(i) * panel_bytes(i);
  TwoRuns order{two_runs ? total / 2 : total};
  for (int i = 0; i < n; ++i) {
    mw.mats.push_back({packed ? static_cast<const uint16_t*>(ws[i]->aux) : nullptr, ws[i]->ptr,
                       is_quant(ws[i]->dtype) ? ws[i]->aux : nullptr, ws[i]->dtype, ws[i]->rows, ys[i]});
    const int64_t panels = panels_of(i);
    const int64_t q = panels / streams;  // panels per quarter (third)
    for (int64_t p = 0; p < q;) {
      const int64_t bytes = std::clamp<int64_t>(order.left(total) / (two_runs ? 4 : 8), int64_t{128} << 10, int64_t{1} << 20);
      const int64_t per_stream = std::min(q - p, std::max<int64_t>(1, bytes / (streams * panel_bytes(i))));
      order.add(mw.pieces, Piece{i, p, p + per_stream, q}, streams * per_stream * panel_bytes(i));
      p += per_stream;
    }
    if (panels % streams != 0)
      order.add(mw.pieces, Piece{i, streams * q, panels, 0}, (panels - streams * q) * panel_bytes(i));
  }
  if (two_runs) order.finish(mw.pieces);
  const int64_t taken = pool_.run_stealable(slot, mw, static_cast<int64_t>(mw.pieces.size()), kStealPatienceNs, two_runs);
  // Counted in the profile as its own group (calls = pieces the caller computed for a late
  // worker; no time of its own: that is inside the matmul op's).
  if (profiling_ && taken > 0) stats_.record("taken_over", "pool", static_cast<uint64_t>(taken), 0);
}

// Block-quantized matrices (and any plain ones in the same group): x quantized once per activation
// type the group's weight types take; then for 1..3 rows the decode region of far-apart streams,
// and for more one region of pieces of whole weight-row panels of every matrix, dealt from a shared
// counter (a slower core takes fewer). A piece is about 256 KiB of weights at 4..16 rows (down to
// 32 KiB where the two cores meet; 64 KiB at prefill), so a step's matrices are many pieces; each
// weight row is read once per step.
void CpuBackend::matmul_quantized(const float* x, int rows, const WMat* const* ws, float* const* ys, int n) {
  const int64_t K = ws[0]->cols;
  const void* xq[4] = {};
  const void* xa[4] = {};
  for (int i = 0; i < n; ++i) {
    const ActQuant a = dtype_info(ws[i]->dtype).act;
    const int ai = static_cast<int>(a);
    if (a == ActQuant::none || xq[ai]) continue;
    const size_t rb = quant::act_row_bytes(a, K);
    AlignedBuffer& buf = x_quant_[ai];
    if (buf.size() < rb * static_cast<size_t>(rows)) buf.resize(rb * static_cast<size_t>(rows), false);
    unsigned char* dst = buf.as<unsigned char>();
    xq[ai] = dst;
    // The panels' side of the activations (kernels.h), once for every piece of the product.
    const size_t ab = kernels_.panel_act_bytes(a, rows, K);
    bool panels = false;
    for (int j = 0; j < n; ++j) panels = panels || (ws[j]->aux && dtype_info(ws[j]->dtype).act == a);
    void* side = nullptr;
    if (ab > 0 && panels) {
      AlignedBuffer& sb = x_act_[ai];
      if (sb.size() < ab) sb.resize(ab, false);
      side = sb.data();
      xa[ai] = side;
    }
    // A decode batch's rows take microseconds to quantize (the panels' side in the same pass):
    // less than waking the pool for them.
    if (static_cast<int64_t>(rows) * K <= 65536) {
      kernels_.quantize_act_panels(a, x, rows, K, dst, side);
    } else {
      pool_.parallel_for(rows, [&](int64_t r0, int64_t r1) {
        kernels_.quantize_act(a, x + r0 * K, r1 - r0, K, dst + static_cast<size_t>(r0) * rb);
      });
      if (side) kernels_.panel_act(a, dst, rows, K, side);
    }
  }
  // Batches of 1..3 rows: one stealable region of far-apart weight streams, as for bf16.
  if (rows <= 3) {
    decode_region(x, rows, ws, ys, n, false, xq, xa);
    return;
  }
  const int64_t kPieceBytes = rows <= 16 ? int64_t{256} << 10 : int64_t{64} << 10;
  prefill_pieces_.clear();
  auto row_bytes_of = [&](const WMat& w) {
    return static_cast<int64_t>(is_quant(w.dtype) ? row_bytes(w.dtype, K) : K * dtype_size(w.dtype));
  };
  int64_t total = 0;
  for (int i = 0; i < n; ++i) total += ws[i]->rows * row_bytes_of(*ws[i]);
  // Decode batches (4..16 rows, whose weights stream from memory once): the first half of the
  // bytes in order, then the second half reversed, the caller claiming from the front and the
  // worker from the back, so each core walks its half in order (as decode_region).
  const bool two_runs = rows <= 16;
  TwoRuns order{two_runs ? total / 2 : total};
  for (int i = 0; i < n; ++i) {
    const WMat& w = *ws[i];
    const int64_t rb = std::max<int64_t>(1, row_bytes_of(w));
    for (int64_t r = 0; r < w.rows;) {
      // Decode batches: the pieces shrink to 32 KiB over the last MiB of each half, so the core
      // done first waits less for the other's last piece (as decode_region's; figures:
      // docs/performance.md, twenty-sixth session).
      const int64_t bytes = two_runs ? std::clamp<int64_t>(order.left(total) / 4, int64_t{32} << 10, kPieceBytes) : kPieceBytes;
      const int64_t e = std::min(w.rows, r + std::max<int64_t>(16, bytes / rb / 16 * 16));
      order.add(prefill_pieces_, Piece{i, r, e, 0}, (e - r) * rb);
      r = e;
    }
  }
  if (two_runs) order.finish(prefill_pieces_);
  pool_.parallel_dealt(static_cast<int64_t>(prefill_pieces_.size()), 1, [&](int64_t first, int64_t last) {
    for (int64_t p = first; p < last; ++p) {
      const Piece& pc = prefill_pieces_[static_cast<size_t>(p)];
      const WMat& w = *ws[pc.matrix];
      const int ai = static_cast<int>(dtype_info(w.dtype).act);
      if (is_quant(w.dtype) && w.aux)
        kernels_.matmul_quant_panels(w.dtype, xq[ai], xa[ai], rows, K, w.aux, w.rows,
                                     pc.p0 / kPanel, (pc.p1 + kPanel - 1) / kPanel, ys[pc.matrix], w.rows, 0);
      else if (is_quant(w.dtype))
        kernels_.matmul_quant(xq[ai], rows, K, w.ptr, w.dtype, pc.p0, pc.p1,
                              ys[pc.matrix], w.rows);
      else
        kernels_.matmul(x, rows, K, w.ptr, w.dtype, pc.p0, pc.p1, ys[pc.matrix], w.rows);
    }
  }, two_runs);
}

void CpuBackend::MatmulWork::compute(int64_t p, int tid, bool direct) {
  const Piece& pc = pieces[static_cast<size_t>(p)];
  const Mat& m = mats[static_cast<size_t>(pc.matrix)];
  float* y = m.y;
  if (!direct) {
    AlignedBuffer& sh = (*shadows)[static_cast<size_t>(tid)];
    const size_t need = static_cast<size_t>(rows * m.n) * sizeof(float);
    if (sh.size() < need) sh.resize(need, false);
    y = sh.as<float>();
  }
  if (m.packed)
    kernels->matmul_packed(x_bf16.data(), rows, k, m.packed, m.n, pc.p0, pc.p1, y, m.n, pc.slice);
  else if (m.quant_panels) {
    const int a = static_cast<int>(dtype_info(m.wt).act);
    kernels->matmul_quant_panels(m.wt, x_quant[a].data(), x_act[a].data(), rows, k, m.quant_panels, m.n, pc.p0, pc.p1, y,
                                 m.n, pc.slice);
  }
  else if (is_quant(m.wt))
    kernels->matmul_quant_streams(x_quant[static_cast<int>(dtype_info(m.wt).act)].data(), rows, k, m.w, m.wt, m.n, pc.p0,
                                  pc.p1, y, m.n, pc.slice);
  else
    kernels->matmul_streams(m.wt == DType::bf16 ? x_split.data() : x_f32.data(), rows, k, m.w, m.wt, m.n, pc.p0, pc.p1,
                            y, m.n, pc.slice);
}
void CpuBackend::MatmulWork::commit(int64_t p, int tid) {
  const Piece& pc = pieces[static_cast<size_t>(p)];
  const Mat& m = mats[static_cast<size_t>(pc.matrix)];
  const float* src = (*shadows)[static_cast<size_t>(tid)].as<float>();
  const int n_streams = pc.slice > 0 ? streams : 1;
  for (int j = 0; j < n_streams; ++j) {
    const int64_t n0 = (pc.p0 + j * pc.slice) * kPanel;
    const int64_t n1 = std::min(m.n, (pc.p1 + j * pc.slice) * kPanel);
    for (int r = 0; r < rows; ++r)
      std::memcpy(m.y + r * m.n + n0, src + r * m.n + n0, static_cast<size_t>(n1 - n0) * sizeof(float));
  }
}

}  // namespace lumen::cpu
