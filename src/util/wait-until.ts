// Waiting until a time on a caller's clock, however far off. setTimeout keeps a delay of at most
// 2^31 - 1 ms (24.8 days) and runs a longer one after 1 ms (Node's TimeoutOverflowWarning), so a longer
// wait is taken in pieces of at most that, reading the clock again after each; a wait within the limit is
// one setTimeout, as it always was.

/** The longest delay setTimeout honours (ms). */
export const MAX_TIMER_MS = 2 ** 31 - 1;

export interface Wait {
  /** Resolves once `now()` reaches the time, or at `wake()`. */
  done: Promise<void>;
  /** Ends the wait now (idempotent). */
  wake(): void;
}

export function waitUntil(atMs: number, now: () => number): Wait {
  let timer: NodeJS.Timeout | undefined;
  let finish!: () => void;
  let finished = false;
  const done = new Promise<void>((resolve) => { finish = resolve; });
  const wake = () => {
    if (finished) return;
    finished = true;
    if (timer !== undefined) clearTimeout(timer);
    finish();
  };
  const arm = () => {
    const ms = atMs - now();
    if (!(ms > 0)) return wake();
    timer = ms > MAX_TIMER_MS ? setTimeout(arm, MAX_TIMER_MS) : setTimeout(wake, ms);
  };
  arm();
  return { done, wake };
}
