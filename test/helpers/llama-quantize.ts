// llama.cpp's own quantizer for tests: builds test/helpers/llama-quantize.c (once per source
// version, into the OS temp directory) and runs it on the prebuilt libllama of
// @node-llama-cpp/linux-x64, i.e. exactly the llama_model_quantize that ships with the reference.
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

const execFileP = promisify(execFile);
const SOURCE = fileURLToPath(new URL('./llama-quantize.c', import.meta.url));

/** The libllama shared library of the prebuilt CPU binaries node-llama-cpp uses on linux-x64. */
export function libllamaPath(): string {
  const require = createRequire(import.meta.url);
  // The package's main is dist/index.js; the binaries sit beside dist/.
  const pkg = dirname(dirname(require.resolve('@node-llama-cpp/linux-x64')));
  const bins = join(pkg, 'bins', 'linux-x64');
  const lib = existsSync(bins) ? readdirSync(bins).find((f) => /^libllama(\.v[\d.]+)?\.so$/.test(f)) : undefined;
  if (!lib) throw new Error(`no libllama*.so under ${bins}`);
  return join(bins, lib);
}

let built: Promise<string> | null = null;

/** Compile the helper (cc or gcc, C11) unless this source version is already built. */
export function buildQuantizeHelper(): Promise<string> {
  built ??= (async () => {
    const src = readFileSync(SOURCE);
    const hash = createHash('sha256').update(src).digest('hex').slice(0, 16);
    const dir = join(tmpdir(), `lumen-llama-quantize-${hash}`);
    const exe = join(dir, 'llama-quantize-ref');
    if (existsSync(exe)) return exe;
    mkdirSync(dir, { recursive: true });
    const tmp = `${exe}.${process.pid}`;
    const args = ['-std=c11', '-D_GNU_SOURCE', '-O1', '-Wall', '-Wextra', '-o', tmp, SOURCE, '-ldl'];
    try {
      await execFileP('cc', args);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
      await execFileP('gcc', args); // no `cc` on the PATH
    }
    renameSync(tmp, exe); // atomic: parallel test files never run a half-written binary
    return exe;
  })();
  built.catch(() => { built = null; });
  return built;
}

export interface LlamaQuantizeOptions {
  /** llama_ftype number (e.g. 15 for Q4_K_M). */
  ftype: number;
  /** llama-quantize --pure: every tensor the base type, no mix rules. */
  pure?: boolean;
  /** Quantizer threads (default 2; the result does not depend on it). */
  threads?: number;
  /** Accept quantized input tensors (ggml dequantizes them first); with ftype 0 the output is ggml's dequantization. */
  allowRequantize?: boolean;
}

/** Quantize `input` (an f32/f16/bf16 GGUF) into `output` with llama.cpp's llama_model_quantize. */
export async function llamaQuantize(input: string, output: string, opts: LlamaQuantizeOptions): Promise<void> {
  const exe = await buildQuantizeHelper();
  const args = [libllamaPath(), input, output, String(opts.ftype), opts.pure ? '1' : '0', String(opts.threads ?? 2), opts.allowRequantize ? '1' : '0'];
  try {
    await execFileP(exe, args, { maxBuffer: 64 << 20, timeout: 600_000, killSignal: 'SIGKILL' });
  } catch (err) {
    const e = err as { stderr?: string; message: string };
    const tail = (e.stderr ?? '').trim().split('\n').slice(-5).join(' | ');
    throw new Error(`llama_model_quantize ${input} -> ${output} (ftype ${opts.ftype}${opts.pure ? ', pure' : ''}) failed: ${tail || e.message}`);
  }
}
