// One long-lived child process running fuzz cases, with a watchdog per case: a case that does not
// answer within the timeout is a hang (the child is killed), a child that dies mid-case is a
// crash; either way the child is restarted for the next case.
import { fork, type ChildProcess } from 'node:child_process';
import type { CaseRequest, CaseResult } from './protocol.js';

/** Bytes of the child's stderr kept for a crash report. */
const STDERR_TAIL = 4096;

export class Supervisor {
  private child: ChildProcess | null = null;
  private ready: Promise<void> | null = null;
  private stderrTail = '';
  private onResult: ((r: CaseResult) => void) | null = null;
  private onExit: ((code: number | null, signal: NodeJS.Signals | null) => void) | null = null;
  /** Children started (the first one included). */
  starts = 0;
  /** Cases whose child died after it had reported them (they count as failures). */
  readonly lateFailures: CaseResult[] = [];
  private lastIndex = -1;

  constructor(private readonly workerPath: string, private readonly timeoutMs: number) {}

  private start(): Promise<void> {
    this.starts++;
    this.stderrTail = '';
    const child = fork(this.workerPath, [], { stdio: ['ignore', 'ignore', 'pipe', 'ipc'] });
    this.child = child;
    child.stderr!.setEncoding('utf8');
    child.stderr!.on('data', (s: string) => { this.stderrTail = (this.stderrTail + s).slice(-STDERR_TAIL); });
    const ready = new Promise<void>((resolve, reject) => {
      const onEarlyExit = (code: number | null, signal: NodeJS.Signals | null) => {
        reject(new Error(`fuzz: the worker exited before it was ready (code ${code}, signal ${signal}): ${this.stderrTail.trim()}`));
      };
      child.once('exit', onEarlyExit);
      child.on('message', (m: { type: string }) => {
        if (m.type === 'ready') {
          child.off('exit', onEarlyExit);
          resolve();
        } else if (m.type === 'result') this.onResult?.(m as CaseResult);
      });
    });
    child.on('error', () => { /* a send to a dying child: its exit event reports it */ });
    child.on('exit', (code, signal) => {
      if (this.child !== child) return; // killed by the watchdog, already reported
      this.child = null;
      this.ready = null;
      if (this.onExit) this.onExit(code, signal);
      else if (this.lastIndex >= 0) {
        // Died between cases: blame the case that ran last (its teardown was still going on).
        this.lateFailures.push({
          type: 'result', index: this.lastIndex, outcome: 'failure', stage: 'crash', ms: 0, rssBytes: 0,
          why: `the child died after reporting the case (${signal ? `signal ${signal}` : `exit code ${code}`})${this.tail()}`,
        });
      }
    });
    return ready;
  }

  /** Runs one case; a hang or a crash comes back as a failure result. */
  async run(req: CaseRequest): Promise<CaseResult> {
    if (!this.ready) this.ready = this.start();
    await this.ready;
    const child = this.child!;
    const t0 = performance.now();
    return new Promise<CaseResult>((resolve) => {
      const finish = (r: CaseResult) => {
        clearTimeout(timer);
        this.onResult = null;
        this.onExit = null;
        resolve(r);
      };
      const fail = (stage: string, why: string): CaseResult => ({
        type: 'result', index: req.index, outcome: 'failure', stage, why, ms: performance.now() - t0, rssBytes: 0,
      });
      const timer = setTimeout(() => {
        this.child = null;
        this.ready = null;
        child.kill('SIGKILL');
        finish(fail('hang', `no answer within ${this.timeoutMs} ms (hang); the child was killed`));
      }, this.timeoutMs);
      this.onResult = (r) => { if (r.index === req.index) finish(r); };
      this.onExit = (code, signal) => {
        finish(fail('crash', `the child died (${signal ? `signal ${signal}` : `exit code ${code}`})${this.tail()}`));
      };
      this.lastIndex = req.index;
      child.send(req);
    });
  }

  private tail(): string {
    const t = this.stderrTail.trim().split('\n').slice(-3).join(' | ');
    return t ? `: ${t}` : '';
  }

  close(): void {
    const child = this.child;
    this.child = null;
    this.ready = null;
    if (child) {
      child.removeAllListeners('exit');
      child.kill('SIGKILL');
    }
  }
}
