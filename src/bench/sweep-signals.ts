// SIGINT / SIGTERM during a sweep: while the model loads (nothing finished yet), or at a second
// signal, leave at once; otherwise stop after the rows already finished (the row in progress is
// dropped) and exit 130 (SIGINT) or 143 (SIGTERM). Once the rows are done (the engine closing, the
// HTML page rendering), a signal leaves at once through the sweep's own ending (`afterRows`).
import type { SweepRenderer } from './render.js';

export const EXIT_INTERRUPTED = 130;
export const EXIT_TERMINATED = 143;

export interface StopSignals {
  /** The model is loaded: a signal now stops the sweep between rows instead of exiting. */
  loaded(): void;
  /** The exit code of a stop: 143 after SIGTERM, else 130 (SIGINT, a test's abort, a closed stdout). */
  stopCode(): number;
  /** The rows are done: a signal now calls `leave` with its exit code (it records and exits). */
  afterRows(leave: (sig: NodeJS.Signals, code: number) => void): void;
  dispose(): void;
}

export function watchStopSignals(renderer: SweepRenderer, abort: AbortController, install: boolean): StopSignals {
  let loading = true;
  let code = EXIT_INTERRUPTED;
  let late: ((sig: NodeJS.Signals, code: number) => void) | null = null;
  const onSignal = (sig: NodeJS.Signals) => {
    if (late) return late(sig, sig === 'SIGTERM' ? EXIT_TERMINATED : EXIT_INTERRUPTED);
    if (loading || abort.signal.aborted) {
      renderer.close();
      process.exit(sig === 'SIGTERM' ? EXIT_TERMINATED : EXIT_INTERRUPTED);
    }
    renderer.warn(`${sig}: stopping after the rows already finished; the row in progress is dropped`);
    if (sig === 'SIGTERM') code = EXIT_TERMINATED;
    abort.abort();
  };
  if (install) {
    process.on('SIGINT', onSignal);
    process.on('SIGTERM', onSignal);
  }
  return {
    loaded: () => { loading = false; },
    stopCode: () => code,
    afterRows: (leave) => { late = leave; },
    dispose: () => {
      if (!install) return;
      process.off('SIGINT', onSignal);
      process.off('SIGTERM', onSignal);
    },
  };
}
