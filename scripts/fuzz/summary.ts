// The fuzz run's tally: counts per target, mutation family and outcome, every failure with its
// case number and mutation, and the distinct rejection messages (the text a user would see).
import type { CaseSpec, Target } from './cases.js';
import type { CaseResult, Outcome } from './protocol.js';

export interface FailureRecord {
  case: number;
  target: Target;
  family: string;
  mutation: string;
  stage: string;
  what: string;
  errorClass?: string;
  message?: string;
}

interface Counts { cases: number; loaded: number; rejected: number; failures: number }

export interface MessageRecord {
  /** The message with the case path shown as <case> and numbers as N. */
  pattern: string;
  count: number;
  target: Target;
  errorClass: string;
  /** One real message (case path shown as <case>) and its case number. */
  example: string;
  case: number;
}

export interface Summary {
  seed: number;
  cases: number;
  outcomes: Record<Outcome, number>;
  targets: Record<string, Counts>;
  families: Record<string, Counts>;
  failures: FailureRecord[];
  messages: MessageRecord[];
  durationSeconds: number;
  casesPerSecond: number;
  maxWorkerRssMiB: number;
  workerStarts: number;
  machine: { cpu: string; cores: number; node: string };
}

const emptyCounts = (): Counts => ({ cases: 0, loaded: 0, rejected: 0, failures: 0 });

function bump(c: Counts, o: Outcome): void {
  c.cases++;
  if (o === 'loaded') c.loaded++;
  else if (o === 'rejected') c.rejected++;
  else c.failures++;
}

/** Replaces every occurrence of the case path with <case>. */
function anonymise(message: string, casePath: string): string {
  return message.split(casePath).join('<case>');
}

export class Tally {
  private readonly outcomes: Record<Outcome, number> = { loaded: 0, rejected: 0, failure: 0 };
  private readonly targets = new Map<string, Counts>();
  private readonly families = new Map<string, Counts>();
  private readonly failures: FailureRecord[] = [];
  private readonly messages = new Map<string, MessageRecord>();
  private readonly outcomeOf = new Map<number, { spec: CaseSpec; result: CaseResult; casePath: string }>();
  private maxRss = 0;

  add(spec: CaseSpec, result: CaseResult, casePath: string): void {
    this.outcomeOf.set(spec.index, { spec, result, casePath });
    if (result.rssBytes > this.maxRss) this.maxRss = result.rssBytes;
  }

  /** A case that reported an outcome and then killed its child: it becomes a failure. */
  markFailed(index: number, result: CaseResult): void {
    const prev = this.outcomeOf.get(index);
    if (prev) this.outcomeOf.set(index, { ...prev, result: { ...result, message: prev.result.message } });
  }

  failureCount(): number {
    let n = 0;
    for (const { result } of this.outcomeOf.values()) if (result.outcome === 'failure') n++;
    return n;
  }

  summary(seed: number, seconds: number, workerStarts: number, machine: Summary['machine']): Summary {
    for (const [index, { spec, result, casePath }] of [...this.outcomeOf].sort((a, b) => a[0] - b[0])) {
      this.outcomes[result.outcome]++;
      const t = this.targets.get(spec.target) ?? emptyCounts();
      this.targets.set(spec.target, t);
      bump(t, result.outcome);
      const key = `${spec.target}/${spec.family}`;
      const f = this.families.get(key) ?? emptyCounts();
      this.families.set(key, f);
      bump(f, result.outcome);
      const message = result.message !== undefined ? anonymise(result.message, casePath) : undefined;
      if (result.outcome === 'failure') {
        this.failures.push({
          case: index, target: spec.target, family: spec.family, mutation: spec.mutation, stage: result.stage,
          what: result.why ?? 'failure', ...(result.errorClass ? { errorClass: result.errorClass } : {}), ...(message !== undefined ? { message } : {}),
        });
      } else if (result.outcome === 'rejected' && message !== undefined) {
        const pattern = message.replace(/\d+/g, 'N');
        const m = this.messages.get(pattern);
        if (m) m.count++;
        else this.messages.set(pattern, { pattern, count: 1, target: spec.target, errorClass: result.errorClass ?? '', example: message, case: index });
      }
    }
    const cases = this.outcomeOf.size;
    return {
      seed,
      cases,
      outcomes: this.outcomes,
      targets: Object.fromEntries(this.targets),
      families: Object.fromEntries([...this.families].sort((a, b) => a[0].localeCompare(b[0]))),
      failures: this.failures,
      messages: [...this.messages.values()].sort((a, b) => b.count - a.count),
      durationSeconds: seconds,
      casesPerSecond: seconds > 0 ? cases / seconds : 0,
      maxWorkerRssMiB: this.maxRss / (1024 * 1024),
      workerStarts,
      machine,
    };
  }
}

const pad = (s: string | number, n: number) => String(s).padStart(n);

/** The human-readable summary printed on stdout. */
export function formatSummary(s: Summary, maxFailures = 200): string {
  const lines: string[] = [];
  lines.push(`fuzz: ${s.cases} cases, seed ${s.seed}: ${s.outcomes.loaded} loaded, ${s.outcomes.rejected} rejected with a clear error, ${s.outcomes.failure} failures`);
  lines.push(`      ${s.durationSeconds.toFixed(1)} s, ${s.casesPerSecond.toFixed(1)} cases/s, worker started ${s.workerStarts}x, worker RSS at most ${s.maxWorkerRssMiB.toFixed(0)} MiB (${s.machine.cpu}, ${s.machine.cores} cores, node ${s.machine.node})`);
  lines.push('');
  lines.push(`${'target'.padEnd(18)}${pad('cases', 7)}${pad('loaded', 8)}${pad('rejected', 10)}${pad('failures', 10)}`);
  for (const [t, c] of Object.entries(s.targets).sort()) {
    lines.push(`${t.padEnd(18)}${pad(c.cases, 7)}${pad(c.loaded, 8)}${pad(c.rejected, 10)}${pad(c.failures, 10)}`);
  }
  lines.push('');
  lines.push(`${'target/family'.padEnd(34)}${pad('cases', 7)}${pad('loaded', 8)}${pad('rejected', 10)}${pad('failures', 10)}`);
  for (const [f, c] of Object.entries(s.families)) {
    lines.push(`${f.padEnd(34)}${pad(c.cases, 7)}${pad(c.loaded, 8)}${pad(c.rejected, 10)}${pad(c.failures, 10)}`);
  }
  if (s.failures.length) {
    lines.push('');
    lines.push(`failures (${s.failures.length}; re-run one with --seed ${s.seed} --only N):`);
    for (const f of s.failures.slice(0, maxFailures)) {
      lines.push(`  case ${f.case} [${f.target}/${f.family}] ${f.mutation}`);
      lines.push(`    -> ${f.what}${f.stage ? ` (stage ${f.stage})` : ''}${f.errorClass ? `: ${f.errorClass}` : ''}${f.message ? `: ${f.message.slice(0, 300)}` : ''}`);
    }
    if (s.failures.length > maxFailures) lines.push(`  ... ${s.failures.length - maxFailures} more (see --json)`);
  }
  return lines.join('\n') + '\n';
}
