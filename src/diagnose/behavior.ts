// Runs the behaviour table (checks.ts) against the server, one greedy request per check, scored by
// the check's own rule; a refusal of the request (400, 413, 422) is a failed check with the server's
// error as its response; other statuses leave it not run (session.ts, replyKind).
import { BEHAVIOR_CHECKS, type BehaviorCheck } from './checks.js';
import { CheckRefused, runCheck, type CheckResult, type Session } from './session.js';

export async function runBehaviorCheck(s: Session, c: BehaviorCheck): Promise<CheckResult> {
  return runCheck(c.id, async () => {
    const body = s.userBody(c.prompt, { maxTokens: c.maxTokens, ...(c.tools ? { tools: c.tools } : {}) });
    let r;
    try {
      r = await s.chat(body);
    } catch (err) {
      if (!(err instanceof CheckRefused)) throw err;
      return { pass: false, response: err.response, expected: c.expected, answer: null, reason: `the server refused the request: ${err.message}` };
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
