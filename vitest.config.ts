import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    testTimeout: 120_000,
    hookTimeout: 300_000,
    // Native engine tests are CPU-heavy; two cores means running files one at a time is fastest.
    fileParallelism: false,
    pool: 'forks',
  },
});
