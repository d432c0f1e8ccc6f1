import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    // dist/ built from the sources under test (bench and the tokenizer workers run from it).
    globalSetup: ['test/helpers/dist-fresh.ts'],
    testTimeout: 120_000,
    hookTimeout: 300_000,
    // Native engine tests are CPU-heavy; two cores means running files one at a time is fastest.
    fileParallelism: false,
    pool: 'forks',
  },
});
