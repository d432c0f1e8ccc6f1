// Structured logs for -v/-vv: pino JSON lines on stderr (fd 2, synchronous so lines never interleave with a kill).
import { pino, type Logger } from 'pino';

export type { Logger };

/** verbosity 1: info and up; 2: debug and up; anything else: silent. */
export function createLogger(verbosity: number, dest: number | NodeJS.WritableStream = 2): Logger {
  if (verbosity < 1) return pino({ level: 'silent' });
  const stream = typeof dest === 'number' ? pino.destination({ fd: dest, sync: true }) : dest;
  return pino(
    {
      level: verbosity >= 2 ? 'debug' : 'info',
      base: { tool: 'lumen-bench' },
      timestamp: pino.stdTimeFunctions.isoTime,
      formatters: { level: (label) => ({ level: label }) },
    },
    stream,
  );
}
