// What a row measures around its requests besides their timestamps: the engine's counters over the
// timed passes. In-process they are the engine's own (reset before the timed passes, read after); an
// engine behind HTTP (src/endpoint) reads them from its server's /metrics, may leave some empty, and
// prepares its prompts (text of an exact token count) before the row starts.
import type { EngineHandle, EngineStats } from '../engine/types.js';
import { counterColumns, type CounterColumns } from './csv.js';
import type { TimedRequest } from './metrics.js';

export type NullableCounterColumns = { [K in keyof CounterColumns]: number | null };

export interface ProbeReading {
  /** The counter columns; null where the engine's counters could not be read. */
  columns: NullableCounterColumns;
  /** Every engine counter over the timed passes, when the engine is in this process. */
  stats: EngineStats | null;
  /** How the columns (and the requests) were measured, for the row's notes. */
  notes: string[];
  /** More about the row for the JSON report (the endpoint's wire figures), or null. */
  detail: Record<string, unknown> | null;
}

export interface RowProbe {
  /** Every prompt of the row (warm-up and timed), before its first request; returns notes on them. */
  prepare?(prompts: readonly Int32Array[], signal: AbortSignal, concurrency: number): Promise<string[]>;
  /** Just before the timed passes. */
  begin(): Promise<void>;
  /** Just after them, with their requests. */
  end(timed: readonly TimedRequest[]): Promise<ProbeReading>;
  /** The word for what failed in the row's reason ('engine', 'server'). */
  readonly failureSubject?: string;
}

/** The in-process engine's counters: reset before the timed passes, read after. */
export function engineCounterProbe(engine: EngineHandle): RowProbe {
  return {
    async begin() { engine.resetCounters(); },
    async end() {
      const stats = engine.stats();
      return { columns: counterColumns(stats), stats, notes: [], detail: null };
    },
  };
}
