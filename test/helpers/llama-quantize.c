// Test-only: quantize a GGUF with llama.cpp's own quantizer (llama_model_quantize in the prebuilt
// libllama that node-llama-cpp ships), so tests can compare our quantized files with llama.cpp's.
//
//   llama-quantize-ref LIBLLAMA.so IN.gguf OUT.gguf FTYPE PURE(0|1) NTHREAD REQUANTIZE(0|1)
//
// REQUANTIZE lets it read quantized tensors (dequantized by ggml first): with FTYPE 0 (all F32)
// the output holds ggml's own dequantization of the input.
//
// The library is dlopen'ed (its own dependencies resolve through its RUNPATH) and the CPU backends
// beside it are loaded from its directory (the quantization itself runs in ggml-base's reference
// code, ggml_quantize_chunk, whichever CPU backend is chosen). The parameter struct
// is declared here as in the bundled llama.h of node-llama-cpp 3.21.1 (llama.cpp release v0.4.0,
// include/llama.h, struct llama_model_quantize_params); the defaults the library returns are
// checked against it before use, so a layout change is an error rather than a wrong call.
#include <dlfcn.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct llama_model_quantize_params_v040 {
    int32_t nthread;
    int ftype;                        // enum llama_ftype
    int output_tensor_type;           // enum ggml_type
    int token_embedding_type;         // enum ggml_type
    bool allow_requantize;
    bool quantize_output_tensor;
    bool only_copy;
    bool pure;
    bool keep_split;
    bool dry_run;
    const void * imatrix;
    const void * kv_overrides;
    const void * tt_overrides;
    const int32_t * prune_layers;
    size_t max_buf_size;
};

typedef struct llama_model_quantize_params_v040 (*default_params_fn)(void);
typedef uint32_t (*quantize_fn)(const char *, const char *, const struct llama_model_quantize_params_v040 *);
typedef void (*backend_init_fn)(void);
typedef void (*load_all_from_path_fn)(const char *);

static int fail(const char * what, const char * detail) {
    fprintf(stderr, "llama-quantize-ref: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
    return 2;
}

int main(int argc, char ** argv) {
    if (argc != 8) return fail("usage: llama-quantize-ref LIBLLAMA IN OUT FTYPE PURE NTHREAD REQUANTIZE", NULL);
    void * lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!lib) return fail("cannot load libllama", dlerror());
    default_params_fn defaults = (default_params_fn) dlsym(lib, "llama_model_quantize_default_params");
    quantize_fn quantize = (quantize_fn) dlsym(lib, "llama_model_quantize");
    backend_init_fn backend_init = (backend_init_fn) dlsym(lib, "llama_backend_init");
    if (!defaults || !quantize || !backend_init) return fail("libllama lacks the quantize entry points", dlerror());

    struct llama_model_quantize_params_v040 p = defaults();
    // Defaults of llama_model_quantize_default_params in this release: Q8_0 (7), no type overrides
    // (GGML_TYPE_COUNT), quantize_output_tensor, 8 GiB buffer.
    if (p.ftype != 7 || p.output_tensor_type != p.token_embedding_type || !p.quantize_output_tensor || p.pure ||
        p.imatrix || p.tt_overrides || p.max_buf_size != ((size_t) 8 << 30)) {
        return fail("llama_model_quantize_params layout differs from the one this helper declares", NULL);
    }
    char * end = NULL;
    long ftype = strtol(argv[4], &end, 10);
    if (*end || ftype < 0 || ftype > 1023) return fail("bad FTYPE", argv[4]);
    long nthread = strtol(argv[6], &end, 10);
    if (*end || nthread < 1 || nthread > 256) return fail("bad NTHREAD", argv[6]);
    p.ftype = (int) ftype;
    p.pure = argv[5][0] == '1';
    p.allow_requantize = argv[7][0] == '1';
    p.nthread = (int32_t) nthread;

    // The ggml backends live beside libllama: load them from there (not from this program's directory).
    load_all_from_path_fn load_all = (load_all_from_path_fn) dlsym(lib, "ggml_backend_load_all_from_path");
    if (load_all) {
        char dir[4096];
        snprintf(dir, sizeof dir, "%s", argv[1]);
        char * slash = strrchr(dir, '/');
        if (slash) {
            *slash = 0;
            load_all(dir);
        }
    }
    backend_init();
    uint32_t rc = quantize(argv[2], argv[3], &p);
    if (rc != 0) return fail("llama_model_quantize failed", argv[2]);
    return 0;
}
