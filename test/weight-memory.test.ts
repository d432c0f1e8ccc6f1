// The CPU engine keeps one copy of a checkpoint's weights in memory: every matrix is copied (or
// repacked into panels) into huge-page memory at load and the file mapping's pages are handed
// back, the embedding's lookup included (it reads its rows back from the copy). Counted from the
// kernel's own accounting of the mapping (/proc/self/smaps), not from timings.
import { readFileSync, readdirSync, statSync } from 'node:fs';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { loadEngine } from '../src/engine/engine.js';
import { loadCheckpoint } from '../src/model/checkpoint.js';
import { baseOptions, promptIds } from './helpers/engine-fixture.js';
import { cleanupAllFixtures, synthFixture } from './helpers/synth-fixture.js';

afterAll(() => cleanupAllFixtures());

/** Resident bytes of this process's mappings of `file` (every mapping of it, summed). */
function residentBytesOf(file: string): number {
  let inFile = false, kb = 0;
  for (const line of readFileSync('/proc/self/smaps', 'utf8').split('\n')) {
    if (/^[0-9a-f]+-[0-9a-f]+ /.test(line)) inFile = line.endsWith(` ${file}`);
    else if (inFile && line.startsWith('Rss:')) kb += Number(line.split(/\s+/)[1]);
  }
  return kb * 1024;
}

describe('weight memory', () => {
  it.runIf(process.platform === 'linux')('a bf16 checkpoint: the mapping\'s pages go back after the weights are bound, and the lookup still reads the embedding', async () => {
    // The tiny shape with the real vocabulary: the 64 MB embedding is most of the file, and with
    // bf16 panels (AVX-512 BF16) it is both the head's panels and the lookup's table.
    const fx = await synthFixture({ dtype: 'bf16', tokenizer: false });
    const shard = path.join(fx.dir, readdirSync(fx.dir).find((f) => f.endsWith('.safetensors'))!);
    const bytes = statSync(shard).size;
    expect(bytes).toBeGreaterThan(60e6);
    const e = await loadEngine(loadCheckpoint(fx.dir), { ...baseOptions, threads: 1, maxSeq: 64, maxSeqs: 2 });
    try {
      const r = await e.submit({ prompt: promptIds(40, 5), maxTokens: 4, ignoreEos: true }).done;
      expect(r.tokens).toHaveLength(4);
      // What may stay: the header, the 1-D tensors read in place, the partial pages at each
      // matrix's two ends. Before the release, the whole file (the embedding alone is 64 MB).
      const resident = residentBytesOf(shard);
      expect(resident).toBeGreaterThan(0); // the mapping is still there: the measurement sees it
      expect(resident).toBeLessThan(0.02 * bytes);
    } finally {
      await e.close();
    }
  });
});
