// The thread pool's stealable regions (decode matmuls) and work-conserving chunk regions, with a
// worker that stalls for 2 ms mid-piece in every third region, as a core descheduled by the host.
import { describe, expect, it } from 'vitest';
import { loadAddon } from '../src/engine/native.js';

interface PoolCheck { regions: number; taken: number; wrongOutputs: number; lateOverwrites: number; chunkMiscounts: number; jobMiscounts: number }

describe('thread pool under a stalling worker', () => {
  const addon = loadAddon() as unknown as { poolCheck(threads: number, regions: number): PoolCheck };

  for (const threads of [2, 3]) {
    it(`${threads} threads: every piece lands once, right, and a late worker never overwrites a later region`, () => {
      const r = addon.poolCheck(threads, 90);
      expect(r.regions).toBe(90);
      expect(r.wrongOutputs).toBe(0);
      expect(r.lateOverwrites).toBe(0);
      expect(r.chunkMiscounts).toBe(0); // each chunk of a work-conserving region ran exactly once
      expect(r.jobMiscounts).toBe(0); // a blocking region ran once on every thread
      // The caller took over the stalled pieces (30 stalling regions) instead of waiting them out.
      expect(r.taken).toBeGreaterThan(0);
    });
  }
});
