// The thread pool's stealable regions (decode matmuls) and work-conserving chunk regions. In every
// third stealable region the check forces the case under test instead of waiting for the scheduler
// to produce it: a worker holds a piece and does not let go until the caller has taken it over
// (a core descheduled mid-piece), with a bounded handshake that is counted, never a hang.
import { describe, expect, it } from 'vitest';
import { loadAddon } from '../src/engine/native.js';

interface PoolCheck {
  regions: number; stallRegions: number; taken: number; takenInStallRegions: number; handshakeTimeouts: number;
  wrongOutputs: number; lateOverwrites: number; chunkMiscounts: number; jobMiscounts: number;
}

describe('thread pool under a worker that holds a piece', () => {
  const addon = loadAddon() as unknown as { poolCheck(threads: number, regions: number): PoolCheck };

  for (const threads of [2, 3]) {
    it(`${threads} threads: every piece lands once, right, and a late worker never overwrites a later region (pieces claimed from the front, or from both ends)`, () => {
      const r = addon.poolCheck(threads, 90);
      expect(r.regions).toBe(90);
      expect(r.stallRegions).toBe(30);
      expect(r.handshakeTimeouts).toBe(0); // every forced hold was set up and released
      expect(r.wrongOutputs).toBe(0);
      expect(r.lateOverwrites).toBe(0);
      expect(r.chunkMiscounts).toBe(0); // each chunk of a work-conserving region ran exactly once
      expect(r.jobMiscounts).toBe(0); // a blocking region ran once on every thread
      // Each held piece is taken over by the caller (it cannot be finished any other way), so at
      // least one piece per forced region; a descheduled worker elsewhere may add more.
      expect(r.takenInStallRegions).toBeGreaterThanOrEqual(r.stallRegions);
      expect(r.taken).toBeGreaterThanOrEqual(r.takenInStallRegions);
    });
  }
});

interface Outcome { caught: string; usableAfter: boolean }
interface PoolFailureCheck {
  runWorker: Outcome; runCaller: Outcome; dealt: Outcome; dealtCalls: number;
  stealableWorker: Outcome; stealableCaller: Outcome; stealableTakenOver: Outcome; handshakeTimeouts: number;
}

describe('thread pool when a region throws (an allocation that fails in a kernel)', () => {
  const addon = loadAddon() as unknown as { poolFailureCheck(threads: number): PoolFailureCheck };

  for (const threads of [2, 3]) {
    it(`${threads} threads: the exception reaches the caller once, from a worker or the caller, in every kind of region, and the pool runs on`, () => {
      // Before, a worker's exception ended the process (std::terminate), and a caller's left the
      // region while the workers still ran its function.
      const r = addon.poolFailureCheck(threads);
      expect(r.handshakeTimeouts).toBe(0);
      expect(r.runWorker).toEqual({ caught: 'worker job failed', usableAfter: true });
      expect(r.runCaller).toEqual({ caught: 'caller job failed', usableAfter: true });
      expect(r.dealt).toEqual({ caught: 'claim 5 failed', usableAfter: true });
      expect(r.dealtCalls).toBe(37); // every claim still ran once
      expect(r.stealableWorker).toEqual({ caught: 'worker piece failed', usableAfter: true });
      expect(r.stealableCaller).toEqual({ caught: 'caller piece failed', usableAfter: true });
      // A worker that failed on a piece the caller had taken over (and computed) is not a failure:
      // not in this region, and not in the blocking region after it.
      expect(r.stealableTakenOver).toEqual({ caught: '', usableAfter: true });
    });
  }
});
