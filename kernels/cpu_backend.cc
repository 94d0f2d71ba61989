#include "kernels/cpu_backend.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <new>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/activation_functors.h"
#include "kernels/blas.h"
#include "kernels/layer_functors.h"

namespace shardps {

void Im2Col(const ConvGeometry& g, const float* x, float* col) {
  const int oh = g.out_height(), ow = g.out_width();
  const int plane = g.in_height * g.in_width;
  for (int c = 0; c < g.in_channels; ++c) {
    const float* xc = x + static_cast<size_t>(c) * plane;
    for (int kh = 0; kh < g.kernel_h; ++kh) {
      for (int kw = 0; kw < g.kernel_w; ++kw) {
        float* row =
            col + static_cast<size_t>((c * g.kernel_h + kh) * g.kernel_w + kw) *
                      oh * ow;
        for (int y = 0; y < oh; ++y) {
          const int iy = y * g.stride - g.padding + kh;
          float* out = row + static_cast<size_t>(y) * ow;
          if (iy < 0 || iy >= g.in_height) {
            std::fill(out, out + ow, 0.0f);
            continue;
          }
          const float* in = xc + static_cast<size_t>(iy) * g.in_width;
          for (int xo = 0; xo < ow; ++xo) {
            const int ix = xo * g.stride - g.padding + kw;
            out[xo] = ix >= 0 && ix < g.in_width ? in[ix] : 0.0f;
          }
        }
      }
    }
  }
}

void Col2ImAdd(const ConvGeometry& g, const float* col, float* dx) {
  const int oh = g.out_height(), ow = g.out_width();
  const int plane = g.in_height * g.in_width;
  for (int c = 0; c < g.in_channels; ++c) {
    float* dc = dx + static_cast<size_t>(c) * plane;
    for (int kh = 0; kh < g.kernel_h; ++kh) {
      for (int kw = 0; kw < g.kernel_w; ++kw) {
        const float* row =
            col + static_cast<size_t>((c * g.kernel_h + kh) * g.kernel_w + kw) *
                      oh * ow;
        for (int y = 0; y < oh; ++y) {
          const int iy = y * g.stride - g.padding + kh;
          if (iy < 0 || iy >= g.in_height) continue;
          float* out = dc + static_cast<size_t>(iy) * g.in_width;
          const float* in = row + static_cast<size_t>(y) * ow;
          for (int xo = 0; xo < ow; ++xo) {
            const int ix = xo * g.stride - g.padding + kw;
            if (ix >= 0 && ix < g.in_width) out[ix] += in[xo];
          }
        }
      }
    }
  }
}

CpuBackend::CpuBackend(int num_threads)
    : num_threads_(num_threads > 0 ? num_threads : 1),
      cols_(num_threads_),
      partial_dw_(num_threads_) {
  for (int t = 1; t < num_threads_; ++t) {
    workers_.emplace_back([this, t] { WorkerLoop(t); });
  }
}

CpuBackend::~CpuBackend() {
  {
    absl::MutexLock l(&pool_mu_);
    stop_ = true;
  }
  for (std::thread& w : workers_) w.join();
}

void CpuBackend::WorkerLoop(int t) {
  uint64_t seen = 0;
  while (true) {
    const std::function<void(int, int, int)>* fn;
    int begin, end;
    {
      absl::MutexLock l(&pool_mu_);
      std::pair<CpuBackend*, uint64_t> arg(this, seen);
      pool_mu_.Await(absl::Condition(
          +[](std::pair<CpuBackend*, uint64_t>* a) {
            a->first->pool_mu_.AssertHeld();
            return a->first->stop_ || a->first->job_id_ != a->second;
          },
          &arg));
      if (stop_) return;
      seen = job_id_;
      fn = job_fn_;
      begin = std::min(job_n_, t * job_per_);
      end = std::min(job_n_, (t + 1) * job_per_);
    }
    if (begin < end) (*fn)(t, begin, end);
    absl::MutexLock l(&pool_mu_);
    --job_pending_;
  }
}

int CpuBackend::ParallelFor(int n,
                            const std::function<void(int, int, int)>& fn) {
  const int threads = std::max(1, std::min(num_threads_, n));
  if (threads == 1) {
    fn(0, 0, n);
    return 1;
  }
  const int per = (n + threads - 1) / threads;
  {
    absl::MutexLock l(&pool_mu_);
    job_fn_ = &fn;
    job_n_ = n;
    job_per_ = per;
    job_pending_ = static_cast<int>(workers_.size());
    ++job_id_;
  }
  fn(0, 0, std::min(n, per));
  absl::MutexLock l(&pool_mu_);
  pool_mu_.Await(absl::Condition(
      +[](int* pending) { return *pending == 0; }, &job_pending_));
  return threads;
}

absl::StatusOr<float*> CpuBackend::Allocate(size_t n) {
  float* p = new (std::nothrow) float[n > 0 ? n : 1]();
  if (p == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("CPU backend: cannot allocate ", n, " floats (",
                     n * sizeof(float), " bytes)"));
  }
  return p;
}

void CpuBackend::Free(float* p) { delete[] p; }

absl::Status CpuBackend::Upload(const float* host, size_t n, float* dst) {
  if (n > 0 && host != dst) std::memmove(dst, host, n * sizeof(float));
  return absl::OkStatus();
}

absl::Status CpuBackend::Download(const float* src, size_t n, float* host) {
  return Upload(src, n, host);
}

absl::Status CpuBackend::Copy(const float* src, size_t n, float* dst) {
  return Upload(src, n, dst);
}

absl::Status CpuBackend::Gemm(bool trans_a, bool trans_b, int m, int n, int k,
                              float alpha, const float* a, int lda,
                              const float* b, int ldb, float beta, float* c,
                              int ldc) {
  shardps::Gemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  return absl::OkStatus();
}

absl::Status CpuBackend::BiasForward(const float* b, int outer, int channels,
                                     int inner, const float* x, float* y) {
  for (int o = 0; o < outer; ++o) {
    for (int c = 0; c < channels; ++c) {
      const size_t base = (static_cast<size_t>(o) * channels + c) * inner;
      const float bc = b[c];
      for (int i = 0; i < inner; ++i) y[base + i] = x[base + i] + bc;
    }
  }
  return absl::OkStatus();
}

absl::Status CpuBackend::BiasBackward(const float* dy, int outer, int channels,
                                      int inner, float* db) {
  std::fill(db, db + channels, 0.0f);
  for (int o = 0; o < outer; ++o) {
    for (int c = 0; c < channels; ++c) {
      const float* row = dy + (static_cast<size_t>(o) * channels + c) * inner;
      float s = 0.0f;
      for (int i = 0; i < inner; ++i) s += row[i];
      db[c] += s;
    }
  }
  return absl::OkStatus();
}

absl::Status CpuBackend::ActivationForward(Activation f, const float* x,
                                           size_t n, float* y) {
  switch (f) {
    case Activation::kRelu:
      for (size_t i = 0; i < n; ++i) y[i] = ReluForward(x[i]);
      break;
    case Activation::kSigmoid:
      for (size_t i = 0; i < n; ++i) y[i] = SigmoidForward(x[i]);
      break;
    case Activation::kTanh:
      for (size_t i = 0; i < n; ++i) y[i] = TanhForward(x[i]);
      break;
  }
  return absl::OkStatus();
}

absl::Status CpuBackend::ActivationBackward(Activation f, const float* x,
                                            const float* y, const float* dy,
                                            size_t n, float* dx) {
  switch (f) {
    case Activation::kRelu:
      for (size_t i = 0; i < n; ++i) dx[i] = ReluBackward(y[i], dy[i]);
      break;
    case Activation::kSigmoid:
      for (size_t i = 0; i < n; ++i) dx[i] = SigmoidBackward(y[i], dy[i]);
      break;
    case Activation::kTanh:
      for (size_t i = 0; i < n; ++i) dx[i] = TanhBackward(y[i], dy[i]);
      break;
  }
  return absl::OkStatus();
}

absl::Status CpuBackend::Conv2dForward(const ConvGeometry& g, const float* x,
                                       const float* w, const float* b,
                                       float* y) {
  const int ckk = g.in_channels * g.kernel_h * g.kernel_w;
  const int ohw = g.out_height() * g.out_width();
  const size_t in_size =
      static_cast<size_t>(g.in_channels) * g.in_height * g.in_width;
  const size_t out_size = static_cast<size_t>(g.out_channels) * ohw;
  ParallelFor(g.batch, [&](int t, int begin, int end) {
    std::vector<float>& col = cols_[t];
    col.resize(static_cast<size_t>(ckk) * ohw);
    for (int n = begin; n < end; ++n) {
      Im2Col(g, x + n * in_size, col.data());
      float* yn = y + n * out_size;
      // y_n (out_c x ohw) = W (out_c x ckk) * col (ckk x ohw).
      shardps::Gemm(false, false, g.out_channels, ohw, ckk, 1.0f, w, ckk,
                    col.data(), ohw, 0.0f, yn, ohw);
    }
  });
  return BiasForward(b, g.batch, g.out_channels, ohw, y, y);
}

absl::Status CpuBackend::Conv2dBackward(const ConvGeometry& g, const float* x,
                                        const float* w, const float* dy,
                                        float* dw, float* db, float* dx) {
  const int ckk = g.in_channels * g.kernel_h * g.kernel_w;
  const int ohw = g.out_height() * g.out_width();
  const size_t in_size =
      static_cast<size_t>(g.in_channels) * g.in_height * g.in_width;
  const size_t out_size = static_cast<size_t>(g.out_channels) * ohw;
  const size_t w_size = static_cast<size_t>(g.out_channels) * ckk;
  const int used = ParallelFor(g.batch, [&](int t, int begin, int end) {
    std::vector<float>& col = cols_[t];
    col.resize(static_cast<size_t>(ckk) * ohw);
    // Thread 0 accumulates into dw itself, the others into their partials.
    float* dwt = dw;
    if (t > 0) {
      partial_dw_[t].resize(w_size);
      dwt = partial_dw_[t].data();
    }
    std::fill(dwt, dwt + w_size, 0.0f);
    for (int n = begin; n < end; ++n) {
      const float* dyn = dy + n * out_size;
      Im2Col(g, x + n * in_size, col.data());
      // dW (out_c x ckk) += dy_n (out_c x ohw) * col^T (ohw x ckk).
      shardps::Gemm(false, true, g.out_channels, ckk, ohw, 1.0f, dyn, ohw,
                    col.data(), ohw, 1.0f, dwt, ckk);
      if (dx != nullptr) {
        // dcol (ckk x ohw) = W^T (ckk x out_c) * dy_n (out_c x ohw).
        shardps::Gemm(true, false, ckk, ohw, g.out_channels, 1.0f, w, ckk, dyn,
                      ohw, 0.0f, col.data(), ohw);
        float* dxn = dx + n * in_size;
        std::fill(dxn, dxn + in_size, 0.0f);
        Col2ImAdd(g, col.data(), dxn);
      }
    }
  });
  if (g.batch <= 0) std::fill(dw, dw + w_size, 0.0f);
  for (int t = 1; t < used; ++t) {
    const float* p = partial_dw_[t].data();
    for (size_t i = 0; i < w_size; ++i) dw[i] += p[i];
  }
  return BiasBackward(dy, g.batch, g.out_channels, ohw, db);
}

absl::Status CpuBackend::Pool2dForward(const PoolGeometry& g, const float* x,
                                       float* y) {
  const int oh = g.out_height(), ow = g.out_width();
  const float scale = AveragePoolScale(g.window);
  const int planes = g.batch * g.channels;
  ParallelFor(planes, [&](int, int begin, int end) {
    for (int p = begin; p < end; ++p) {
      const float* xp = x + static_cast<size_t>(p) * g.in_height * g.in_width;
      float* yp = y + static_cast<size_t>(p) * oh * ow;
      for (int oy = 0; oy < oh; ++oy) {
        for (int ox = 0; ox < ow; ++ox) {
          const int y0 = oy * g.stride - g.padding;
          const int x0 = ox * g.stride - g.padding;
          float best = -INFINITY, sum = 0.0f;
          for (int wy = 0; wy < g.window; ++wy) {
            const int iy = y0 + wy;
            if (iy < 0 || iy >= g.in_height) continue;
            for (int wx = 0; wx < g.window; ++wx) {
              const int ix = x0 + wx;
              if (ix < 0 || ix >= g.in_width) continue;
              const float v = xp[iy * g.in_width + ix];
              best = v > best ? v : best;
              sum += v;
            }
          }
          yp[oy * ow + ox] = g.mode == PoolMode::kMax ? best : sum * scale;
        }
      }
    }
  });
  return absl::OkStatus();
}

absl::Status CpuBackend::Pool2dBackward(const PoolGeometry& g, const float* x,
                                        const float* y, const float* dy,
                                        float* dx) {
  const int oh = g.out_height(), ow = g.out_width();
  const float scale = AveragePoolScale(g.window);
  const int planes = g.batch * g.channels;
  const size_t in_plane = static_cast<size_t>(g.in_height) * g.in_width;
  ParallelFor(planes, [&](int, int begin, int end) {
    for (int p = begin; p < end; ++p) {
      const float* xp = x + static_cast<size_t>(p) * in_plane;
      float* dxp = dx + static_cast<size_t>(p) * in_plane;
      std::fill(dxp, dxp + in_plane, 0.0f);
      const float* yp = y + static_cast<size_t>(p) * oh * ow;
      const float* dyp = dy + static_cast<size_t>(p) * oh * ow;
      for (int oy = 0; oy < oh; ++oy) {
        for (int ox = 0; ox < ow; ++ox) {
          const int y0 = oy * g.stride - g.padding;
          const int x0 = ox * g.stride - g.padding;
          const float d = dyp[oy * ow + ox];
          bool routed = false;
          for (int wy = 0; wy < g.window && !routed; ++wy) {
            const int iy = y0 + wy;
            if (iy < 0 || iy >= g.in_height) continue;
            for (int wx = 0; wx < g.window && !routed; ++wx) {
              const int ix = x0 + wx;
              if (ix < 0 || ix >= g.in_width) continue;
              const int i = iy * g.in_width + ix;
              if (g.mode == PoolMode::kAverage) {
                dxp[i] += d * scale;
              } else if (xp[i] == yp[oy * ow + ox]) {
                dxp[i] += d;
                routed = true;
              }
            }
          }
        }
      }
    }
  });
  return absl::OkStatus();
}

absl::Status CpuBackend::DropoutForward(float rate, uint64_t seed,
                                        const float* x, size_t n, float* mask,
                                        float* y) {
  for (size_t i = 0; i < n; ++i) {
    mask[i] = DropoutMask(seed, i, rate);
    y[i] = x[i] * mask[i];
  }
  return absl::OkStatus();
}

absl::Status CpuBackend::DropoutBackward(const float* mask, const float* dy,
                                         size_t n, float* dx) {
  for (size_t i = 0; i < n; ++i) dx[i] = dy[i] * mask[i];
  return absl::OkStatus();
}

absl::Status CpuBackend::SoftmaxCrossEntropy(
    const float* logits, const int32_t* labels, int batch, int classes,
    float grad_scale, float* dlogits, float* probabilities, LossSums* sums) {
  const int c = classes;
  for (int i = 0; i < batch; ++i) {
    const float* z = logits + static_cast<size_t>(i) * c;
    int argmax = 0;
    for (int j = 1; j < c; ++j) {
      if (z[j] > z[argmax]) argmax = j;
    }
    const float max = z[argmax];
    double sum = 0.0;
    for (int j = 0; j < c; ++j) {
      sum += std::exp(static_cast<double>(z[j] - max));
    }
    const double log_sum = std::log(sum);
    if (probabilities != nullptr) {
      float* p = probabilities + static_cast<size_t>(i) * c;
      for (int j = 0; j < c; ++j) {
        p[j] = static_cast<float>(std::exp(z[j] - max - log_sum));
      }
    }
    const int32_t label = labels[i];
    const bool valid = label >= 0 && label < c;
    if (valid) {
      // -log softmax(z)[label] = log(sum exp(z - max)) - (z[label] - max).
      sums->loss_sum += log_sum - static_cast<double>(z[label] - max);
      if (argmax == label) ++sums->correct;
    }
    if (dlogits != nullptr) {
      float* dz = dlogits + static_cast<size_t>(i) * c;
      for (int j = 0; j < c; ++j) {
        const float p = static_cast<float>(std::exp(z[j] - max - log_sum));
        dz[j] = valid ? SoftmaxXentGrad(p, j == label, grad_scale) : 0.0f;
      }
    }
  }
  return absl::OkStatus();
}

absl::Status CpuBackend::LogisticLoss(const float* logits,
                                      const int32_t* labels, int batch,
                                      float grad_scale, float* dlogits,
                                      float* probabilities, LossSums* sums) {
  for (int i = 0; i < batch; ++i) {
    const float z = logits[i];
    const float p = SigmoidForward(z);
    if (probabilities != nullptr) probabilities[i] = p;
    const int32_t label = labels[i];
    if (label != 0 && label != 1) {
      if (dlogits != nullptr) dlogits[i] = 0.0f;
      continue;
    }
    const float t = static_cast<float>(label);
    sums->loss_sum += shardps::LogisticLoss(z, t);
    if ((p >= 0.5f ? 1 : 0) == label) ++sums->correct;
    if (dlogits != nullptr) dlogits[i] = (p - t) * grad_scale;
  }
  return absl::OkStatus();
}

}  // namespace shardps
