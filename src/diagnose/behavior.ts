// Runs the behaviour table (checks.ts) against the server, one greedy request per check, scored by
// the check's own rule; a refusal (4xx) is a failed check with the server's error as its response.
import { BEHAVIOR_CHECKS, type BehaviorCheck } from './checks.js';
import { ok, runCheck, type CheckResult, type Session, errorMessage } from './session.js';

export async function runBehaviorCheck(s: Session, c: BehaviorCheck): Promise<CheckResult> {
  return runCheck(c.id, async () => {
    const body = s.userBody(c.prompt, { maxTokens: c.maxTokens, ...(c.tools ? { tools: c.tools } : {}) });
    const r = await s.chat(body);
    if (!ok(r)) {
      return { pass: false, response: r.body ?? r.text, expected: c.expected, answer: null, reason: `the server refused the request: HTTP ${r.status}: ${errorMessage(r.body, r.text)}` };
    }
    const score = c.score(r.body);
    return { pass: score.pass, response: r.body, expected: c.expected, answer: score.answer, reason: score.reason };
  });
}

export async function runBehavior(s: Session, checks: readonly BehaviorCheck[] = BEHAVIOR_CHECKS): Promise<CheckResult[]> {
  const out: CheckResult[] = [];
  for (const c of checks) out.push(await runBehaviorCheck(s, c));
  return out;
}
