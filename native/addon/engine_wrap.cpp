// JS binding of the engine: a worker thread runs the engine loop; events reach JS through one
// thread-safe function, coalesced so a burst of tokens costs one hop to the JS thread.
#include "addon/engine_wrap.h"

#include <atomic>
#include <cfloat>
#include <cmath>
#include <memory>
#include <sstream>
#include <stdexcept>

#include "core/clock.h"
#include "engine/engine.h"

namespace lumen {
namespace {

bool get_bool(const Napi::Object& o, const char* key, bool def) {
  if (!o.Has(key) || o.Get(key).IsUndefined() || o.Get(key).IsNull()) return def;
  return o.Get(key).ToBoolean().Value();
}
std::string preview(const Napi::Value& v) {
  std::string t = v.IsString() ? "'" + v.As<Napi::String>().Utf8Value() + "'" : v.ToString().Utf8Value();
  return t.size() > 40 ? t.substr(0, 37) + "..." : t;
}
// A field that must be a finite number in [lo, hi] when given (`integer`: a whole one too); the
// error names it (`request.maxTokens must be ...`), where a plain cast would wrap or truncate.
double get_checked(const Napi::Object& o, const char* key, double def, double lo, double hi, bool integer,
                   const char* where) {
  if (!o.Has(key) || o.Get(key).IsUndefined() || o.Get(key).IsNull()) return def;
  const Napi::Value v = o.Get(key);
  const double d = v.IsNumber() ? v.As<Napi::Number>().DoubleValue() : std::nan("");
  if (!(d >= lo && d <= hi) || (integer && d != std::floor(d))) {
    auto num = [](double x) {
      std::ostringstream os;
      os.precision(17);
      os << x;
      return os.str();
    };
    throw std::invalid_argument(std::string(where) + "." + key + " must be " + (integer ? "an integer" : "a number") +
                                " in [" + num(lo) + ", " + num(hi) + "] (got " + preview(v) + ")");
  }
  return d;
}
int32_t get_count(const Napi::Object& o, const char* key, int32_t def, int32_t lo, const char* where) {
  return static_cast<int32_t>(get_checked(o, key, def, lo, INT32_MAX, true, where));
}
std::string get_str(const Napi::Object& o, const char* key, const std::string& def) {
  if (!o.Has(key) || o.Get(key).IsUndefined() || o.Get(key).IsNull()) return def;
  return o.Get(key).ToString().Utf8Value();
}
int32_t req_int(const Napi::Object& o, const char* key, const char* where = "config", int32_t lo = 1) {
  if (!o.Has(key) || !o.Get(key).IsNumber()) throw std::invalid_argument(std::string(where) + "." + key + " is missing");
  return static_cast<int32_t>(get_checked(o, key, 0, lo, INT32_MAX, true, where));
}
double req_num(const Napi::Object& o, const char* key) {
  if (!o.Has(key) || !o.Get(key).IsNumber()) throw std::invalid_argument(std::string("config.") + key + " is missing");
  return o.Get(key).As<Napi::Number>().DoubleValue();
}
std::string req_str(const Napi::Object& o, const char* key, const char* where) {
  if (!o.Has(key) || !o.Get(key).IsString()) throw std::invalid_argument(std::string(where) + "." + key + " is missing");
  return o.Get(key).As<Napi::String>().Utf8Value();
}

// A JS array of f(x) for each x of v.
template <typename T, typename F>
Napi::Array to_js_array(Napi::Env env, const std::vector<T>& v, F&& f) {
  auto a = Napi::Array::New(env, v.size());
  for (size_t k = 0; k < v.size(); ++k) a.Set(static_cast<uint32_t>(k), f(v[k]));
  return a;
}

DType parse_dtype(const std::string& s, const std::string& tensor) {
  DType t;
  if (dtype_from_name(s.c_str(), t)) return t;
  throw std::invalid_argument("tensor " + tensor + ": unsupported type " + s);
}

std::vector<int32_t> to_ids(const Napi::Value& v, const char* what) {
  std::vector<int32_t> r;
  if (v.IsTypedArray()) {
    auto ta = v.As<Napi::TypedArray>();
    if (ta.TypedArrayType() == napi_int32_array) {
      auto a = v.As<Napi::Int32Array>();
      r.assign(a.Data(), a.Data() + a.ElementLength());
      return r;
    }
  }
  if (!v.IsArray()) throw std::invalid_argument(std::string(what) + " must be an array of token ids");
  auto a = v.As<Napi::Array>();
  r.reserve(a.Length());
  for (uint32_t i = 0; i < a.Length(); ++i) {
    const Napi::Value e = a.Get(i);
    const double d = e.IsNumber() ? e.As<Napi::Number>().DoubleValue() : -1;
    if (!(d >= 0 && d <= INT32_MAX) || d != std::floor(d))
      throw std::invalid_argument(std::string(what) + "[" + std::to_string(i) + "] is not a token id (got " + preview(e) + ")");
    r.push_back(static_cast<int32_t>(d));
  }
  return r;
}

ModelConfig parse_config(const Napi::Object& c) {
  ModelConfig m;
  m.hidden = req_int(c, "hiddenSize");
  m.n_layers = req_int(c, "numLayers");
  m.intermediate = req_int(c, "intermediateSize");
  m.n_heads = req_int(c, "numHeads");
  m.n_kv_heads = req_int(c, "numKvHeads");
  m.head_dim = req_int(c, "headDim");
  m.lin_k_heads = req_int(c, "linearNumKeyHeads");
  m.lin_v_heads = req_int(c, "linearNumValueHeads");
  m.lin_dk = req_int(c, "linearKeyHeadDim");
  m.lin_dv = req_int(c, "linearValueHeadDim");
  m.conv_kernel = req_int(c, "linearConvKernelDim");
  m.vocab = req_int(c, "vocabSize");
  m.eps = static_cast<float>(req_num(c, "rmsNormEps"));
  m.rope_theta = static_cast<float>(req_num(c, "ropeTheta"));
  m.partial_rotary = static_cast<float>(req_num(c, "partialRotaryFactor"));
  if (!c.Has("tieWordEmbeddings") || !c.Get("tieWordEmbeddings").IsBoolean())
    throw std::invalid_argument("config.tieWordEmbeddings is missing");
  m.tied = c.Get("tieWordEmbeddings").As<Napi::Boolean>().Value();
  m.v_heads_tiled = c.Has("linearValueHeadsTiled") && c.Get("linearValueHeadsTiled").IsBoolean() &&
                    c.Get("linearValueHeadsTiled").As<Napi::Boolean>().Value();
  auto lt = c.Get("layerTypes").As<Napi::Array>();
  if (!c.Get("layerTypes").IsArray() || lt.Length() != static_cast<uint32_t>(m.n_layers))
    throw std::invalid_argument("config.layerTypes must list every layer");
  for (uint32_t i = 0; i < lt.Length(); ++i) m.is_full.push_back(lt.Get(i).ToString().Utf8Value() == "full_attention");
  if (m.n_heads % std::max(1, m.n_kv_heads) != 0 || m.lin_v_heads % std::max(1, m.lin_k_heads) != 0)
    throw std::invalid_argument("config: head counts must divide evenly");
  if (m.conv_kernel < 1 || m.conv_kernel > kMaxConvKernel)
    throw std::invalid_argument("config: conv kernel must be 1.." + std::to_string(kMaxConvKernel));
  if (m.lin_dk < 1 || m.lin_dk > kMaxLinearHeadDim || m.lin_dv < 1 || m.lin_dv > kMaxLinearHeadDim)
    throw std::invalid_argument("config: linear key/value head dims must be 1.." + std::to_string(kMaxLinearHeadDim));
  if (m.rot_dim() > m.head_dim || m.rot_dim() % 2) throw std::invalid_argument("config: bad partial rotary factor");
  return m;
}

class EngineWrap : public Napi::ObjectWrap<EngineWrap> {
 public:
  static Napi::Function Define(Napi::Env env) {
    return DefineClass(env, "Engine",
                       {InstanceMethod("submit", &EngineWrap::Submit), InstanceMethod("cancel", &EngineWrap::Cancel),
                        InstanceMethod("flush", &EngineWrap::Flush), InstanceMethod("allowSteps", &EngineWrap::AllowSteps),
                        InstanceMethod("stats", &EngineWrap::Stats), InstanceMethod("resetCounters", &EngineWrap::Reset),
                        InstanceMethod("info", &EngineWrap::Info), InstanceMethod("nowMs", &EngineWrap::NowMs),
                        InstanceMethod("takeProfile", &EngineWrap::TakeProfile),
                        InstanceMethod("close", &EngineWrap::Close)});
  }

  EngineWrap(const Napi::CallbackInfo& info) : Napi::ObjectWrap<EngineWrap>(info) {
    Napi::Env env = info.Env();
    try {
      if (info.Length() < 3 || !info[0].IsObject() || !info[1].IsObject() || !info[2].IsFunction())
        throw std::invalid_argument("Engine(spec, options, onEvents)");
      auto spec = info[0].As<Napi::Object>();
      auto opt = info[1].As<Napi::Object>();
      ModelConfig cfg = parse_config(spec.Get("config").As<Napi::Object>());
      std::vector<TensorEntry> tensors;
      if (spec.Has("tensors") && spec.Get("tensors").IsArray()) {
        auto arr = spec.Get("tensors").As<Napi::Array>();
        for (uint32_t i = 0; i < arr.Length(); ++i) {
          auto t = arr.Get(i).As<Napi::Object>();
          TensorEntry e;
          e.name = get_str(t, "storedName", get_str(t, "name", ""));  // the file's own name, for errors
          e.role = get_str(t, "role", "");
          e.layer = static_cast<int>(get_checked(t, "layer", -1, -1, INT32_MAX, true, "tensor"));
          const std::string fold = get_str(t, "fold", "");
          e.fold = fold == "plus_one" ? Fold::plus_one : fold == "neg_exp" ? Fold::neg_exp : Fold::none;
          if (!fold.empty() && e.fold == Fold::none) throw std::invalid_argument("tensor " + e.name + ": unknown fold " + fold);
          e.file = get_str(t, "file", "");
          e.offset = static_cast<uint64_t>(get_checked(t, "offset", 0, 0, 9007199254740991.0, true, "tensor"));
          e.nbytes = static_cast<uint64_t>(get_checked(t, "nbytes", 0, 0, 9007199254740991.0, true, "tensor"));
          e.dtype = parse_dtype(get_str(t, "dtype", ""), e.name);
          auto sh = t.Get("shape").As<Napi::Array>();
          for (uint32_t j = 0; j < sh.Length(); ++j) e.shape.push_back(sh.Get(j).As<Napi::Number>().Int64Value());
          tensors.push_back(std::move(e));
        }
      }
      // The serving options come from the CLI, which owns their defaults (src/bench/options.ts):
      // every one must be given. The internal knobs default to EngineConfig's values.
      EngineConfig ec;
      ec.device = req_str(opt, "device", "options");
      ec.threads = req_int(opt, "threads", "options", 0);
      ec.block_size = req_int(opt, "blockSize", "options");
      ec.paged = req_str(opt, "kvcache", "options") != "continuous";
      ec.kv_memory_bytes = static_cast<int64_t>(get_checked(opt, "kvMemoryBytes", 0, 0, 9007199254740991.0, true, "options"));
      ec.kv_memory_fraction = get_checked(opt, "kvMemoryFraction", 0, 0, 1, false, "options");
      ec.max_seq = req_int(opt, "maxSeq", "options");
      ec.max_seqs = req_int(opt, "maxSeqs", "options");
      ec.prefill_chunk = req_int(opt, "prefillChunk", "options");
      ec.step_token_budget = req_int(opt, "stepTokenBudget", "options");
      const std::string kvd = req_str(opt, "kvCacheDtype", "options");
      if (kvd != "f32" && kvd != "f16")
        throw std::invalid_argument("options.kvCacheDtype: '" + kvd + "' is not f32 or f16");
      ec.kv_dtype = kvd == "f16" ? DType::f16 : DType::f32;
      ec.prefix_cache = get_bool(opt, "prefixCache", ec.prefix_cache);
      ec.snapshot_interval = get_count(opt, "snapshotInterval", ec.snapshot_interval, 1, "options");
      ec.max_snapshots = get_count(opt, "maxSnapshots", ec.max_snapshots, 0, "options");
      ec.gdn_chunk_min = get_count(opt, "gdnChunkMin", ec.gdn_chunk_min, 1, "options");
      ec.profile = get_bool(opt, "profile", ec.profile);
      ec.cuda_graphs = get_bool(opt, "cudaGraphs", ec.cuda_graphs);
      ec.manual_steps = get_bool(opt, "manualSteps", ec.manual_steps);
      const std::string wp = get_str(opt, "weightDtype", "auto");
      ec.weights = wp == "f32" ? WeightPolicy::f32 : wp == "bf16" ? WeightPolicy::bf16 : WeightPolicy::keep;
      ec.synthetic_dtype = get_str(opt, "syntheticDtype", "bf16") == "f32" ? DType::f32 : DType::bf16;
      ec.synthetic_seed = static_cast<uint64_t>(
          get_checked(opt, "syntheticSeed", static_cast<double>(ec.synthetic_seed), 0, 9007199254740991.0, true, "options"));

      tsfn_ = Napi::ThreadSafeFunction::New(env, info[2].As<Napi::Function>(), "lumen-engine-events", 0, 1);
      box_->owner = this;
      engine_ = std::make_unique<Engine>(std::move(cfg), std::move(tensors), ec, [this, box = box_]() {
        if (box->pending.exchange(true)) return;  // a drain is already queued
        // A queued drain can run after this object is gone (collected with drains still queued):
        // it reaches the object only through the box, which the destructor empties.
        tsfn_.NonBlockingCall([box](Napi::Env env, Napi::Function cb) {
          if (box->owner) box->owner->Deliver(env, cb);
        });
      });
    } catch (const std::exception& e) {
      // A constructor that threw (a bad option) leaves no engine: the events function made for it
      // would keep Node's event loop alive for ever.
      if (!engine_ && tsfn_) tsfn_.Release();
      Napi::Error::New(env, e.what()).ThrowAsJavaScriptException();
    }
  }

  ~EngineWrap() override {
    box_->owner = nullptr;
    Shutdown();
  }

 private:
  // What a queued drain reaches this object through. `owner` is read and written on the JS thread
  // only (drains run there, and so does the destructor); `pending` also by the engine's thread.
  struct Mailbox {
    std::atomic<bool> pending{false};
    EngineWrap* owner = nullptr;
  };

  void Shutdown() {
    if (engine_) {
      engine_.reset();  // joins the worker thread
      tsfn_.Release();
    }
  }

  void Deliver(Napi::Env env, Napi::Function cb) {
    box_->pending.store(false);
    if (!engine_) return;
    Napi::Array arr;
    try {
      arr = EventsToJs(env, engine_->drain());
    } catch (const Napi::Error&) {
      throw;  // a JS exception already (node-addon-api hands it to the event loop)
    } catch (const std::exception& e) {
      // Not one to let through the thread-safe function's call (it would end the process).
      throw Napi::Error::New(env, std::string("engine events: ") + e.what());
    }
    if (arr.Length() > 0) cb.Call({arr});
  }

  Napi::Array EventsToJs(Napi::Env env, std::vector<EngineEvent> events) {
    auto arr = Napi::Array::New(env, events.size());
    uint32_t i = 0;
    for (auto& e : events) {
      auto o = Napi::Object::New(env);
      switch (e.kind) {
        case EngineEvent::kToken:
          o.Set("type", "token");
          o.Set("id", static_cast<double>(e.id));
          o.Set("token", e.token);
          o.Set("index", e.index);
          o.Set("tMs", ns_to_ms(e.t_ns));
          if (e.has_logprobs) {
            o.Set("logprob", e.logprob);
            auto ids = Napi::Array::New(env, e.top_ids.size());
            auto lps = Napi::Array::New(env, e.top_logprobs.size());
            for (size_t k = 0; k < e.top_ids.size(); ++k) {
              ids.Set(k, e.top_ids[k]);
              lps.Set(k, e.top_logprobs[k]);
            }
            o.Set("topIds", ids);
            o.Set("topLogprobs", lps);
          }
          break;
        case EngineEvent::kStep:
          o.Set("type", "step");
          o.Set("count", e.step_tokens);
          o.Set("tMs", ns_to_ms(e.t_ns));
          break;
        case EngineEvent::kDone: {
          o.Set("type", "done");
          o.Set("id", static_cast<double>(e.id));
          o.Set("finish", e.finish);
          if (!e.error.empty()) o.Set("error", e.error);
          if (!e.error_code.empty()) o.Set("errorCode", e.error_code);
          const auto same = [](auto v) { return v; };
          const auto ms = [](int64_t ns) { return ns_to_ms(ns); };
          o.Set("tokens", to_js_array(env, e.tokens, same));
          o.Set("tokenMs", to_js_array(env, e.token_ns, ms));
          o.Set("enqueueMs", ns_to_ms(e.enqueue_ns));
          o.Set("doneMs", ns_to_ms(e.t_ns));
          o.Set("promptTokens", e.prompt_tokens);
          o.Set("cachedPromptTokens", e.cached_prompt_tokens);
          o.Set("prefillChunkMs", to_js_array(env, e.prefill_chunk_ms, same));
          if (e.prefill_chunks_to_first >= 0) o.Set("prefillChunksToFirst", e.prefill_chunks_to_first);
          o.Set("preemptedAfter", to_js_array(env, e.preempted_after, same));
          o.Set("readmitMs", to_js_array(env, e.readmit_ns, ms));
          if (e.logit_rows > 0) {
            auto buf = Napi::Float32Array::New(env, e.logits.size());
            std::copy(e.logits.begin(), e.logits.end(), buf.Data());
            o.Set("logits", buf);
            o.Set("logitRows", e.logit_rows);
          }
          break;
        }
        case EngineEvent::kLoadProgress:
          o.Set("type", "load");
          o.Set("done", e.done);
          o.Set("total", e.total);
          break;
        case EngineEvent::kLoaded:
          o.Set("type", "loaded");
          break;
        case EngineEvent::kLoadError:
          o.Set("type", "loadError");
          o.Set("error", e.error);
          if (!e.error_code.empty()) o.Set("code", e.error_code);
          break;
      }
      arr.Set(i++, o);
    }
    return arr;
  }

  Engine& eng(const Napi::Env& env) {
    if (!engine_) throw std::runtime_error("the engine is closed");
    return *engine_;
  }

  Napi::Value Submit(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    try {
      RequestSpec spec;
      if (info.Length() < 1 || !info[0].IsObject()) throw std::invalid_argument("submit(request): request must be an object");
      auto r = info[0].As<Napi::Object>();
      const char* req = "request";
      spec.prompt = to_ids(r.Get("prompt"), "request.prompt");
      spec.max_tokens = get_count(r, "maxTokens", 0, 0, req);
      // The ranges that depend on nothing else are checked here, where the type is known; the
      // engine checks the rest (Engine::submit).
      spec.sampling.temperature = static_cast<float>(get_checked(r, "temperature", 0, 0, FLT_MAX, false, req));
      spec.sampling.top_k = get_count(r, "topK", 0, 0, req);
      spec.sampling.top_p = static_cast<float>(get_checked(r, "topP", 1, 0, 1, false, req));
      spec.sampling.seed = static_cast<uint64_t>(get_checked(r, "seed", 0, 0, 9007199254740991.0, true, req));
      if (r.Has("stopTokens") && !r.Get("stopTokens").IsUndefined() && !r.Get("stopTokens").IsNull())
        spec.stop = to_ids(r.Get("stopTokens"), "request.stopTokens");
      spec.ignore_eos = get_bool(r, "ignoreEos", false);
      const std::string logits = get_str(r, "logits", "none");
      if (logits != "none" && logits != "all")
        throw std::invalid_argument("request.logits must be 'none' or 'all' (got '" + logits + "')");
      spec.logits_all = logits == "all";
      spec.stream = get_bool(r, "stream", false);
      spec.min_tokens = get_count(r, "minTokens", 0, 0, req);
      spec.logprobs = get_count(r, "logprobs", -1, -1, req);
      const bool defer = info.Length() > 1 && info[1].IsBoolean() && info[1].As<Napi::Boolean>().Value();
      return Napi::Number::New(env, static_cast<double>(eng(env).submit(std::move(spec), defer)));
    } catch (const std::exception& e) {
      Napi::Error::New(env, e.what()).ThrowAsJavaScriptException();
      return env.Undefined();
    }
  }

  Napi::Value Flush(const Napi::CallbackInfo& info) {
    try {
      eng(info.Env()).flush();
    } catch (const std::exception& e) {
      Napi::Error::New(info.Env(), e.what()).ThrowAsJavaScriptException();
    }
    return info.Env().Undefined();
  }

  Napi::Value AllowSteps(const Napi::CallbackInfo& info) {
    try {
      if (info.Length() < 1 || !info[0].IsNumber()) throw std::invalid_argument("allowSteps(n): n must be a number");
      eng(info.Env()).allow_steps(info[0].As<Napi::Number>().Int32Value());
    } catch (const std::exception& e) {
      Napi::Error::New(info.Env(), e.what()).ThrowAsJavaScriptException();
    }
    return info.Env().Undefined();
  }

  Napi::Value Cancel(const Napi::CallbackInfo& info) {
    try {
      if (info.Length() < 1 || !info[0].IsNumber()) throw std::invalid_argument("cancel(id): id must be a number");
      if (!engine_) return info.Env().Undefined();  // closed: every request is over already
      eng(info.Env()).cancel(static_cast<uint64_t>(info[0].As<Napi::Number>().Int64Value()));
    } catch (const std::exception& e) {
      Napi::Error::New(info.Env(), e.what()).ThrowAsJavaScriptException();
    }
    return info.Env().Undefined();
  }

  Napi::Value Stats(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    try {
      const EngineStats s = eng(env).stats();
      auto o = Napi::Object::New(env);
      o.Set("activeBytes", static_cast<double>(s.active_bytes));
      o.Set("peakActiveBytes", static_cast<double>(s.peak_active_bytes));
      o.Set("numAllocs", static_cast<double>(s.num_allocs));
      o.Set("parkWaits", static_cast<double>(s.park_waits));
      o.Set("prefixAdmittedTokens", static_cast<double>(s.prefix_admitted_tokens));
      o.Set("prefixHitTokens", static_cast<double>(s.prefix_hit_tokens));
      o.Set("retires", static_cast<double>(s.retires));
      o.Set("evictions", static_cast<double>(s.evictions));
      o.Set("preemptions", static_cast<double>(s.preemptions));
      o.Set("kvBlocksUsed", s.kv_blocks_used);
      o.Set("kvBlocksFree", s.kv_blocks_free);
      o.Set("kvBlocksTotal", s.kv_blocks_total);
      o.Set("stateSlotsFree", s.state_slots_free);
      o.Set("stateSlotsTotal", s.state_slots_total);
      o.Set("prefixCachedBlocks", s.prefix_cached_blocks);
      o.Set("snapshotsUsed", s.snapshots_used);
      o.Set("snapshotsTotal", s.snapshots_total);
      o.Set("steps", static_cast<double>(s.steps));
      o.Set("weightBytes", static_cast<double>(s.weight_bytes));
      o.Set("running", s.running);
      o.Set("waiting", s.waiting);
      o.Set("graphHits", static_cast<double>(s.graph_hits));
      o.Set("graphMisses", static_cast<double>(s.graph_misses));
      o.Set("graphCaptureMs", s.graph_capture_ms);
      o.Set("deviceBytes", static_cast<double>(s.device_bytes));
      o.Set("devicePeakBytes", static_cast<double>(s.device_peak_bytes));
      o.Set("deviceAllocs", static_cast<double>(s.device_allocs));
      return o;
    } catch (const std::exception& e) {
      Napi::Error::New(env, e.what()).ThrowAsJavaScriptException();
      return env.Undefined();
    }
  }

  Napi::Value Reset(const Napi::CallbackInfo& info) {
    try {
      eng(info.Env()).reset_counters();
    } catch (const std::exception& e) {
      Napi::Error::New(info.Env(), e.what()).ThrowAsJavaScriptException();
    }
    return info.Env().Undefined();
  }

  Napi::Value Info(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    try {
      const EngineInfo i = eng(env).info();
      auto o = Napi::Object::New(env);
      o.Set("backend", i.backend);
      o.Set("isa", i.desc);
      o.Set("dtype", i.dtype);
      o.Set("threads", i.threads);
      o.Set("weightBytes", static_cast<double>(i.weight_bytes));
      o.Set("kvBlocksTotal", i.kv_blocks);
      o.Set("blockSize", i.block_size);
      o.Set("snapshotInterval", i.snapshot_interval);
      o.Set("kvBlockBytes", static_cast<double>(i.kv_block_bytes));
      o.Set("kvCacheDtype", i.kv_dtype);
      o.Set("stateBytes", static_cast<double>(i.state_bytes));
      o.Set("kvPoolBytes", static_cast<double>(i.kv_pool_bytes));
      o.Set("kvPoolSource", i.kv_pool_source);
      if (i.kv_memory_fraction > 0) {
        o.Set("kvMemoryFraction", i.kv_memory_fraction);
        o.Set("kvFreeBytes", static_cast<double>(i.kv_free_bytes));
        o.Set("kvBudgetBytes", static_cast<double>(i.kv_budget_bytes));
      }
      o.Set("hostWeightsReleased", i.host_weights_released);
      if (i.host_weights_released) {
        o.Set("rssBeforeReleaseBytes", static_cast<double>(i.rss_before_release));
        o.Set("rssAfterReleaseBytes", static_cast<double>(i.rss_after_release));
      }
      if (i.backend == "cuda") {
        o.Set("gpuName", i.desc);
        o.Set("gpuMemoryBytes", static_cast<double>(i.device_memory));
      }
      return o;
    } catch (const std::exception& e) {
      Napi::Error::New(env, e.what()).ThrowAsJavaScriptException();
      return env.Undefined();
    }
  }

  Napi::Value NowMs(const Napi::CallbackInfo& info) { return Napi::Number::New(info.Env(), ns_to_ms(now_ns())); }

  Napi::Value TakeProfile(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    try {
      auto ops = eng(env).take_profile();
      auto arr = Napi::Array::New(env, ops.size());
      for (size_t i = 0; i < ops.size(); ++i) {
        auto o = Napi::Object::New(env);
        o.Set("name", ops[i].name);
        o.Set("group", ops[i].group);
        o.Set("calls", static_cast<double>(ops[i].calls));
        o.Set("totalUs", static_cast<double>(ops[i].ns) / 1e3);
        arr.Set(i, o);
      }
      return arr;
    } catch (const std::exception& e) {
      Napi::Error::New(env, e.what()).ThrowAsJavaScriptException();
      return env.Undefined();
    }
  }

  // The worker is stopped first and the events it had posted are returned: a request that finished
  // before close() is reported as it ended, not as cancelled by the close.
  Napi::Value Close(const Napi::CallbackInfo& info) {
    Napi::Array left = Napi::Array::New(info.Env());
    if (engine_) {
      engine_->stop();
      left = EventsToJs(info.Env(), engine_->drain());
    }
    Shutdown();
    return left;
  }

  std::unique_ptr<Engine> engine_;
  Napi::ThreadSafeFunction tsfn_;
  std::shared_ptr<Mailbox> box_ = std::make_shared<Mailbox>();
};

}  // namespace

Napi::Function InitEngineClass(Napi::Env env) { return EngineWrap::Define(env); }

}  // namespace lumen
